//! The derivative rules of programs written per device (`shard_map`) and
//! of their collectives. A collective's cotangent goes back through its
//! transpose: a sum over the group through the same sum, a gather through
//! a sum-scatter and back, an all-to-all through the one that swaps its
//! axes, a permutation through the reversed one.
//!
//! A `shard_map`'s derivative is a `shard_map` of its body's derivative
//! (which runs the body again from the saved arguments). A result whole
//! along a mesh axis (its spec does not name the axis) is one value that
//! every device of the axis holds, so each device takes its share of the
//! cotangent, `1 / n`; an argument whole along a mesh axis was used by
//! every device of it, so its cotangent is the sum of theirs. Together, a
//! sum over devices whose result is whole passes the cotangent back
//! unchanged, as the sum's derivative should. Over a mesh spanning
//! processes the process axis is one of those axes: the shares and sums go
//! over the processes too (through MPI).

use std::sync::Arc;

use crate::autodiff::{GradError, Rule};
use crate::collective::ReduceOp;
use crate::ir::ops::spmd::{Groups, Manual, Spec, Spmd, whole_shape};
use crate::ir::ops::{Binary, Elementwise};
use crate::ir::{Function, Op};
use crate::shard_map::{all_reduce, reduction, shard_map};
use crate::sharding::Mesh;
use crate::tensor::{inline, record_inferred};
use crate::{Shape, Tensor};

/// The cotangents of a per-device program's or a collective's operands.
pub(super) fn vjp(
    op: &Spmd,
    args: &[Tensor],
    cts: &[Option<Tensor>],
    error: impl Fn(String) -> GradError,
) -> Result<Vec<Option<Tensor>>, GradError> {
    let g = || cts[0].expect("the driver skips nodes without cotangents");
    let rule: Rule = match op {
        Spmd::Manual(m) => return manual(m, args, cts),
        Spmd::AllReduce { body, groups } if is_sum(body) => {
            Ok(vec![Some(sum(g(), groups.clone()))])
        }
        Spmd::ReduceScatter { body, axis, groups } if is_sum(body) => {
            let op = Op::Spmd(Spmd::AllGather {
                axis: *axis,
                groups: groups.clone(),
            });
            Ok(vec![Some(record_inferred("all_gather", &[g()], Ok(op)))])
        }
        Spmd::AllReduce { .. } | Spmd::ReduceScatter { .. } => {
            Err("no derivative of a maximum or minimum over devices".into())
        }
        Spmd::AllGather { axis, groups } => {
            let body = Arc::new(reduction(ReduceOp::Sum, g().dtype()));
            let op = Op::Spmd(Spmd::ReduceScatter {
                body,
                axis: *axis,
                groups: groups.clone(),
            });
            Ok(vec![Some(record_inferred(
                "reduce_scatter",
                &[g()],
                Ok(op),
            ))])
        }
        Spmd::AllToAll {
            split,
            concat,
            groups,
        } => {
            let op = Op::Spmd(Spmd::AllToAll {
                split: *concat,
                concat: *split,
                groups: groups.clone(),
            });
            Ok(vec![Some(record_inferred("all_to_all", &[g()], Ok(op)))])
        }
        Spmd::Permute { pairs } => {
            let pairs = pairs.iter().map(|&[s, d]| [d, s]).collect();
            let op = Op::Spmd(Spmd::Permute { pairs });
            Ok(vec![Some(record_inferred("ppermute", &[g()], Ok(op)))])
        }
        Spmd::PartitionId => Ok(vec![]),
    };
    rule.map_err(error)
}

/// Whether a collective's reduction is a sum.
fn is_sum(body: &Function) -> bool {
    let result = body.results.first().map(|&r| &body.node(r).op);
    result == Some(&Op::Elementwise(Elementwise::Binary(Binary::Add)))
}

/// `x` summed over each of `groups`.
fn sum(x: Tensor, groups: Groups) -> Tensor {
    let body = Arc::new(reduction(ReduceOp::Sum, x.dtype()));
    let op = Op::Spmd(Spmd::AllReduce { body, groups });
    record_inferred("all_reduce", &[x], Ok(op))
}

/// The mesh axes `spec` does not split along.
fn unnamed(mesh: &Mesh, spec: &Spec) -> Vec<usize> {
    (0..mesh.dims().len())
        .filter(|m| !spec.contains(&Some(*m)))
        .collect()
}

/// The cotangents of a `shard_map`'s arguments: a `shard_map` over the same
/// mesh of `body`'s derivative, on the arguments and the results'
/// cotangents.
fn manual(
    m: &Manual,
    args: &[Tensor],
    cts: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>, GradError> {
    let (body, mesh, in_specs, out_specs) = (&m.body, &m.mesh, &m.in_specs, &m.out_specs);
    let derivative = super::vjp(body, body.params.len())?;
    // The results' types in this process's program.
    let (local, _, local_outs) = m.local();
    let whole: Vec<Shape> = (cts.iter().zip(&local_outs).zip(body.result_shapes()))
        .map(|((ct, spec), block)| match ct {
            Some(ct) => ct.shape(),
            None => whole_shape(&local, block, spec).expect("checked when traced"),
        })
        .collect();
    let mut operands = args.to_vec();
    operands.extend(super::seeds(cts, &whole));
    let specs: Vec<Spec> = [&in_specs[..], &out_specs[..]].concat();
    let n_in = args.len();
    let cts = shard_map(mesh, &specs, in_specs, &operands, |xs| {
        let mut inputs = xs[..n_in].to_vec();
        for (ct, spec) in xs[n_in..].iter().zip(out_specs) {
            let share: usize = unnamed(mesh, spec)
                .iter()
                .map(|&m| mesh.dims()[m])
                .product();
            inputs.push(*ct / share as f64);
        }
        let outs = inline(&derivative, &inputs);
        (outs[out_specs.len()..].iter().zip(in_specs))
            .map(|(&ct, spec)| match unnamed(mesh, spec).as_slice() {
                [] => ct,
                axes => all_reduce(ct, ReduceOp::Sum, axes),
            })
            .collect()
    });
    Ok(cts.into_iter().map(Some).collect())
}
