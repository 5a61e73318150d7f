//! `nn::cached_attention` against attention computed in f64 here: queries
//! at their own positions over a cache with more rows and positions than
//! the step uses, with and without a sliding window, over an f32 and an f16
//! cache, through the interpreter, the CPU plugin's kernel and the in-graph
//! fallback.

mod blocks;

use blocks::Rng;
use radix::nn::{KvCache, cached_attention};
use radix::testing::{Tol, assert_all_close, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Program, Shape};

/// The sizes: 2 rows of 11 queries (more than the kernel's block of 8
/// queries a task takes together), 4 query heads over 2 key/value heads of
/// width 16, a cache of 3 rows and 24 positions.
const ROWS: usize = 2;
const N_Q: usize = 11;
const HEADS: usize = 4;
const KV: usize = 2;
const HD: usize = 16;
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

/// `values` (already representable in `dtype`) as a literal of `dtype`.
fn cache_literal(values: &[f32], axes: &[(&str, i64)], dtype: DType) -> Literal {
    match dtype {
        DType::F16 => {
            let bytes: Vec<u8> = values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect();
            Literal::from_bytes(Shape::tagged(DType::F16, axes), &bytes)
        }
        _ => f32_literal(values, axes),
    }
}

/// `x` rounded to the nearest value of `dtype`.
fn rounded(x: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => half::f16::from_f32(x).to_f32(),
        _ => x,
    }
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
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for d in 0..HD {
                    let o: f64 = (first..=p)
                        .zip(&e)
                        .map(|(j, w)| {
                            let term = w / sum * f64::from(v[at(row, j, g) + d]);
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
/// a cache of `dtype` (whose values the reference reads exactly as stored).
fn check(window: Option<i64>, dtype: DType) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let n_cache = CACHE_ROWS * CAPACITY * KV * HD;
    let q: Vec<f32> = (0..ROWS * N_Q * HEADS * HD).map(|_| rng.unit()).collect();
    let mut cached = || -> Vec<f32> { (0..n_cache).map(|_| rounded(rng.unit(), dtype)).collect() };
    let (k, v) = (cached(), cached());
    // A prompt from 0 in row 0, its next tokens from position 9 in row 1,
    // the last query alone in its block (the cache's third row and its last
    // positions are never read).
    let pos: Vec<i32> = (0..11).chain(9..20).collect();
    assert_eq!(pos.len(), ROWS * N_Q);
    let cache_axes = [
        ("b", CACHE_ROWS as i64),
        ("k", CAPACITY as i64),
        ("h", KV as i64),
        ("hd", HD as i64),
    ];
    let q_axes = [
        ("b", ROWS as i64),
        ("q", N_Q as i64),
        ("h", HEADS as i64),
        ("hd", HD as i64),
    ];
    let inputs = [
        f32_literal(&q, &q_axes),
        cache_literal(&k, &cache_axes, dtype),
        cache_literal(&v, &cache_axes, dtype),
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
    let what = |how: &str| format!("window {window:?}, a cache of {dtype}, {how}");
    let interp = program.interpret(&inputs)[0].to_vec::<f32>();
    assert_all_close(&what("interpreter"), &interp, &want, tol);
    let native = run(program.clone(), &inputs, CustomCallMode::Native);
    assert_all_close(&what("kernel"), &native, &want, tol);
    let fallback = run(program, &inputs, CustomCallMode::Fallback);
    assert_all_close(&what("fallback"), &fallback, &want, tol);
}

#[test]
fn attends_over_the_positions_each_query_may_read() {
    check(None, DType::F32);
}

#[test]
fn a_window_hides_the_older_positions() {
    check(Some(3), DType::F32);
}

#[test]
fn reads_an_f16_cache() {
    check(None, DType::F16);
    check(Some(3), DType::F16);
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
