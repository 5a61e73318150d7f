//! `nn::LayerNorm` (the custom call `radix.layer_norm`) against the norm
//! computed in f64 here, over the last axis and over a middle one, through
//! the interpreter, the CPU plugin's kernel and the in-graph fallback; its
//! residual form against the norm of the sum; and its gradient against the
//! formula's written in ops.

mod blocks;

use blocks::Rng;
use radix::nn::LayerNorm;
use radix::testing::{Tol, assert_all_close, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Module, Program, Shape, Tensor};

/// Rows of `x` `[a, d, c]` normalized along `d` (37: not whole vectors).
const A: usize = 3;
const D: usize = 37;
const C: usize = 2;
const EPS: f64 = 1e-5;

fn run(program: Program, inputs: &[Literal], mode: CustomCallMode) -> Vec<f32> {
    run_program_with(program, inputs, mode).expect("compile and run")[0].to_vec::<f32>()
}

fn f32_literal(values: &[f32], axes: &[(&str, i64)]) -> Literal {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Literal::from_bytes(Shape::tagged(DType::F32, axes), &bytes)
}

/// The norm in f64 of `x` `[A, D, C]` along `D`.
fn reference(x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    for a in 0..A {
        for c in 0..C {
            let at = |d: usize| (a * D + d) * C + c;
            let v: Vec<f64> = (0..D).map(|d| f64::from(x[at(d)])).collect();
            let mean = v.iter().sum::<f64>() / D as f64;
            let var = v.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / D as f64;
            for d in 0..D {
                let n = (v[d] - mean) / (var + EPS).sqrt();
                y[at(d)] = (n * f64::from(w[d]) + f64::from(b[d])) as f32;
            }
        }
    }
    y
}

/// A norm over `d` bound to `w` and `b`.
fn norm(w: Tensor, b: Tensor) -> LayerNorm {
    let mut n = LayerNorm::new(("d", D as i64), EPS);
    let mut params = [w, b].into_iter();
    n.visit_mut(&mut String::new(), &mut |_, t| {
        *t = params.next().expect("weight and bias")
    });
    n
}

fn inputs(rng: &mut Rng) -> ([Vec<f32>; 3], [Literal; 3]) {
    // Values far from zero, so that the mean matters.
    let x: Vec<f32> = (0..A * D * C).map(|_| 3.0 + rng.unit()).collect();
    let w: Vec<f32> = (0..D).map(|_| rng.unit()).collect();
    let b: Vec<f32> = (0..D).map(|_| rng.unit()).collect();
    let literals = [
        f32_literal(&x, &[("a", A as i64), ("d", D as i64), ("c", C as i64)]),
        f32_literal(&w, &[("d", D as i64)]),
        f32_literal(&b, &[("d", D as i64)]),
    ];
    ([x, w, b], literals)
}

#[test]
fn normalizes_along_its_axis_wherever_it_is() {
    let mut rng = Rng(0x5851_F42D_4C95_7F2D);
    let ([x, w, b], inputs) = inputs(&mut rng);
    let program = trace_fn(&inputs, |t| norm(t[1], t[2]).forward(t[0])).expect("trace");
    let want = reference(&x, &w, &b);
    // Two sums of D terms and a few roundings, on values of size ~3.
    let tol = Tol::sum(DType::F32, D, 4.0);
    let interp = program.interpret(&inputs)[0].to_vec::<f32>();
    assert_all_close("interpreter", &interp, &want, tol);
    let native = run(program.clone(), &inputs, CustomCallMode::Native);
    assert_all_close("kernel", &native, &want, tol);
    let fallback = run(program, &inputs, CustomCallMode::Fallback);
    assert_all_close("fallback", &fallback, &want, tol);
}

/// The gradient through the call (its derivative is the formula's vjp)
/// against the gradient of the formula written here in ops.
#[test]
fn gradient_is_the_formulas() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (_, inputs) = inputs(&mut rng);
    let grads = |through_call: bool| {
        let program = trace_fn(&inputs, move |t| {
            let loss = |xwb: &(Tensor, Tensor, Tensor), _: &()| {
                let (x, w, b) = *xwb;
                let y = if through_call {
                    norm(w, b).forward(x)
                } else {
                    let centered = x - x.mean("d").broadcast(x.shape());
                    let var = (centered * centered).mean("d");
                    let inv = (var + EPS).rsqrt().broadcast(x.shape());
                    centered * inv * w.broadcast(x.shape()) + b.broadcast(x.shape())
                };
                (y * y * y).sum(["a", "d", "c"])
            };
            let one = Tensor::scalar(1.0, DType::F32);
            let (_, (dx, dw, db)) = radix::vjp(loss, &(t[0], t[1], t[2]), &(), &one);
            (dx, dw, db)
        })
        .expect("trace");
        run_program_with(program, &inputs, CustomCallMode::Native).expect("compile and run")
    };
    let (call, formula) = (grads(true), grads(false));
    for (what, (a, b)) in ["dx", "dw", "db"].iter().zip(call.iter().zip(&formula)) {
        let tol = Tol::sum(DType::F32, A * D * C, 16.0);
        assert_all_close(what, &a.to_vec::<f32>(), &b.to_vec::<f32>(), tol);
    }
}

/// `forward_residual(x, r)` is `forward(x + r)`, bit for bit, every way it
/// runs (the kernel sums as XLA's add does, then normalizes the same), and
/// its gradient reaches the residual.
#[test]
fn residual_form_is_the_norm_of_the_sum() {
    let mut rng = Rng(0x1405_7B7E_F767_814F);
    let (_, [x, w, b]) = inputs(&mut rng);
    let r: Vec<f32> = (0..A * D * C).map(|_| rng.unit()).collect();
    let r = f32_literal(&r, &[("a", A as i64), ("d", D as i64), ("c", C as i64)]);
    let inputs = [x, w, b, r];
    let program = trace_fn(&inputs, |t| {
        let n = norm(t[1], t[2]);
        (n.forward_residual(t[0], t[3]), n.forward(t[0] + t[3]))
    })
    .expect("trace");
    for mode in [CustomCallMode::Native, CustomCallMode::Fallback] {
        let out = run_program_with(program.clone(), &inputs, mode).expect("compile and run");
        assert_eq!(out[0].to_vec::<f32>(), out[1].to_vec::<f32>(), "{mode:?}");
    }
    let interp = program.interpret(&inputs);
    assert_eq!(
        interp[0].to_vec::<f32>(),
        interp[1].to_vec::<f32>(),
        "interpreter"
    );
    let grads = trace_fn(&inputs, |t| {
        let loss = |xr: &(Tensor, Tensor), wb: &(Tensor, Tensor)| {
            let y = norm(wb.0, wb.1).forward_residual(xr.0, xr.1);
            (y * y * y).sum(["a", "d", "c"])
        };
        let one = Tensor::scalar(1.0, DType::F32);
        let (_, (dx, dr)) = radix::vjp(loss, &(t[0], t[3]), &(t[1], t[2]), &one);
        (dx, dr)
    })
    .expect("trace");
    let out = run_program_with(grads, &inputs, CustomCallMode::Native).expect("compile and run");
    // d(x + r)/dx = d(x + r)/dr: the same gradient.
    assert_eq!(out[0].to_vec::<f32>(), out[1].to_vec::<f32>());
    assert!(out[1].to_vec::<f32>().iter().any(|&g| g != 0.0));
}
