//! The derivative rule of `sort`.

use crate::autodiff::Rule;
use crate::ir::ops::Sort;
use crate::tensor::inline;
use crate::{DType, Tensor};

/// The sort is run again with an `iota` beside its operands, which gives
/// the permutation it applies; sorting the cotangents by that permutation,
/// ascending, puts each back where its element came from.
pub(super) fn vjp(op: &Sort, args: &[Tensor], cts: &[Option<Tensor>]) -> Rule {
    let Sort { comparator, axis } = op;
    let n = args.len();
    let iota = Tensor::iota(args[0].shape().with_dtype(DType::I32), *axis);
    let mut operands = args.to_vec();
    operands.push(iota);
    // The comparator, which ignores the iota.
    let perm = crate::sort(&operands, *axis, |l, r| {
        let sides: Vec<Tensor> = (0..n).flat_map(|k| [l[k], r[k]]).collect();
        inline(comparator, &sides)[0]
    })[n];
    let mut operands = vec![perm];
    operands.extend(cts.iter().flatten());
    let undone = crate::sort(&operands, *axis, |l, r| l[0].lt(r[0]));
    let mut k = 0;
    Ok(cts
        .iter()
        .map(|ct| {
            ct.map(|_| {
                k += 1;
                undone[k]
            })
        })
        .collect())
}
