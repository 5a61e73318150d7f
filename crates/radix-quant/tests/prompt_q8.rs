//! A prompt's 8-bit products (`matmul_q8_with` for more than
//! `DOT_MAX_TOKENS` tokens): `W·x̃` for the quantized activations `x̃`,
//! the same bits on every instruction set with integer prompt products, and
//! exact products on those without.
//!
//! Which instruction sets ran is printed (`--nocapture`): the integer
//! kernel is checked against the scalar reference wherever this CPU has
//! AVX-512 VNNI, and the scalar reference against an f64 product everywhere.

mod common;

use common::{Codes, FineGrained, Rng, random_weights, random_x, reference};
use radix_quant::{
    Config, DOT_MAX_TOKENS, Format, Isa, Parallel, ScopedThreads, Serial, dequantize,
    matmul_q8_with, matmul_with, quantize_q8_0,
};

/// The formats with integer prompt products.
const CODED: [Format; 8] = [
    Format::Q8_0,
    Format::Q4_0,
    Format::Q4_1,
    Format::Q5_0,
    Format::Q5_1,
    Format::Q4_K,
    Format::Q5_K,
    Format::Q6_K,
];

/// Shapes that leave partial tiles of rows (8) and groups of tokens (16).
const SHAPES: [(usize, usize, usize); 3] = [(13, 256, 17), (8, 512, 33), (21, 256, 40)];

fn run(
    isa: Isa,
    parallel: &dyn Parallel,
    format: Format,
    w: &[u8],
    (rows, cols, n): (usize, usize, usize),
    x: &[f32],
) -> Vec<f32> {
    let config = Config { isa, parallel };
    let mut y = vec![f32::NAN; n * rows];
    matmul_q8_with(&config, format, w, rows, cols, n, x, &mut y).expect("shapes");
    y
}

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

/// `x` as the kernels multiply it: each token quantized to Q8_0 and decoded.
fn quantized(x: &[f32], cols: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for x in x.chunks_exact(cols) {
        let mut blocks = vec![0u8; Format::Q8_0.row_bytes(cols).expect("whole blocks")];
        quantize_q8_0(x, &mut blocks).expect("whole blocks");
        let mut back = vec![0.0f32; cols];
        dequantize(Format::Q8_0, &blocks, &mut back).expect("whole blocks");
        out.extend(back);
    }
    out
}

/// The scalar reference is `W·x̃` within f32 rounding: compared with an f64
/// product of the reference dequantization and the quantized activations.
/// Each output sums `cols` products in sub-blocks, each split into a scaled
/// integer sum and a minimum times the activations' sum, so the tolerance is
/// sized for `cols` terms of at most `3·max|w|·max|x̃|` (the minimum's part
/// and the codes' part each bounded by the weights they make).
#[test]
fn scalar_reference_is_w_times_quantized_x() {
    let mut rng = Rng(41);
    let eps = f64::from(f32::EPSILON);
    for format in CODED {
        for shape @ (rows, cols, n) in SHAPES {
            let w = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
            let x = random_x(n * cols, &mut rng);
            let xq = quantized(&x, cols);
            let (expected, _) = reference(format, &w, rows, cols, &xq);
            let mut wd = vec![0.0f32; rows * cols];
            dequantize(format, &w, &mut wd).expect("whole blocks");
            let y = run(Isa::SCALAR, &Serial, format, &w, shape, &x);
            for (i, (&g, &e)) in y.iter().zip(&expected).enumerate() {
                let (t, r) = (i / rows, i % rows);
                let max_w = wd[r * cols..][..cols]
                    .iter()
                    .fold(0.0f32, |a, v| a.max(v.abs()));
                let max_x = xq[t * cols..][..cols]
                    .iter()
                    .fold(0.0f32, |a, v| a.max(v.abs()));
                let tol =
                    2.0 * eps * cols as f64 * 3.0 * f64::from(max_w * max_x) + 4.0 * eps * e.abs();
                assert!(
                    (f64::from(g) - e).abs() <= tol,
                    "{format:?} {shape:?} token {t} row {r}: {g} vs {e} (tol {tol:e})"
                );
            }
        }
    }
}

/// Every instruction set with integer prompt products gives the scalar
/// reference's bits, whatever the threads; the others give `matmul_with`'s
/// exact products, bit for bit.
#[test]
fn every_instruction_set_gives_the_reference_bits() {
    let mut rng = Rng(43);
    let threads = FineGrained(ScopedThreads::new(3));
    let mut ran = std::collections::BTreeSet::new();
    for format in CODED {
        for shape @ (rows, cols, n) in SHAPES {
            let w = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
            let x = random_x(n * cols, &mut rng);
            let expected = bits(&run(Isa::SCALAR, &Serial, format, &w, shape, &x));
            for isa in Isa::available() {
                let got = bits(&run(isa, &threads, format, &w, shape, &x));
                if isa.integer_prompts() {
                    assert_eq!(got, expected, "{format:?} {shape:?} on {}", isa.name());
                } else {
                    let config = Config {
                        isa,
                        parallel: &threads,
                    };
                    let mut exact = vec![f32::NAN; n * rows];
                    matmul_with(&config, format, &w, rows, cols, n, &x, &mut exact)
                        .expect("shapes");
                    assert_eq!(got, bits(&exact), "{format:?} {shape:?} on {}", isa.name());
                }
                ran.insert(isa.name());
            }
        }
    }
    println!("instruction sets checked: {ran:?}");
}

/// The largest codes and scales, and all-zero blocks: integer sums at their
/// largest (no overflow, no saturation) and zero scales giving zeros.
#[test]
fn extreme_codes_and_zero_scales() {
    let mut rng = Rng(47);
    let (rows, cols, n) = (9, 256, 20);
    for format in CODED {
        for (codes, scale) in [
            (Codes::AllOnes, 1.0),
            (Codes::AllZeros, 1.0),
            (Codes::Random, 0.0),
        ] {
            let w = random_weights(format, rows, cols, codes, scale, &mut rng);
            // Activations at the ends of the code range: ±127 in every block.
            let x: Vec<f32> = (0..n * cols)
                .map(|i| if (i / 3) % 2 == 0 { 1.0 } else { -1.0 })
                .collect();
            let expected = bits(&run(Isa::SCALAR, &Serial, format, &w, (rows, cols, n), &x));
            let xq = quantized(&x, cols);
            let (reference, _) = reference(format, &w, rows, cols, &xq);
            for (&g, &e) in run(Isa::SCALAR, &Serial, format, &w, (rows, cols, n), &x)
                .iter()
                .zip(&reference)
            {
                let tol = 1e-4 * e.abs().max(1.0);
                assert!(
                    (f64::from(g) - e).abs() <= tol,
                    "{format:?} {codes:?}: {g} vs {e}"
                );
                if scale == 0.0 {
                    assert_eq!(g, 0.0, "{format:?}: zero scales give zeros");
                }
            }
            for isa in Isa::available().into_iter().filter(|i| i.integer_prompts()) {
                let got = run(isa, &Serial, format, &w, (rows, cols, n), &x);
                assert_eq!(
                    bits(&got),
                    expected,
                    "{format:?} {codes:?} on {}",
                    isa.name()
                );
            }
        }
    }
}

/// The prompt path starts past `DOT_MAX_TOKENS`; formats without codes
/// (F32, F16) compute exactly what `matmul_with` does there too.
#[test]
fn uncoded_formats_are_exact_in_prompts() {
    let mut rng = Rng(53);
    let (rows, cols, n) = (5, 64, DOT_MAX_TOKENS + 3);
    for format in [Format::F32, Format::F16] {
        let w = random_weights(format, rows, cols, Codes::Random, 1.0, &mut rng);
        let x = random_x(n * cols, &mut rng);
        for isa in Isa::available() {
            let config = Config {
                isa,
                parallel: &Serial,
            };
            let mut exact = vec![f32::NAN; n * rows];
            matmul_with(&config, format, &w, rows, cols, n, &x, &mut exact).expect("shapes");
            let got = run(isa, &Serial, format, &w, (rows, cols, n), &x);
            assert_eq!(bits(&got), bits(&exact), "{format:?} on {}", isa.name());
        }
    }
}
