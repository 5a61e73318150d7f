//! The derivative rules of the indexing ops: a slice or gather sends the
//! cotangent back to the elements it read (a dynamic update of zeros, a
//! scatter that adds), an update or scatter splits it between the operand
//! (where it was kept) and the updates (what they became). A scatter must
//! add or replace; indices get none.

use crate::Tensor;
use crate::autodiff::Rule;
use crate::ir::Op;
use crate::ir::ops::reduce::body_binary;
use crate::ir::ops::{Binary, Indexing};

pub(super) fn vjp(op: &Indexing, args: &[Tensor], g: Tensor) -> Rule {
    let x = args[0];
    let none = |n: usize| vec![None; n];
    Ok(match op {
        Indexing::DynamicSlice(_) => {
            let dx = Tensor::zeros(x.shape()).dynamic_update_slice(g, &args[1..]);
            [vec![Some(dx)], none(args.len() - 1)].concat()
        }
        Indexing::DynamicUpdateSlice => {
            let (u, starts) = (args[1], &args[2..]);
            let dx = g.dynamic_update_slice(Tensor::zeros(u.shape()), starts);
            let du = g.dynamic_slice(starts, u.shape().dims());
            [vec![Some(dx), Some(du)], none(starts.len())].concat()
        }
        Indexing::Gather(a) => {
            let dx = Tensor::zeros(x.shape()).scatter_add(*a, args[1], g);
            vec![Some(dx), None]
        }
        Indexing::Scatter { axis, update } => {
            let (idx, upd) = (args[1], args[2]);
            let du = g.gather(*axis, idx);
            let adds = body_binary(update) == Some(Binary::Add);
            let replaces =
                matches!(update.results[..], [r] if update.node(r).op == Op::Parameter(1));
            let dx = if adds {
                g
            } else if replaces {
                // The replaced elements do not reach the result.
                g.scatter(*axis, idx, Tensor::zeros(upd.shape()))
            } else {
                return Err(
                    "no derivative rule for a scatter whose update neither adds nor replaces"
                        .into(),
                );
            };
            vec![Some(dx), None, Some(du)]
        }
    })
}
