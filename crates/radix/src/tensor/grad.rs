//! Reverse-mode derivatives of traced code: [`value_and_grad`], [`grad`]
//! and [`vjp`] trace a function of some parameters (any [`Module`] tree:
//! a model, a tuple of tensors) and other arguments, differentiate it with
//! the op rules of `autodiff/`, and record it as one `func.call` whose
//! results are the function's and the parameters' cotangents, which come
//! back as the parameters' own tree type.
//!
//! The function is traced as an open block: it may use tensors of the
//! enclosing code, which are passed to the call as arguments and, like
//! `args`, are not differentiated.

use crate::ir::ops::Control;
use std::sync::Arc;

use crate::autodiff::GradError;
use crate::error::TraceError;
use crate::ir::Op;
use crate::module::{Module, tensors};
use crate::tensor::control::{multi, poison};
use crate::tensor::{fail, located, report_error, trace_open_block};
use crate::{Shape, Tensor};

/// The value of `f(params, args)`, a float scalar (a loss), and its
/// gradient with respect to every tensor of `params`, as the same tree:
/// `jax.value_and_grad`. Integer and bool tensors of `params` get zeros.
/// An op of `f` without a derivative rule is a trace error at its line.
///
/// ```
/// # fn main() -> radix::Result<()> {
/// use radix::testing::{assert_close, run, Tol};
/// use radix::{DType, Literal, Tensor};
/// let x = Literal::from_slice(&[1f32, 2., 3.], &[3]);
/// let out = run(&[x], |xs| {
///     let (loss, dx) = radix::value_and_grad(|x: &Tensor, _: &()| (*x * *x).sum(0), &xs[0], &());
///     (loss, dx)
/// })?;
/// assert_close(&out[0], &[14.0], Tol::ulps(DType::F32, 4.0));
/// assert_close(&out[1], &[2.0, 4.0, 6.0], Tol::ulps(DType::F32, 4.0));
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn value_and_grad<P, A>(f: impl FnOnce(&P, &A) -> Tensor, params: &P, args: &A) -> (Tensor, P)
where
    P: Module + Clone,
    A: Module + Clone,
{
    let loc = std::panic::Location::caller();
    let (loss, grads) = differentiate(f, params, args, |out: &Tensor| {
        let s = out.shape();
        if s.rank() != 0 || !s.dtype().is_float() {
            return Err(format!("the function gives {s}, not a float scalar"));
        }
        Ok(vec![located(loc, || Tensor::full(s, 1.0))])
    });
    (loss, grads)
}

/// The gradient of `f(params, args)`, a float scalar, with respect to
/// every tensor of `params`, as the same tree (`jax.grad`); see
/// [`value_and_grad`].
#[track_caller]
pub fn grad<P, A>(f: impl FnOnce(&P, &A) -> Tensor, params: &P, args: &A) -> P
where
    P: Module + Clone,
    A: Module + Clone,
{
    value_and_grad(f, params, args).1
}

/// The outputs of `f(params, args)` and the vector-Jacobian product of
/// `cotangents` (shaped as the outputs) with respect to every tensor of
/// `params`, as the same tree (`jax.vjp` applied once).
#[track_caller]
pub fn vjp<P, A, O>(f: impl FnOnce(&P, &A) -> O, params: &P, args: &A, cotangents: &O) -> (O, P)
where
    P: Module + Clone,
    A: Module + Clone,
    O: Module + Clone,
{
    differentiate(f, params, args, |out: &O| {
        let want: Vec<Shape> = tensors(out).iter().map(|t| t.1.shape()).collect();
        let got: Vec<Tensor> = tensors(cotangents).into_iter().map(|t| t.1).collect();
        let same = want.len() == got.len()
            && want
                .iter()
                .zip(&got)
                .all(|(w, g)| w.dims() == g.shape().dims() && w.dtype() == g.dtype());
        if !same {
            let got: Vec<Shape> = got.iter().map(|t| t.shape()).collect();
            return Err(format!(
                "the cotangents {got:?} are not shaped as the outputs {want:?}"
            ));
        }
        Ok(got)
    })
}

/// Traces `f`, differentiates it with respect to `params`, and records the
/// call giving its outputs and the cotangents of `params` for the output
/// cotangents `seed` makes (or why it cannot).
#[track_caller]
fn differentiate<P, A, O>(
    f: impl FnOnce(&P, &A) -> O,
    params: &P,
    args: &A,
    seed: impl FnOnce(&O) -> Result<Vec<Tensor>, String>,
) -> (O, P)
where
    P: Module + Clone,
    A: Module + Clone,
    O: Module + Clone,
{
    let p_ts: Vec<Tensor> = tensors(params).into_iter().map(|t| t.1).collect();
    let a_ts: Vec<Tensor> = tensors(args).into_iter().map(|t| t.1).collect();
    let shapes: Vec<Shape> = p_ts.iter().chain(&a_ts).map(|t| t.shape()).collect();
    let mut out: Option<O> = None;
    let block = trace_open_block("differentiated function", &shapes, |xs| {
        let (mut p, mut a) = (params.clone(), args.clone());
        fill(&mut p, &xs[..p_ts.len()]);
        fill(&mut a, &xs[p_ts.len()..]);
        let o = f(&p, &a);
        let res = tensors(&o).into_iter().map(|t| t.1).collect();
        out = Some(o);
        res
    });
    let mut out = out.expect("the function ran");
    let out_shapes: Vec<Shape> = block.results.iter().map(|t| t.shape()).collect();
    let mut all_shapes = out_shapes.clone();
    all_shapes.extend(p_ts.iter().map(|t| t.shape()));
    let mut inputs = p_ts.clone();
    inputs.extend(&a_ts);
    inputs.extend(&block.captures);
    let res = match seed(&out) {
        Err(msg) => poison("grad", msg, &inputs, &all_shapes),
        Ok(cts) => match crate::autodiff::vjp(&block.function, p_ts.len()) {
            Err(e) => {
                report_error(trace_error(e));
                all_shapes
                    .iter()
                    .map(|&s| fail("grad", String::new(), &[], s))
                    .collect()
            }
            Ok(joint) => {
                inputs.extend(cts);
                let op = Op::Control(Control::Call {
                    name: crate::ir::private_name("vjp", &joint),
                    f: Arc::new(joint),
                    checkpoint: false,
                });
                multi(op, &inputs, &all_shapes)
            }
        },
    };
    fill(&mut out, &res[..out_shapes.len()]);
    let mut grads = params.clone();
    fill(&mut grads, &res[out_shapes.len()..]);
    (out, grads)
}

/// Puts `values` into the tensors of `m`, in visit order.
fn fill<M: Module>(m: &mut M, values: &[Tensor]) {
    let mut k = 0;
    m.visit_mut(&mut String::new(), &mut |_, t| {
        *t = values[k];
        k += 1;
    });
}

/// The trace error of a missing derivative rule, at the op's line.
fn trace_error(e: GradError) -> TraceError {
    TraceError {
        op: e.op,
        message: e.message,
        shapes: e.shapes,
        file: e.loc.file(),
        line: e.loc.line(),
        column: e.loc.column(),
    }
}
