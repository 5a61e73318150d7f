//! The derivative rules of the reductions.

use crate::Tensor;
use crate::autodiff::Rule;
use crate::ir::ops::reduce::body_binary;
use crate::ir::ops::{Binary, Reduction};

/// The one-operand reductions whose body is `add`, `maximum` or `minimum`:
/// a sum broadcasts the cotangent back; a maximum or minimum sends it to
/// the elements equal to the result, shared equally on ties (as JAX). The
/// initial value gets none. Other bodies, and the float results of
/// several-operand reductions (an argmax's index needs none), have no rule.
pub(super) fn vjp(op: &Reduction, args: &[Tensor], z: Tensor, cts: &[Option<Tensor>]) -> Rule {
    let (Reduction::Reduce { body, axes }, [Some(g)]) = (op, cts) else {
        return Err("no derivative rule for this reduction".into());
    };
    let x = args[0];
    let xs = x.shape();
    let kept: Vec<usize> = (0..xs.rank()).filter(|a| !axes.contains(a)).collect();
    let dx = match body_binary(body) {
        Some(Binary::Add) => g.broadcast_in_dim(xs, &kept),
        Some(Binary::Max | Binary::Min) => {
            let hit = x.eq(z.broadcast_in_dim(xs, &kept));
            let zero = Tensor::zeros(xs);
            let count = hit.select(Tensor::full(xs, 1.0), zero).sum(axes.as_slice());
            hit.select((*g / count).broadcast_in_dim(xs, &kept), zero)
        }
        _ => {
            return Err(
                "no derivative rule for a reduction whose body is not add, maximum or minimum"
                    .into(),
            );
        }
    };
    Ok(vec![Some(dx), None])
}
