//! The derivative rules of control flow. A `call`, `if` or bounded
//! `while` on the way from a differentiated parameter to a result saves
//! the residuals of its body in the forward pass (`control_grad.rs`); the
//! rules here save nothing:
//! - a `checkpoint`ed call: the derivative of a called function is a
//!   called function, `@<name>_vjp` (its [`vjp`](super::vjp): the body's
//!   results and then its arguments' cotangents), which runs the body
//!   again from the saved operands, so a stack of equal layers still emits
//!   one body, and one for their derivative;
//! - a loop that never runs passes its cotangents through;
//! - a `while_` without a bound has no reverse-mode derivative, as in JAX:
//!   the iterations to save are not known when traced.

use std::sync::Arc;

use crate::Tensor;
use crate::autodiff::GradError;
use crate::ir::ops::Control;
use crate::ir::{Function, Op};
use crate::tensor::control::multi;

/// The cotangents of the operands of a control-flow op that saved nothing.
pub(super) fn vjp(
    op: &Control,
    args: &[Tensor],
    cts: &[Option<Tensor>],
    error: impl Fn(String) -> GradError,
) -> Result<Vec<Option<Tensor>>, GradError> {
    match op {
        Control::Call { name, f, .. } => call(name, f, args, cts),
        Control::While {
            body,
            max_trips: Some(0),
            ..
        } => {
            let n_state = body.results.len();
            let mut res = cts.to_vec();
            res.extend(std::iter::repeat_n(None, args.len() - n_state));
            Ok(res)
        }
        Control::While { .. } => Err(error(
            "no derivative of a `while_` loop without a bound on its iterations: \
             reverse mode saves every iteration, so write it with \
             `while_bounded(max_trips, ..)` (or `for_` for a known count)"
                .into(),
        )),
        Control::If { .. } => Err(error("no derivative rule for if".into())),
    }
}

/// A call of `@<name>_vjp`, `f`'s [`vjp`](super::vjp).
fn call(
    name: &str,
    f: &Function,
    args: &[Tensor],
    cts: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>, GradError> {
    let body = super::vjp(f, f.params.len())?;
    let n_out = f.results.len();
    let mut operands = args.to_vec();
    operands.extend(super::seeds(cts, &f.result_shapes()));
    let shapes = body.result_shapes();
    let op = Op::Control(Control::Call {
        name: format!("{name}_vjp").into(),
        f: Arc::new(body),
        checkpoint: false,
    });
    let res = multi(op, &operands, &shapes);
    Ok(res[n_out..n_out + args.len()]
        .iter()
        .map(|&t| Some(t))
        .collect())
}
