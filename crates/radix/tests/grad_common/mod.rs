//! Shared helpers of the gradient tests: central finite differences in
//! f64 through the reference interpreter, `radix::grad` of the same
//! function, and deterministic inputs.
#![allow(dead_code)]

use radix::testing::{Tol, compare, trace_fn};
use radix::{DType, Literal, Shape, Tensor};

/// Central differences of `f` at `inputs` (f64), one gradient per input.
pub fn finite_differences(inputs: &[Literal], f: &dyn Fn(&[Tensor]) -> Tensor) -> Vec<Vec<f64>> {
    let program = trace_fn(inputs, f).unwrap();
    let h = 1e-6;
    let value = |xs: &[Literal]| program.interpret(xs)[0].data()[0];
    (0..inputs.len())
        .map(|i| {
            (0..inputs[i].data().len())
                .map(|j| {
                    let at = |d: f64| {
                        let mut xs = inputs.to_vec();
                        let mut v = xs[i].data().to_vec();
                        v[j] += d;
                        xs[i] = Literal::new(xs[i].shape(), v);
                        value(&xs)
                    };
                    (at(h) - at(-h)) / (2.0 * h)
                })
                .collect()
        })
        .collect()
}

/// The gradient of `f` with respect to every input, from `radix::grad`,
/// through the reference interpreter.
pub fn gradients(inputs: &[Literal], f: &dyn Fn(&[Tensor]) -> Tensor) -> Vec<Literal> {
    let program = trace_fn(inputs, |xs| {
        radix::grad(|p: &Vec<Tensor>, _: &()| f(p), &xs.to_vec(), &())
    })
    .unwrap();
    program.interpret(inputs)
}

/// Checks `radix::grad` of `f` against central differences at `inputs`.
pub fn check(inputs: &[Literal], f: impl Fn(&[Tensor]) -> Tensor) {
    let got = gradients(inputs, &f);
    let want = finite_differences(inputs, &f);
    // Central differences with h = 1e-6 in f64: truncation ~1e-12 times
    // the third derivative, cancellation ~1e-10 relative to the value.
    let tol = Tol {
        rel: 1e-6,
        abs: 1e-7,
    };
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape().dims(), inputs[i].shape().dims());
        if let Err(msg) = compare(g.data(), w, tol) {
            panic!("input {i}: {msg}");
        }
    }
}

/// A f64 literal of `dims` with deterministic values in about [-1, 1]
/// (never 0, nor equal to each other).
pub fn lit(dims: &[i64], seed: u64) -> Literal {
    let n: i64 = dims.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v = (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            (2.0 * u - 1.0) * 0.9 + 0.01 * (i as f64 + 1.0) / n as f64
        })
        .collect();
    Literal::new(Shape::new(DType::F64, dims), v)
}

/// A tagged f64 literal.
pub fn tagged(axes: &[(&str, i64)], seed: u64) -> Literal {
    let l = lit(&axes.iter().map(|a| a.1).collect::<Vec<_>>(), seed);
    Literal::new(Shape::tagged(DType::F64, axes), l.data().to_vec())
}

/// Positive values in about [0.5, 1.5].
pub fn positive(dims: &[i64], seed: u64) -> Literal {
    let l = lit(dims, seed);
    Literal::new(l.shape(), l.data().iter().map(|v| 1.0 + 0.5 * v).collect())
}

/// The sum of every element of `x` weighted by a fixed ramp, so each
/// element's cotangent differs.
pub fn loss(x: Tensor) -> Tensor {
    let w = Tensor::iota(x.shape().unsharded(), 0).convert(x.dtype()) * 0.37 + 0.5;
    let all: Vec<usize> = (0..x.rank()).collect();
    (x * w).sum(all)
}
