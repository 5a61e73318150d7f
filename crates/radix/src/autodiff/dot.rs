//! The derivative rule of `dot_general`.

use crate::autodiff::Rule;
use crate::ir::ops::dot::free;
use crate::{DType, DotDims, Shape, Tensor};

/// Each operand's cotangent is the dot of the result's cotangent `g`
/// (axes: batch, lhs free, rhs free) with the other operand over that
/// operand's free axes, transposed back into the operand's order.
pub(super) fn vjp(d: &DotDims, args: &[Tensor], g: Tensor) -> Rule {
    let (l, r) = (args[0], args[1]);
    let lf = free(l.shape(), &d.lhs_batch, &d.lhs_contract);
    let rf = free(r.shape(), &d.rhs_batch, &d.rhs_contract);
    let nb = d.lhs_batch.len();
    let batch: Vec<usize> = (0..nb).collect();
    let g_lf: Vec<usize> = (nb..nb + lf.len()).collect();
    let g_rf: Vec<usize> = (nb + lf.len()..nb + lf.len() + rf.len()).collect();
    let dl = operand_ct(
        g,
        r,
        DotDims {
            lhs_batch: batch.clone(),
            rhs_batch: d.rhs_batch.clone(),
            lhs_contract: g_rf,
            rhs_contract: rf.clone(),
        },
        (&d.lhs_batch, &lf, &d.lhs_contract, &d.rhs_contract),
    );
    let dr = operand_ct(
        g,
        l,
        DotDims {
            lhs_batch: batch,
            rhs_batch: d.lhs_batch.clone(),
            lhs_contract: g_lf,
            rhs_contract: lf,
        },
        (&d.rhs_batch, &rf, &d.rhs_contract, &d.lhs_contract),
    );
    Ok(vec![Some(dl), Some(dr)])
}

/// The cotangent of one operand of a dot: `dot_general(g, other, dims)`,
/// whose axes are batch, this operand's free axes, then the other's
/// contracting axes in ascending order, transposed to the operand's order.
/// `axes` are this operand's batch, free and contracting axes and the
/// other's contracting axes paired with them.
fn operand_ct(
    g: Tensor,
    other: Tensor,
    dims: DotDims,
    axes: (&[usize], &[usize], &[usize], &[usize]),
) -> Tensor {
    let (batch, free_axes, contract, paired) = axes;
    let (g, other, dims) = merge_contracting(g, other, dims);
    let raw = g.dot_general(other, dims);
    let mut sorted = paired.to_vec();
    sorted.sort();
    let mut perm = vec![0; raw.rank()];
    for (k, &a) in batch.iter().enumerate() {
        perm[a] = k;
    }
    for (j, &a) in free_axes.iter().enumerate() {
        perm[a] = batch.len() + j;
    }
    for (&a, p) in contract.iter().zip(paired) {
        let rank = sorted.iter().position(|s| s == p).expect("paired axis");
        perm[a] = batch.len() + free_axes.len() + rank;
    }
    match perm.iter().enumerate().all(|(i, &p)| i == p) {
        true => raw,
        false => raw.transpose(perm.as_slice()),
    }
}

/// `dot_general(a, b, dims)` with its contracting axes merged into one
/// (reshapes, which XLA lays out as bitcasts) where they are adjacent and
/// in the same order in both operands: the cotangent of a weight contracts
/// every token axis of `x [b, s, d]`, and XLA's CPU backend turns a dot of
/// several contracting axes into one of a single axis by transposing an
/// operand into a copy (one more pass over the activations, per weight, per
/// step), where it runs a dot of one leading contracting axis, as JAX's
/// program of flattened tokens has, in place. Not for 16-bit floats: XLA
/// runs such a dot outside YNNPACK, converting both operands to f32, where
/// the transposed copy and YNNPACK's dot stay in bf16 (a mixed-precision
/// step's weight gradients).
fn merge_contracting(a: Tensor, b: Tensor, dims: DotDims) -> (Tensor, Tensor, DotDims) {
    let adjacent = |c: &[usize]| c.windows(2).all(|w| w[1] == w[0] + 1);
    let (lc, rc) = (&dims.lhs_contract, &dims.rhs_contract);
    let wide = [a, b]
        .iter()
        .all(|x| matches!(x.dtype(), DType::F32 | DType::F64));
    if !wide || lc.len() < 2 || !adjacent(lc) || !adjacent(rc) {
        return (a, b, dims);
    }
    let n = lc.len();
    // `x` with axes `at..at + n` merged, and an axis index after the merge.
    let merge = |x: Tensor, at: usize| {
        let mut d = x.dims();
        let size = d.drain(at..at + n).product();
        d.insert(at, size);
        x.reshape_to(Shape::new(x.dtype(), &d))
    };
    let after = |axes: &[usize], at: usize| -> Vec<usize> {
        axes.iter()
            .map(|&i| if i > at { i + 1 - n } else { i })
            .collect()
    };
    let (la, ra) = (lc[0], rc[0]);
    let merged = DotDims {
        lhs_batch: after(&dims.lhs_batch, la),
        rhs_batch: after(&dims.rhs_batch, ra),
        lhs_contract: vec![la],
        rhs_contract: vec![ra],
    };
    (merge(a, la), merge(b, ra), merged)
}
