//! `nn::padded_attention` against attention computed in f64 here: rows of
//! different lengths (one full, one short, one with no valid key), grouped
//! key/value heads, keys and heads not whole panels of 16, through the
//! interpreter, the CPU plugin's kernel and the in-graph fallback; and its
//! gradient against the fallback's.

mod blocks;

use blocks::Rng;
use radix::nn::padded_attention;
use radix::testing::{Tol, assert_all_close, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Program, Shape, Tensor};

/// The sizes: 3 rows of 19 queries and keys (more than a panel of 16),
/// 4 query heads over 2 key/value heads of width 24 (a panel and a half).
const ROWS: usize = 3;
const N: usize = 19;
const HEADS: usize = 4;
const KV: usize = 2;
const HD: usize = 24;

/// Valid keys per row: all, some, none (that row gets the mean of all
/// values, as a query that may read no key does in `attention`).
const LENGTHS: [i32; ROWS] = [19, 5, 0];

fn run(program: Program, inputs: &[Literal], mode: CustomCallMode) -> Vec<f32> {
    run_program_with(program, inputs, mode).expect("compile and run")[0].to_vec::<f32>()
}

fn f32_literal(values: &[f32], axes: &[(&str, i64)]) -> Literal {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Literal::from_bytes(Shape::tagged(DType::F32, axes), &bytes)
}

/// Attention in f64: every query of row `r` reads its first `LENGTHS[r]`
/// keys (where that is 0, the mean of all values); query head `h` reads key head `h / (HEADS /
/// KV)`. Also the largest `|p v|` term, which sizes the tolerance.
fn reference(q: &[f32], k: &[f32], v: &[f32]) -> (Vec<f32>, f64) {
    let at = |row: usize, p: usize, g: usize| ((row * N + p) * KV + g) * HD;
    let mut out = vec![0f32; ROWS * N * HEADS * HD];
    let mut scale = 0f64;
    for row in 0..ROWS {
        let seen = match LENGTHS[row] as usize {
            0 => N,
            n => n,
        };
        for i in 0..N {
            for h in 0..HEADS {
                let g = h / (HEADS / KV);
                let qh = &q[((row * N + i) * HEADS + h) * HD..][..HD];
                // No valid key: every key weighs the same.
                let uniform = LENGTHS[row] == 0;
                let scores: Vec<f64> = (0..seen)
                    .map(|j| {
                        if uniform {
                            return 0.0;
                        }
                        let dot: f64 = qh
                            .iter()
                            .zip(&k[at(row, j, g)..][..HD])
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        dot / (HD as f64).sqrt()
                    })
                    .collect();
                let e = radix::testing::softmax_f64(&scores);
                for d in 0..HD {
                    let o: f64 = (0..seen)
                        .zip(&e)
                        .map(|(j, w)| {
                            let term = w * f64::from(v[at(row, j, g) + d]);
                            scale = scale.max(term.abs());
                            term
                        })
                        .sum();
                    out[((row * N + i) * HEADS + h) * HD + d] = o as f32;
                }
            }
        }
    }
    (out, scale)
}

/// q, k, v and the lengths as literals.
fn inputs(rng: &mut Rng) -> ([Vec<f32>; 3], [Literal; 4]) {
    let q: Vec<f32> = (0..ROWS * N * HEADS * HD).map(|_| rng.unit()).collect();
    let k: Vec<f32> = (0..ROWS * N * KV * HD).map(|_| rng.unit()).collect();
    let v: Vec<f32> = (0..ROWS * N * KV * HD).map(|_| rng.unit()).collect();
    let axes = |t: &'static str, h: usize| {
        [
            ("b", ROWS as i64),
            (t, N as i64),
            ("h", h as i64),
            ("hd", HD as i64),
        ]
    };
    let lengths: Vec<u8> = LENGTHS.iter().flat_map(|l| l.to_le_bytes()).collect();
    let literals = [
        f32_literal(&q, &axes("q", HEADS)),
        f32_literal(&k, &axes("k", KV)),
        f32_literal(&v, &axes("k", KV)),
        Literal::from_bytes(Shape::tagged(DType::I32, &[("b", ROWS as i64)]), &lengths),
    ];
    ([q, k, v], literals)
}

#[test]
fn every_query_reads_its_rows_valid_keys() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let ([q, k, v], inputs) = inputs(&mut rng);
    let program = trace_fn(&inputs, |t| padded_attention(t[0], t[1], t[2], t[3])).expect("trace");
    let (want, scale) = reference(&q, &k, &v);
    let tol = Tol::sum(DType::F32, N * HD, scale.max(1.0));
    let interp = program.interpret(&inputs)[0].to_vec::<f32>();
    assert_all_close("interpreter", &interp, &want, tol);
    let native = run(program.clone(), &inputs, CustomCallMode::Native);
    assert_all_close("kernel", &native, &want, tol);
    let fallback = run(program, &inputs, CustomCallMode::Fallback);
    assert_all_close("fallback", &fallback, &want, tol);
}

/// The gradient of a loss through the kernel's call is the fallback's
/// (the call's derivative is the fallback's vjp).
#[test]
fn gradient_is_the_fallbacks() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (_, inputs) = inputs(&mut rng);
    let grad_of = |attend: fn(Tensor, Tensor, Tensor, Tensor) -> Tensor| {
        let program = trace_fn(&inputs, move |t| {
            let loss = |qkv: &(Tensor, Tensor, Tensor), lengths: &Tensor| {
                let o = attend(qkv.0, qkv.1, qkv.2, *lengths);
                (o * o).sum(["b", "q", "h", "hd"])
            };
            let (_, (dq, dk, dv)) = radix::vjp(
                loss,
                &(t[0], t[1], t[2]),
                &t[3],
                &Tensor::scalar(1.0, DType::F32),
            );
            (dq, dk, dv)
        })
        .expect("trace");
        run_program_with(program, &inputs, CustomCallMode::Native).expect("compile and run")
    };
    let through_call = grad_of(padded_attention);
    let masked = grad_of(|q, k, v, lengths| {
        let k_pos = Tensor::iota(
            Shape::tagged(DType::I32, &[("b", ROWS as i64), ("k", N as i64)]),
            "k",
        );
        let mask = k_pos.lt(lengths.broadcast(k_pos.shape()));
        radix::nn::attention(q, k, v, Some(mask))
    });
    for (what, (a, b)) in ["dq", "dk", "dv"]
        .iter()
        .zip(through_call.iter().zip(&masked))
    {
        let tol = Tol::sum(DType::F32, N * HD, 4.0);
        assert_all_close(what, &a.to_vec::<f32>(), &b.to_vec::<f32>(), tol);
    }
}

/// The packed form (`padded_self_attention`, one `(b, s, qkv, h, hd)`
/// operand) gives the bits of `padded_attention` over the same queries,
/// keys and values in the kernel, and the same values in the fallback; its
/// gradient is the fallback's.
#[test]
fn packed_queries_keys_and_values_give_the_same_attention() {
    use radix::nn::padded_self_attention;
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let n = ROWS * N * HEADS * HD;
    let qkv: Vec<f32> = (0..3 * n).map(|_| rng.unit()).collect();
    let qkv_axes = [
        ("b", ROWS as i64),
        ("s", N as i64),
        ("qkv", 3),
        ("h", HEADS as i64),
        ("hd", HD as i64),
    ];
    let lengths: Vec<u8> = LENGTHS.iter().flat_map(|l| l.to_le_bytes()).collect();
    let lengths = Literal::from_bytes(Shape::tagged(DType::I32, &[("b", ROWS as i64)]), &lengths);
    let inputs = [f32_literal(&qkv, &qkv_axes), lengths.clone()];
    let packed = trace_fn(&inputs, |t| padded_self_attention(t[0], t[1])).expect("trace");
    // The same values apart: token `t`'s query, key and value follow each other.
    let part = |i: usize| -> Vec<f32> {
        qkv.chunks_exact(HEADS * HD)
            .skip(i)
            .step_by(3)
            .flatten()
            .copied()
            .collect()
    };
    let axes = |t: &'static str| {
        [
            ("b", ROWS as i64),
            (t, N as i64),
            ("h", HEADS as i64),
            ("hd", HD as i64),
        ]
    };
    let apart_inputs = [
        f32_literal(&part(0), &axes("q")),
        f32_literal(&part(1), &axes("k")),
        f32_literal(&part(2), &axes("k")),
        lengths,
    ];
    let apart =
        trace_fn(&apart_inputs, |t| padded_attention(t[0], t[1], t[2], t[3])).expect("trace");
    let want = run(apart, &apart_inputs, CustomCallMode::Native);
    let got = run(packed.clone(), &inputs, CustomCallMode::Native);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want), "kernel");
    let tol = Tol::sum(DType::F32, N * HD, 1.0);
    let fallback = run(packed, &inputs, CustomCallMode::Fallback);
    assert_all_close("fallback", &fallback, &want, tol);

    let grad = |mode: CustomCallMode| {
        let program = trace_fn(&inputs, |t| {
            let loss = |qkv: &Tensor, lengths: &Tensor| {
                let o = padded_self_attention(*qkv, *lengths);
                (o * o).sum(["b", "s", "h", "hd"])
            };
            radix::vjp(loss, &t[0], &t[1], &Tensor::scalar(1.0, DType::F32)).1
        })
        .expect("trace");
        run(program, &inputs, mode)
    };
    let tol = Tol::sum(DType::F32, N * HD, 4.0);
    assert_all_close(
        "dqkv",
        &grad(CustomCallMode::Native),
        &grad(CustomCallMode::Fallback),
        tol,
    );
}

#[test]
fn misuse_is_a_trace_error() {
    let q = Literal::from_bytes(
        Shape::tagged(DType::F32, &[("q", 2), ("hd", 4)]),
        &[0u8; 32],
    );
    let err = trace_fn(&[q], |t| padded_attention(t[0], t[0], t[0], t[0]))
        .expect_err("q has no b or h axis");
    assert!(err.to_string().contains("padded_attention"), "{err}");
}
