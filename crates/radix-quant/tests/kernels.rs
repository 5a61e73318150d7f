//! The kernels against "dequantize, then an f32 dot" on random blocks.
//!
//! The kernels decode every weight exactly as `dequantize` does (checked bit
//! for bit in `tests/dequantize.rs`), so only the order of the f32 sums
//! differs from the reference, which is summed in f64 here. Results are
//! compared like `numpy.allclose` with a tolerance sized for an f32 reduction
//! of `n` terms: `abs = 2·eps·n·max|w·x|`, `rel = 4·eps`. Nothing is compared
//! with numbers another CPU made.

mod common;

use common::{Codes, FineGrained, Rng, random_weights, random_x, reference};
use proptest::prelude::*;
use radix_quant::{
    Config, Error, Format, Isa, Parallel, RowLayout, ScopedThreads, Serial, SpinPool, Stacked,
    dequantize, matmul_q8_dots_laid_out_with, matmul_q8_dots_with, matmul_q8_laid_out_with,
    matmul_q8_with, matmul_with, matvec_q8_stacked_with, matvec_q8_with, matvec_with,
    quantize_q8_0, split_rows,
};

/// Runs `matvec` on every token of `x` and `matmul` on all of them, on every
/// instruction set this CPU runs, and compares each with the reference.
fn check(
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    parallel: &dyn Parallel,
) {
    let (expected, max_term) = reference(format, weights, rows, cols, x);
    let n_tokens = x.len() / cols;
    let eps = f64::from(f32::EPSILON);
    let close = |what: &str, isa: Isa, got: &[f32]| {
        for (i, ((&g, &e), &m)) in got.iter().zip(&expected).zip(&max_term).enumerate() {
            let tol = 2.0 * eps * cols as f64 * m + 4.0 * eps * e.abs();
            let err = (f64::from(g) - e).abs();
            assert!(
                err <= tol,
                "{format:?} {what} ({}), {rows}x{cols}, output {i}: {g} vs {e} (err {err:e} > tol {tol:e})",
                isa.name()
            );
        }
    };
    for isa in Isa::available() {
        let config = Config { isa, parallel };
        let mut y = vec![f32::NAN; n_tokens * rows];
        for (x, y) in x.chunks_exact(cols).zip(y.chunks_exact_mut(rows)) {
            matvec_with(&config, format, weights, rows, cols, x, y).expect("shapes");
        }
        close("matvec", isa, &y);
        let mut y = vec![f32::NAN; n_tokens * rows];
        matmul_with(&config, format, weights, rows, cols, n_tokens, x, &mut y).expect("shapes");
        close("matmul", isa, &y);
    }
}

fn format_strategy() -> impl Strategy<Value = Format> {
    prop::sample::select(Format::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random shapes and blocks of every format; the trivial formats get
    /// row lengths that are no multiple of any vector width.
    #[test]
    fn kernels_match_reference(
        format in format_strategy(),
        rows in 1usize..15,
        units in 1usize..5,
        extra in 0usize..40,
        // Past 8 tokens `matmul` takes the tokens-in-lanes kernel; 8 to 24
        // covers whole and partial groups, one and two at a time.
        n_tokens in 1usize..25,
        seed in any::<u64>(),
    ) {
        let cols = if format.block_len() == 1 { 32 * units + extra } else { format.block_len() * units };
        let mut rng = Rng(seed | 1);
        let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        let x = random_x(n_tokens * cols, &mut rng);
        check(format, &weights, rows, cols, &x, &Serial);
    }
}

#[test]
fn extreme_codes() {
    let mut rng = Rng(7);
    for format in Format::ALL {
        for codes in [Codes::AllOnes, Codes::AllZeros] {
            let (rows, cols) = (5, 2 * format.block_len().max(32));
            let weights = random_weights(format, rows, cols, codes, 1.0, &mut rng);
            let x = random_x(3 * cols, &mut rng);
            check(format, &weights, rows, cols, &x, &Serial);
        }
    }
}

/// Q8_0 codes at their limits (-128 and 127) times activations at theirs:
/// with unit scales and integer activations whose blocks reach 127, the
/// 8-bit activations are the activations themselves, and every partial sum
/// is an integer below 2²⁴, so each instruction set's result is the exact
/// integer `Σ w·x`. An odd number of blocks and rows not a multiple of
/// four take the kernels' tails too.
#[test]
fn q8_0_codes_at_their_limits_sum_exactly() {
    let (rows, n_blocks) = (6, 9);
    let cols = 32 * n_blocks;
    let mut rng = Rng(5);
    let mut weights = vec![];
    let mut codes = vec![];
    for r in 0..rows {
        for b in 0..n_blocks {
            weights.extend_from_slice(&half::f16::ONE.to_le_bytes());
            for i in 0..32 {
                let q: i8 = match (r + b + i) % 4 {
                    0 => -128,
                    1 => 127,
                    2 => -1,
                    _ => rng.next() as i8,
                };
                weights.push(q as u8);
                codes.push(i64::from(q));
            }
        }
    }
    let x: Vec<f32> = (0..cols)
        .map(|i| match i % 32 {
            0 => 127.0,
            1 => -127.0,
            _ => ((rng.next() % 255) as i64 - 127) as f32,
        })
        .collect();
    let expected: Vec<f32> = codes
        .chunks_exact(cols)
        .map(|w| w.iter().zip(&x).map(|(&w, &x)| w * x as i64).sum::<i64>() as f32)
        .collect();
    for isa in Isa::available() {
        let config = Config {
            isa,
            parallel: &Serial,
        };
        let mut y = vec![f32::NAN; rows];
        matvec_q8_with(&config, Format::Q8_0, &weights, rows, cols, &x, &mut y).expect("shapes");
        assert_eq!(y, expected, "{}", isa.name());
    }
}

/// Matrices stacked into one product give each matrix the bits it gets
/// alone, on every instruction set, on one thread and on the pool: formats
/// with 8-bit kernels (three of them, one a K-quant, so the token is
/// quantized three times), one without (taken apart), a matrix of no rows,
/// and rows that are not a whole number of row groups; a Q8_0 and a Q4_1
/// matrix again, their rows split ([`RowLayout::Split`]).
#[test]
fn stacked_matrices_get_their_bits_alone() {
    let mut rng = Rng(13);
    let cols = 256;
    let shapes = [
        (Format::Q4_1, 37),
        (Format::Q8_0, 8),
        (Format::Q4_K, 5),
        (Format::F16, 3),
        (Format::Q4_1, 0),
        (Format::Q4_1, 130),
    ];
    let weights: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(f, rows)| random_weights(f, rows, cols, Codes::Random, 1.0, &mut rng))
        .collect();
    let matrices: Vec<Stacked> = shapes
        .iter()
        .zip(&weights)
        .map(|(&(format, rows), weights)| Stacked {
            format,
            weights,
            rows,
            layout: RowLayout::Blocks,
        })
        .collect();
    let mut split = vec![0u8; weights[1].len()];
    split_rows(Format::Q8_0, cols, &weights[1], &mut split).expect("whole rows");
    let mut split_q4_1 = vec![0u8; weights[5].len()];
    split_rows(Format::Q4_1, cols, &weights[5], &mut split_q4_1).expect("whole rows");
    let mut matrices = matrices;
    matrices.push(Stacked {
        weights: &split,
        layout: RowLayout::Split,
        ..matrices[1]
    });
    matrices.push(Stacked {
        weights: &split_q4_1,
        layout: RowLayout::Split,
        ..matrices[5]
    });
    let x = random_x(cols, &mut rng);
    let pool = SpinPool::new(2);
    for isa in Isa::available() {
        for parallel in [&Serial as &dyn Parallel, &pool] {
            let config = Config { isa, parallel };
            let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let mut alone = vec![];
            for m in &matrices[..shapes.len()] {
                let mut y = vec![f32::NAN; m.rows];
                matvec_q8_with(&config, m.format, m.weights, m.rows, cols, &x, &mut y)
                    .expect("shapes");
                alone.push(bits(&y));
            }
            // The split matrices: the bits of their rows as blocks.
            alone.push(alone[1].clone());
            alone.push(alone[5].clone());
            let mut ys: Vec<Vec<f32>> = matrices.iter().map(|m| vec![f32::NAN; m.rows]).collect();
            let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
            matvec_q8_stacked_with(&config, &matrices, cols, &x, &mut outs).expect("shapes");
            let got: Vec<Vec<u32>> = ys.iter().map(|y| bits(y)).collect();
            assert_eq!(got, alone, "{}", isa.name());
        }
    }
    // An output too short, and one missing: errors, every output left alone.
    let config = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    let mut ys: Vec<Vec<f32>> = matrices.iter().map(|m| vec![f32::NAN; m.rows]).collect();
    ys[5].pop();
    let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
    assert_eq!(
        matvec_q8_stacked_with(&config, &matrices, cols, &x, &mut outs),
        Err(Error::Length {
            what: "y",
            expected: 130,
            got: 129
        })
    );
    assert_eq!(
        matvec_q8_stacked_with(&config, &matrices, cols, &x, &mut outs[..5]),
        Err(Error::Length {
            what: "ys (outputs)",
            expected: 8,
            got: 5
        })
    );
    assert!(
        ys.iter().flatten().all(|v| v.is_nan()),
        "outputs are left alone"
    );
}

/// Q8_0, Q4_0, Q4_1 and Q5_0 rows split at load give the bits their blocks give, on every
/// instruction set (the VNNI dot reads them in place, the others join them
/// first): a decode token, batches of sequences, prompts (tiles), odd
/// numbers of blocks and more than 16 of them, and rows that are not a
/// whole number of row groups. Other formats are refused.
#[test]
fn split_rows_give_the_bits_of_blocks() {
    let mut rng = Rng(31);
    let pool = SpinPool::new(2);
    let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let cases = [(1, 32), (7, 96), (33, 576), (9, 1056), (6, 160)];
    for (format, (rows, cols)) in [Format::Q8_0, Format::Q4_0, Format::Q4_1, Format::Q5_0]
        .into_iter()
        .flat_map(|f| cases.map(|c| (f, c)))
    {
        let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        let mut split = vec![0u8; weights.len()];
        split_rows(format, cols, &weights, &mut split).expect("whole rows");
        for n_tokens in [1, 2, 5, 16, 17, 40] {
            let x: Vec<f32> = (0..n_tokens)
                .flat_map(|_| random_x(cols, &mut rng))
                .collect();
            for isa in Isa::available() {
                for parallel in [&Serial as &dyn Parallel, &pool] {
                    let config = Config { isa, parallel };
                    let at = format!("{format:?} {} {rows}x{cols}, {n_tokens}", isa.name());
                    let run = |f: &dyn Fn(&mut [f32]) -> Result<(), Error>| {
                        let mut y = vec![f32::NAN; n_tokens * rows];
                        f(&mut y).expect("shapes");
                        bits(&y)
                    };
                    let (r, c, n, f) = (rows, cols, n_tokens, format);
                    let (w, shape) = ((f, RowLayout::Split, &split[..]), (r, c, n));
                    let blocks = run(&|y| matmul_q8_with(&config, f, &weights, r, c, n, &x, y));
                    let got = run(&|y| matmul_q8_laid_out_with(&config, w, shape, &x, y));
                    assert_eq!(got, blocks, "matmul_q8 {at}");
                    let blocks =
                        run(&|y| matmul_q8_dots_with(&config, f, &weights, r, c, n, &x, y));
                    let got = run(&|y| matmul_q8_dots_laid_out_with(&config, w, shape, &x, y));
                    assert_eq!(got, blocks, "matmul_q8_dots {at}");
                }
            }
        }
    }
    let config = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    let mut y = [f32::NAN; 2];
    let w = (Format::Q5_1, RowLayout::Split, &[0u8; 48][..]);
    let err = matmul_q8_laid_out_with(&config, w, (2, 32, 1), &[0.0; 32], &mut y);
    assert_eq!(err, Err(Error::NoSplit(Format::Q5_1)));
    assert!(y.iter().all(|v| v.is_nan()), "y is left alone");
}

#[test]
fn all_zero_scales_give_zeros() {
    let mut rng = Rng(11);
    for format in Format::ALL {
        let (rows, cols) = (3, 2 * format.block_len().max(32));
        let weights = random_weights(format, rows, cols, Codes::Random, 0.0, &mut rng);
        let x = random_x(2 * cols, &mut rng);
        for isa in Isa::available() {
            let config = Config {
                isa,
                parallel: &Serial,
            };
            let mut y = vec![f32::NAN; rows];
            matvec_with(&config, format, &weights, rows, cols, &x[..cols], &mut y).expect("shapes");
            assert!(
                y.iter().all(|&v| v == 0.0),
                "{format:?} matvec ({}): {y:?}",
                isa.name()
            );
            let mut y = vec![f32::NAN; 2 * rows];
            matmul_with(&config, format, &weights, rows, cols, 2, &x, &mut y).expect("shapes");
            assert!(
                y.iter().all(|&v| v == 0.0),
                "{format:?} matmul ({}): {y:?}",
                isa.name()
            );
        }
    }
}

/// Row lengths that are whole blocks but leave a remainder after the
/// kernels' 8-lane and 32-element steps, and a single row.
#[test]
fn odd_lengths_and_one_row() {
    let mut rng = Rng(13);
    for (format, cols) in [
        (Format::F32, 13),
        (Format::F16, 45),
        (Format::BF16, 71),
        (Format::F32, 1),
        (Format::Q8_0, 96),
        (Format::Q4_1, 32),
        (Format::Q6_K, 768),
    ] {
        for rows in [1, 6] {
            let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
            let x = random_x(5 * cols, &mut rng);
            check(format, &weights, rows, cols, &x, &Serial);
        }
    }
}

/// Below a group of lanes (2 to 7 tokens, a batch of decoding sequences), a
/// token's products are the same bit for bit whichever tokens come with it,
/// so a sequence decodes the same numbers in any batch of that size.
#[test]
fn companions_do_not_change_a_token() {
    let mut rng = Rng(23);
    for (format, rows, cols) in [
        (Format::Q4_1, 37, 256),
        (Format::Q4_K, 9, 512),
        (Format::F32, 11, 70),
    ] {
        let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        let x = random_x(7 * cols, &mut rng);
        for isa in Isa::available() {
            let config = Config {
                isa,
                parallel: &Serial,
            };
            let products = |x: &[f32]| {
                let n = x.len() / cols;
                let mut y = vec![f32::NAN; n * rows];
                matmul_with(&config, format, &weights, rows, cols, n, x, &mut y).expect("shapes");
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            for n in 2..=7 {
                let all = products(&x[..n * cols]);
                for t in 0..n {
                    let token = &x[t * cols..(t + 1) * cols];
                    let alone = products(&[token, token].concat());
                    assert_eq!(
                        all[t * rows..(t + 1) * rows],
                        alone[..rows],
                        "{format:?} ({}): token {t} of {n}",
                        isa.name()
                    );
                }
            }
        }
    }
}

/// With 8-bit activations, a step of several sequences' tokens
/// (`matmul_q8_dots_with`, any number of them: the VNNI kernel takes them
/// in groups that share each row's decoded codes) gives every token the
/// bits `matvec_q8_with` gives it alone, for every format with integer
/// dots, on every instruction set this CPU runs, with or without a partial
/// group and a partial pair or group of 16 blocks (for the K-quants, one
/// super-block and three).
#[test]
fn a_token_among_many_gets_its_dots_alone() {
    let mut rng = Rng(29);
    let formats = [
        Format::Q8_0,
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q4_K,
        Format::Q5_K,
        Format::Q6_K,
    ];
    let threads = FineGrained(ScopedThreads::new(3));
    for format in formats {
        let shapes = match format.block_len() {
            256 => [(13, 256), (5, 768)],
            _ => [(13, 576), (5, 32 * 19)],
        };
        for (rows, cols) in shapes {
            let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
            let n = 23;
            let x = random_x(n * cols, &mut rng);
            for isa in Isa::available() {
                let config = Config {
                    isa,
                    parallel: &threads,
                };
                let mut all = vec![f32::NAN; n * rows];
                matmul_q8_dots_with(&config, format, &weights, rows, cols, n, &x, &mut all)
                    .expect("shapes");
                for (t, (x, all)) in x.chunks_exact(cols).zip(all.chunks_exact(rows)).enumerate() {
                    let mut alone = vec![f32::NAN; rows];
                    matvec_q8_with(&config, format, &weights, rows, cols, x, &mut alone)
                        .expect("shapes");
                    let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(all),
                        bits(&alone),
                        "{format:?} {rows}x{cols} ({}): token {t} of {n}",
                        isa.name()
                    );
                }
            }
        }
    }
}

/// Many threads compute every output with the same code as one thread, so
/// the results are equal bit for bit, with the rows split into many tasks
/// (or, for a prompt's F32 products, the tokens: 100 of them).
#[test]
fn threads_do_not_change_results() {
    let mut rng = Rng(17);
    for (format, rows, cols, prompt) in [
        (Format::Q8_0, 1003, 256, 21),
        (Format::Q4_1, 2001, 512, 21),
        (Format::Q6_K, 301, 768, 21),
        (Format::F16, 1200, 70, 21),
        (Format::F32, 301, 70, 100),
    ] {
        let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        for n_tokens in [3, prompt] {
            let x = random_x(n_tokens * cols, &mut rng);
            for isa in Isa::available() {
                let run = |parallel: &dyn Parallel| {
                    let config = Config { isa, parallel };
                    let mut mv = vec![f32::NAN; rows];
                    matvec_with(&config, format, &weights, rows, cols, &x[..cols], &mut mv)
                        .expect("shapes");
                    let mut mm = vec![f32::NAN; n_tokens * rows];
                    matmul_with(&config, format, &weights, rows, cols, n_tokens, &x, &mut mm)
                        .expect("shapes");
                    (
                        mv.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        mm.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    )
                };
                let one = run(&Serial);
                for n in [2, 3, 7] {
                    assert!(
                        one == run(&FineGrained(ScopedThreads::new(n))),
                        "{format:?} ({}): {n} threads differ from one",
                        isa.name()
                    );
                }
                let coarse = run(&ScopedThreads::new(2));
                assert!(
                    one == coarse,
                    "{format:?} ({}): scoped threads differ",
                    isa.name()
                );
            }
            check(
                format,
                &weights,
                rows,
                cols,
                &x,
                &FineGrained(ScopedThreads::new(3)),
            );
        }
    }
}

#[test]
fn bad_lengths_are_errors_and_leave_y_alone() {
    let config = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    let (rows, cols) = (2, 64);
    let weights = vec![0u8; rows * Format::Q8_0.row_bytes(cols).expect("whole blocks")];
    let x = vec![1.0f32; cols];
    let mut y = vec![f32::NAN; rows];
    let mv = |w: &[u8], cols: usize, x: &[f32], y: &mut [f32]| {
        matvec_with(&config, Format::Q8_0, w, rows, cols, x, y)
    };
    assert_eq!(
        mv(&weights, 48, &x[..48], &mut y),
        Err(Error::PartialBlock {
            format: Format::Q8_0,
            cols: 48,
            block_len: 32
        })
    );
    assert_eq!(
        mv(&weights[1..], cols, &x, &mut y),
        Err(Error::Length {
            what: "weights (bytes)",
            expected: 136,
            got: 135
        })
    );
    assert_eq!(
        mv(&weights, cols, &x[1..], &mut y),
        Err(Error::Length {
            what: "x",
            expected: 64,
            got: 63
        })
    );
    assert_eq!(
        mv(&weights, cols, &x, &mut y[1..]),
        Err(Error::Length {
            what: "y",
            expected: 2,
            got: 1
        })
    );
    assert!(y.iter().all(|v| v.is_nan()));
    let mut y2 = vec![f32::NAN; 2 * rows];
    assert_eq!(
        matmul_with(&config, Format::Q8_0, &weights, rows, cols, 2, &x, &mut y2),
        Err(Error::Length {
            what: "x",
            expected: 128,
            got: 64
        })
    );
    assert!(y2.iter().all(|v| v.is_nan()));
    let mut out = vec![0.0f32; 33];
    assert_eq!(
        dequantize(Format::Q8_0, &weights[..34], &mut out),
        Err(Error::PartialBlock {
            format: Format::Q8_0,
            cols: 33,
            block_len: 32
        })
    );
    assert_eq!(
        dequantize(Format::Q8_0, &weights[..35], &mut out[..32]),
        Err(Error::Length {
            what: "bytes",
            expected: 34,
            got: 35
        })
    );
}

/// `quantize_q8_0` rounds each value to the nearest step of its block's
/// scale `max|x| / 127`, which is stored as f16 (a relative error of 2⁻¹¹).
#[test]
fn q8_activations_round_to_nearest() {
    let mut rng = Rng(19);
    let mut x = random_x(32 * 6, &mut rng);
    x[32..64].fill(0.0);
    x[64] = 1000.0;
    let mut xq = vec![0u8; 34 * 6];
    quantize_q8_0(&x, &mut xq).expect("whole blocks");
    let mut back = vec![0.0f32; x.len()];
    dequantize(Format::Q8_0, &xq, &mut back).expect("whole blocks");
    for (x, back) in x.chunks_exact(32).zip(back.chunks_exact(32)) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        for (&v, &b) in x.iter().zip(back) {
            assert!(
                (v - b).abs() <= amax * (0.5 / 127.0 + 1.0 / 1024.0),
                "{v} quantized to {b} (max {amax})"
            );
        }
    }
    assert_eq!(
        quantize_q8_0(&x[..33], &mut xq),
        Err(Error::PartialBlock {
            format: Format::Q8_0,
            cols: 33,
            block_len: 32
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `matvec_q8_with` is `W·x̃` for the quantized activations `x̃`: compared
    /// with the f64 reference on `dequantize(quantize_q8_0(x))`. The kernels
    /// split Q4_1's and Q5_1's `d·q + m` (Q4_K's and Q5_K's `d·sc·q - dmin·m`)
    /// into two sums, so the tolerance counts `|m·x|` (`|dmin·m·x|`, `m` up
    /// to 63) terms too, and the VNNI dot splits Q4_0's `d·(q - 8)` (Q5_0's
    /// `d·(q - 16)`) into `d·q` and `-8·d` (`-16·d`), so it counts `|16·d·x|`
    /// (`|32·d·x|`) terms. Formats without an 8-bit kernel must equal
    /// `matvec_with`.
    #[test]
    fn q8_kernels_match_reference(
        format in format_strategy(),
        rows in 1usize..7,
        n_blocks in 1usize..20,
        seed in any::<u64>(),
    ) {
        // An odd number of 32-element blocks too: the kernels take them in pairs.
        let cols = if format.block_len() == 256 { 256 * n_blocks.div_ceil(4) } else { 32 * n_blocks };
        let mut rng = Rng(seed | 1);
        let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        let x = random_x(cols, &mut rng);
        let mut xq = vec![0u8; Format::Q8_0.row_bytes(cols).expect("whole blocks")];
        quantize_q8_0(&x, &mut xq).expect("whole blocks");
        let mut xd = vec![0.0f32; cols];
        dequantize(Format::Q8_0, &xq, &mut xd).expect("whole blocks");
        let (expected, mut max_term) = reference(format, &weights, rows, cols, &xd);
        // The second sum's largest term: Q4_1's and Q5_1's minimum, Q4_0's and
        // Q5_0's offset times the scale (with the same headroom).
        let second_term = |block: &[u8]| -> f64 {
            let f16_at = |at: usize| f64::from(half::f16::from_le_bytes([block[at], block[at + 1]]).to_f32()).abs();
            match format {
                Format::Q4_1 | Format::Q5_1 => 3.0 * f16_at(2),
                Format::Q4_0 => 16.0 * f16_at(0),
                Format::Q5_0 => 32.0 * f16_at(0),
                _ => 0.0,
            }
        };
        let row_bytes = format.row_bytes(cols).expect("whole blocks");
        for (r, m) in max_term.iter_mut().enumerate() {
            let blocks = weights[r * row_bytes..][..row_bytes].chunks_exact(format.block_bytes());
            let len = format.block_len();
            for (b, block) in blocks.enumerate() {
                let c = second_term(block);
                for &x in &xd[(len * b).min(cols)..(len * (b + 1)).min(cols)] {
                    *m = m.max(c * f64::from(x).abs());
                }
            }
        }
        let eps = f64::from(f32::EPSILON);
        for isa in Isa::available() {
            let config = Config { isa, parallel: &Serial };
            let mut y = vec![f32::NAN; rows];
            matvec_q8_with(&config, format, &weights, rows, cols, &x, &mut y).expect("shapes");
            if matches!(format, Format::F32 | Format::F16 | Format::BF16) {
                let mut y_f32 = vec![f32::NAN; rows];
                matvec_with(&config, format, &weights, rows, cols, &x, &mut y_f32).expect("shapes");
                prop_assert_eq!(y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), y_f32.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
                continue;
            }
            for (i, ((&g, &e), &m)) in y.iter().zip(&expected).zip(&max_term).enumerate() {
                let tol = 2.0 * eps * cols as f64 * m + 4.0 * eps * e.abs();
                prop_assert!((f64::from(g) - e).abs() <= tol, "{:?} ({}) output {}: {} vs {} (tol {:e})", format, isa.name(), i, g, e, tol);
            }
        }
    }
}

/// Empty shapes are no error: no rows, no tokens, or rows of no elements
/// (empty dots, zero).
#[test]
fn empty_shapes() {
    for isa in Isa::available() {
        let config = Config {
            isa,
            parallel: &Serial,
        };
        for format in [Format::Q4_1, Format::F32] {
            let mut y = vec![f32::NAN; 3];
            matvec_with(&config, format, &[], 3, 0, &[], &mut y).expect("empty rows");
            assert_eq!(y, [0.0; 3]);
            y.fill(f32::NAN);
            matvec_q8_with(&config, format, &[], 3, 0, &[], &mut y).expect("empty rows");
            assert_eq!(y, [0.0; 3]);
            let mut y2 = vec![f32::NAN; 6];
            matmul_with(&config, format, &[], 3, 0, 2, &[], &mut y2).expect("empty rows");
            assert_eq!(y2, [0.0; 6]);
            let x = vec![1.0f32; 64];
            matvec_with(&config, format, &[], 0, 64, &x, &mut []).expect("no rows");
            matmul_with(&config, format, &[], 0, 64, 1, &x, &mut []).expect("no rows");
            let weights = random_weights(format, 2, 64, Codes::Random, 1.0, &mut Rng(3));
            matmul_with(&config, format, &weights, 2, 64, 0, &[], &mut []).expect("no tokens");
        }
    }
    let config = Config {
        isa: Isa::SCALAR,
        parallel: &Serial,
    };
    assert_eq!(
        matvec_with(
            &config,
            Format::Q8_0,
            &[],
            usize::MAX,
            64,
            &[0.0; 64],
            &mut []
        ),
        Err(Error::TooLarge { what: "weights" })
    );
}

/// A prompt's products with the tokens in vector lanes are the same chain
/// of multiply-adds whatever the vector width: AVX-512's 16 lanes give
/// AVX2's results bit for bit (on a CPU with both; the test names the
/// instruction sets it compared).
#[test]
fn lane_widths_give_the_same_bits() {
    let mut rng = Rng(17);
    let lanes: Vec<Isa> = Isa::available()
        .into_iter()
        .filter(|isa| isa.name() != "scalar")
        .collect();
    let names: Vec<&str> = lanes.iter().map(|isa| isa.name()).collect();
    eprintln!("lane kernels compared: {names:?}");
    for format in [Format::Q4_1, Format::Q8_0, Format::Q4_K, Format::F32] {
        let (rows, cols) = (14, 2 * format.block_len().max(32));
        let weights = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        // Two full groups of 16 and a partial one.
        let n_tokens = 37;
        let x = random_x(n_tokens * cols, &mut rng);
        let outputs: Vec<Vec<u32>> = lanes
            .iter()
            .map(|&isa| {
                let config = Config {
                    isa,
                    parallel: &Serial,
                };
                let mut y = vec![f32::NAN; n_tokens * rows];
                matmul_with(&config, format, &weights, rows, cols, n_tokens, &x, &mut y)
                    .expect("shapes");
                y.iter().map(|v| v.to_bits()).collect()
            })
            .collect();
        for (isa, y) in names.iter().zip(&outputs).skip(1) {
            assert_eq!(y, &outputs[0], "{format:?}: {isa} vs {}", names[0]);
        }
    }
}

/// Real files hold scales that are f16 subnormals (Gemma 3 270M Q4_K_M's
/// Q6_K blocks: `d` under 2⁻¹⁴), and XLA runs custom calls on threads that
/// treat subnormal f32 inputs as zero (DAZ and FTZ). Every product path,
/// on every instruction set, gives the same bits on such a thread as on
/// one that does not flush, with every scale and minimum subnormal in f16
/// and activations large enough that no f32 step is subnormal itself; and
/// the results are not zeros.
#[cfg(target_arch = "x86_64")]
#[test]
fn subnormal_scales_survive_a_thread_that_flushes_subnormals() {
    let mut rng = Rng(53);
    for format in Format::ALL {
        if format.block_len() == 1 {
            continue; // no scales
        }
        let (rows, cols) = (9, 512);
        let mut w = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        let offsets = radix_quant::blocks::f16_offsets(format);
        for block in w.chunks_exact_mut(format.block_bytes()) {
            for &at in &offsets {
                // 1..1024 times 2^-24: the f16 subnormals, either sign.
                let bits = (1 + rng.below(1023)) as u16 | (rng.below(2) as u16) << 15;
                block[at..at + 2].copy_from_slice(&bits.to_le_bytes());
            }
        }
        let x: Vec<f32> = random_x(20 * cols, &mut rng)
            .iter()
            .map(|v| 1e3 * v)
            .collect();
        for isa in Isa::available() {
            let config = Config {
                isa,
                parallel: &Serial,
            };
            let all = |y: &mut Vec<f32>| {
                let mut out = vec![];
                for n in [1, 3, 20] {
                    y.resize(n * rows, f32::NAN);
                    let x = &x[..n * cols];
                    matmul_with(&config, format, &w, rows, cols, n, x, y).expect("shapes");
                    out.extend(y.iter().map(|v| v.to_bits()));
                    radix_quant::matmul_q8_with(&config, format, &w, rows, cols, n, x, y)
                        .expect("shapes");
                    out.extend(y.iter().map(|v| v.to_bits()));
                }
                out
            };
            let plain = all(&mut vec![]);
            let flushed = {
                let _flush = radix_quant::testing::FlushSubnormals::new();
                all(&mut vec![])
            };
            assert!(
                plain.iter().any(|&b| f32::from_bits(b).abs() > 0.0),
                "{format:?}: results, not zeros"
            );
            assert_eq!(flushed, plain, "{format:?} on {}", isa.name());
        }
    }
}
