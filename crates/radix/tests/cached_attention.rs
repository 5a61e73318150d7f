//! `nn::cached_attention` against attention computed in f64 here: queries
//! at their own positions over a cache with more rows and positions than
//! the step uses, with and without a sliding window, over an f32, an f16
//! and a Q8_0 cache, through the interpreter, the CPU plugin's kernel and
//! the in-graph fallback; and `KvCache::write` into a Q8_0 cache against
//! blocks quantized here as ggml's `quantize_row_q8_0_ref` does.

mod blocks;

use blocks::Rng;
use radix::nn::{CacheType, KvCache, cached_attention};
use radix::testing::{Tol, assert_all_close, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Program, Shape};

/// The sizes: 2 rows of 11 queries (more than the kernel's block of 8
/// queries a task takes together), 4 query heads over 2 key/value heads of
/// width 64 (two Q8_0 blocks), a cache of 3 rows and 24 positions.
const ROWS: usize = 2;
const N_Q: usize = 11;
const HEADS: usize = 4;
const KV: usize = 2;
const HD: usize = 64;
const CACHE_ROWS: usize = 3;
const CAPACITY: usize = 24;

/// `program` on `inputs` compiled with custom calls run as `mode`.
fn run(program: Program, inputs: &[Literal], mode: CustomCallMode) -> Vec<f32> {
    run_program_with(program, inputs, mode).expect("compile and run")[0].to_vec::<f32>()
}

fn f32_literal(values: &[f32], axes: &[(&str, i64)]) -> Literal {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Literal::from_bytes(Shape::tagged(DType::F32, axes), &bytes)
}

/// `values` (f32 `(b, k, h, hd)` of `CACHE_ROWS`, `CAPACITY`, `KV`, `HD`)
/// stored as a cache of `ty`: the literal, and the values it holds.
fn cache_literal(values: &[f32], ty: CacheType) -> (Literal, Vec<f32>) {
    let (rows, cap) = (CACHE_ROWS as i64, CAPACITY as i64);
    let shape = KvCache::shape(rows, cap, KV as i64, HD as i64, ty).expect("a cache shape");
    let (bytes, held): (Vec<u8>, Vec<f32>) = match ty {
        CacheType::F32 => (
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            values.to_vec(),
        ),
        CacheType::F16 => {
            let h: Vec<half::f16> = values.iter().map(|&v| half::f16::from_f32(v)).collect();
            let bytes = h.iter().flat_map(|v| v.to_le_bytes()).collect();
            (bytes, h.iter().map(|v| v.to_f32()).collect())
        }
        CacheType::Q8_0 => {
            let bytes = quantize_q8_0(values);
            let held = dequantize_q8_0(&bytes);
            (bytes, held)
        }
    };
    (Literal::from_bytes(shape, &bytes), held)
}

/// `x` (whole blocks of 32) as ggml's `quantize_row_q8_0_ref` writes it:
/// per block an f16 `d = amax / 127` (two little-endian bytes), then the 32
/// codes `roundf(x · id)` as `i8`, where `id = 1 / d` (0 where `d` is).
fn quantize_q8_0(x: &[f32]) -> Vec<u8> {
    let mut out = vec![];
    for block in x.chunks_exact(32) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend(half::f16::from_f32(d).to_le_bytes());
        out.extend(block.iter().map(|&v| (v * id).round() as i8 as u8));
    }
    out
}

/// The values of Q8_0 blocks: `d · q`.
fn dequantize_q8_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![];
    for block in bytes.chunks_exact(34) {
        let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        out.extend(block[2..].iter().map(|&q| f32::from(q as i8) * d));
    }
    out
}

/// Attention in f64: query `(row, i)` at `pos[row][i]` reads the keys at
/// positions `..= pos` (the last `window` of them when `window > 0`); query
/// head `h` reads key head `h / (HEADS / KV)`. Also the largest `|p v|`
/// term, which sizes the tolerance.
fn reference(q: &[f32], k: &[f32], v: &[f32], pos: &[i32], window: usize) -> (Vec<f32>, f64) {
    let at = |row: usize, p: usize, g: usize| ((row * CAPACITY + p) * KV + g) * HD;
    let mut out = vec![0f32; ROWS * N_Q * HEADS * HD];
    let mut scale = 0f64;
    for row in 0..ROWS {
        for i in 0..N_Q {
            let p = pos[row * N_Q + i] as usize;
            let first = if window > 0 {
                (p + 1).saturating_sub(window)
            } else {
                0
            };
            for h in 0..HEADS {
                let g = h / (HEADS / KV);
                let qh = &q[((row * N_Q + i) * HEADS + h) * HD..][..HD];
                let scores: Vec<f64> = (first..=p)
                    .map(|j| {
                        let kj = &k[at(row, j, g)..][..HD];
                        let dot: f64 = qh
                            .iter()
                            .zip(kj)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        dot / (HD as f64).sqrt()
                    })
                    .collect();
                let e = radix::testing::softmax_f64(&scores);
                for d in 0..HD {
                    let o: f64 = (first..=p)
                        .zip(&e)
                        .map(|(j, w)| {
                            let term = w * f64::from(v[at(row, j, g) + d]);
                            scale = scale.max(term.abs());
                            term
                        })
                        .sum();
                    out[((row * N_Q + i) * HEADS + h) * HD + d] = o as f32;
                }
            }
        }
    }
    (out, scale)
}

/// The kernel, the fallback and the interpreter against [`reference`] over
/// a cache of `ty` (whose values, as stored, the reference reads).
fn check(window: Option<i64>, ty: CacheType) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let n_cache = CACHE_ROWS * CAPACITY * KV * HD;
    let q: Vec<f32> = (0..ROWS * N_Q * HEADS * HD).map(|_| rng.unit()).collect();
    let mut cached = || cache_literal(&(0..n_cache).map(|_| rng.unit()).collect::<Vec<_>>(), ty);
    let ((k_literal, k), (v_literal, v)) = (cached(), cached());
    // A prompt from 0 in row 0, its next tokens from position 9 in row 1,
    // the last query alone in its block (the cache's third row and its last
    // positions are never read).
    let pos: Vec<i32> = (0..11).chain(9..20).collect();
    assert_eq!(pos.len(), ROWS * N_Q);
    let q_axes = [
        ("b", ROWS as i64),
        ("q", N_Q as i64),
        ("h", HEADS as i64),
        ("hd", HD as i64),
    ];
    let inputs = [
        f32_literal(&q, &q_axes),
        k_literal,
        v_literal,
        Literal::from_bytes(
            Shape::tagged(DType::I32, &[("b", ROWS as i64), ("q", N_Q as i64)]),
            &pos.iter()
                .flat_map(|p| p.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
    ];
    let program = trace_fn(&inputs, |t| {
        let cache = KvCache { k: t[1], v: t[2] };
        cached_attention(t[0], t[3], cache, window)
    })
    .expect("trace");
    let (want, scale) = reference(&q, &k, &v, &pos, window.unwrap_or(0) as usize);
    let tol = Tol::sum(DType::F32, CAPACITY * HD, scale.max(1.0));
    let what = |how: &str| format!("window {window:?}, a {} cache, {how}", ty.name());
    let interp = program.interpret(&inputs)[0].to_vec::<f32>();
    assert_all_close(&what("interpreter"), &interp, &want, tol);
    let native = run(program.clone(), &inputs, CustomCallMode::Native);
    assert_all_close(&what("kernel"), &native, &want, tol);
    let fallback = run(program, &inputs, CustomCallMode::Fallback);
    assert_all_close(&what("fallback"), &fallback, &want, tol);
}

#[test]
fn attends_over_the_positions_each_query_may_read() {
    check(None, CacheType::F32);
}

#[test]
fn a_window_hides_the_older_positions() {
    check(Some(3), CacheType::F32);
}

#[test]
fn reads_an_f16_cache() {
    check(None, CacheType::F16);
    check(Some(3), CacheType::F16);
}

#[test]
fn reads_a_q8_0_cache() {
    check(None, CacheType::Q8_0);
    check(Some(3), CacheType::Q8_0);
}

#[test]
fn misuse_is_a_trace_error() {
    let q = Literal::from_bytes(
        Shape::tagged(DType::F32, &[("q", 2), ("hd", 4)]),
        &[0u8; 32],
    );
    let err = trace_fn(&[q], |t| {
        let cache = KvCache { k: t[0], v: t[0] };
        cached_attention(t[0], t[0], cache, None)
    })
    .expect_err("q has no b or h axis");
    assert!(err.to_string().contains("cached_attention"), "{err}");
}

/// New keys for [`KvCache::write`]'s Q8_0 test, `(b, k, h, hd)` of 2, 3,
/// `KV`, `HD`: one block of each kind below, then random blocks of random
/// magnitude.
fn new_keys(rng: &mut Rng) -> Vec<f32> {
    let n = 2 * 3 * KV * HD;
    let mut x: Vec<f32> = (0..n / 32)
        .flat_map(|_| {
            let magnitude = 10f32.powi(rng.below(9) as i32 - 4);
            (0..32).map(|_| rng.unit() * magnitude).collect::<Vec<_>>()
        })
        .collect();
    // Zeros (a scale of 0), then halves (amax 127: d = 1, every code a
    // tie, rounded away from zero), then a block whose f16 scale is
    // subnormal, then one near f16's largest scale.
    x[..32].fill(0.0);
    for (j, v) in x[32..64].iter_mut().enumerate() {
        *v = (j as f32 - 16.0) * 7.0 + 0.5;
    }
    x[63] = 127.0;
    x[64..96].iter_mut().for_each(|v| *v *= 1e-7);
    x[96..128].iter_mut().for_each(|v| *v *= 1e6);
    x
}

/// `KvCache::write` into a Q8_0 cache (one start for every row, and one per
/// row with positions past the capacity dropped) writes ggml's blocks bit
/// for bit, and leaves the other positions as they were, through the
/// interpreter and the CPU plugin.
#[test]
fn writes_q8_0_blocks_as_ggml_quantizes() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let (rows, cap, s) = (2, 5, 3);
    let x = new_keys(&mut rng);
    let want_blocks = quantize_q8_0(&x);
    let mut radix_quant_blocks = vec![0u8; want_blocks.len()];
    radix_quant::quantize_q8_0(&x, &mut radix_quant_blocks).expect("whole blocks");
    assert_eq!(
        radix_quant_blocks, want_blocks,
        "radix_quant against this test's quantizer"
    );
    let shape = KvCache::shape(rows, cap, KV as i64, HD as i64, CacheType::Q8_0).expect("shape");
    let position = shape.dims()[2..].iter().product::<i64>() as usize;
    let old: Vec<u8> = (0..shape.count()).map(|_| rng.below(256) as u8).collect();
    let new_axes = [("b", rows), ("k", s), ("h", KV as i64), ("hd", HD as i64)];
    for starts in [vec![1i32], vec![2, 3]] {
        let start_shape = match starts.len() {
            1 => Shape::scalar(DType::I32),
            n => Shape::tagged(DType::I32, &[("b", n as i64)]),
        };
        let start_bytes: Vec<u8> = starts.iter().flat_map(|p| p.to_le_bytes()).collect();
        let inputs = [
            Literal::from_bytes(shape, &old),
            f32_literal(&x, &new_axes),
            Literal::from_bytes(start_shape, &start_bytes),
        ];
        let program = trace_fn(&inputs, |t| {
            let cache = KvCache { k: t[0], v: t[0] };
            cache.write(t[2], t[1], t[1]).k
        })
        .expect("trace");
        let mut want = old.clone();
        for row in 0..rows as usize {
            let start = starts[row.min(starts.len() - 1)] as usize;
            for j in 0..s as usize {
                if start + j < cap as usize {
                    let to = (row * cap as usize + start + j) * position;
                    let from = (row * s as usize + j) * position;
                    want[to..][..position].copy_from_slice(&want_blocks[from..][..position]);
                }
            }
        }
        let interp = program.interpret(&inputs)[0].to_vec::<u8>();
        assert!(
            interp == want,
            "starts {starts:?}: the interpreter's blocks differ"
        );
        let native = run_program_with(program, &inputs, CustomCallMode::Native).expect("run")[0]
            .to_vec::<u8>();
        assert!(
            native == want,
            "starts {starts:?}: the CPU plugin's blocks differ"
        );
    }
}

#[test]
fn a_q8_0_cache_needs_heads_of_whole_blocks() {
    let err = KvCache::shape(1, 8, 2, 48, CacheType::Q8_0).expect_err("48 is not 32 k");
    assert!(err.contains("48") && err.contains("head_dim"), "{err}");
    KvCache::shape(1, 8, 2, 48, CacheType::F16).expect("any width in f16");
}

/// `KvCache::write` into a Q8_0 cache of one head of 32 values writes the
/// blocks llama.cpp's `quantize_row_q8_0_ref` made of the same values
/// (radix-quant's fixture, made by llama.cpp itself: see
/// `radix-quant/tests/activations.rs`), halves rounded away from zero
/// included, through the interpreter and the CPU plugin.
#[test]
fn writes_the_blocks_llama_cpp_writes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../radix-quant/tests/fixtures/q8_0_activations.bin"
    );
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // `n` blocks of 32 f32, then llama.cpp's `n` Q8_0 blocks of 34 bytes.
    let n = bytes.len() / (32 * 4 + 34);
    assert!(n > 100 && bytes.len() == n * (32 * 4 + 34), "{path}");
    let (x, want) = bytes.split_at(n * 32 * 4);
    let x: Vec<f32> = x
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let shape = KvCache::shape(1, n as i64, 1, 32, CacheType::Q8_0).expect("shape");
    let inputs = [
        Literal::from_bytes(shape, &vec![0u8; want.len()]),
        f32_literal(&x, &[("b", 1), ("k", n as i64), ("h", 1), ("hd", 32)]),
        Literal::from_bytes(Shape::scalar(DType::I32), &0i32.to_le_bytes()),
    ];
    let program = trace_fn(&inputs, |t| {
        let cache = KvCache { k: t[0], v: t[0] };
        cache.write(t[2], t[1], t[1]).k
    })
    .expect("trace");
    let interp = program.interpret(&inputs)[0].to_vec::<u8>();
    let native =
        run_program_with(program, &inputs, CustomCallMode::Native).expect("run")[0].to_vec::<u8>();
    for (how, got) in [("the interpreter", interp), ("the CPU plugin", native)] {
        let differ = (got.chunks_exact(34).zip(want.chunks_exact(34))).position(|(g, w)| g != w);
        assert!(
            differ.is_none(),
            "{how}: block {differ:?} is not llama.cpp's"
        );
    }
}

/// The derivative over a Q8_0 cache: the queries' equals the one over an
/// f32 cache holding the blocks' values (the codes, integers, get none),
/// through the interpreter and the CPU plugin.
#[test]
fn differentiates_the_queries_over_a_q8_0_cache() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let n_cache = CACHE_ROWS * CAPACITY * KV * HD;
    let q_axes = [
        ("b", ROWS as i64),
        ("q", N_Q as i64),
        ("h", HEADS as i64),
        ("hd", HD as i64),
    ];
    let mut unit = |n: usize| (0..n).map(|_| rng.unit()).collect::<Vec<f32>>();
    let (q, g) = (unit(ROWS * N_Q * HEADS * HD), unit(ROWS * N_Q * HEADS * HD));
    let (k, v) = (unit(n_cache), unit(n_cache));
    let pos: Vec<u8> = (0..11i32)
        .chain(9..20)
        .flat_map(|p| p.to_le_bytes())
        .collect();
    let pos_shape = Shape::tagged(DType::I32, &[("b", ROWS as i64), ("q", N_Q as i64)]);
    let dq = |ty: CacheType| {
        let (k, v) = (
            cache_literal(&k, CacheType::Q8_0),
            cache_literal(&v, CacheType::Q8_0),
        );
        // The Q8_0 blocks themselves, or an f32 cache of their values.
        let (k, v) = match ty {
            CacheType::Q8_0 => (k.0, v.0),
            _ => (cache_literal(&k.1, ty).0, cache_literal(&v.1, ty).0),
        };
        let inputs = [
            f32_literal(&q, &q_axes),
            k,
            v,
            Literal::from_bytes(pos_shape, &pos),
            f32_literal(&g, &q_axes),
        ];
        let program = trace_fn(&inputs, |t| {
            let f = |q: &radix::Tensor, c: &(radix::Tensor, radix::Tensor, radix::Tensor)| {
                cached_attention(*q, c.2, KvCache { k: c.0, v: c.1 }, None)
            };
            radix::vjp(f, &t[0], &(t[1], t[2], t[3]), &t[4]).1
        })
        .expect("trace");
        let interp = program.interpret(&inputs)[0].to_vec::<f32>();
        (interp, run(program, &inputs, CustomCallMode::Native))
    };
    let ((q8_interp, q8_native), (f32_interp, f32_native)) =
        (dq(CacheType::Q8_0), dq(CacheType::F32));
    let tol = Tol::sum(DType::F32, CAPACITY * HD, 1.0);
    assert_all_close("dq, interpreter", &q8_interp, &f32_interp, tol);
    assert_all_close("dq, CPU plugin", &q8_native, &f32_native, tol);
    assert!(q8_native.iter().any(|&d| d != 0.0), "dq is not all zeros");
}
