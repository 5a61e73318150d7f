//! Sorting along an axis, `stablehlo.sort` (variadic, stable, with a
//! comparator body): the order, printing and reference semantics.

use super::reduce::apply;
use crate::ir::Op;
use crate::ir::print::OpPrinter;
use crate::literal::{Literal, strides, unravel};

/// The order of a sort by value (`x.sort(axis, order)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Smallest first.
    Ascending,
    /// Largest first.
    Descending,
}

pub(crate) fn print(op: &Op, p: &mut OpPrinter<'_>) {
    let Op::Sort { comparator, axis } = op else {
        unreachable!("{op:?} is not a sort")
    };
    let n = p.arg_shapes().len();
    let region = p.region(0, comparator, 2 * n, &[]);
    let attrs = format!("dimension = {axis} : i64, is_stable = true");
    let shapes = p.arg_shapes().to_vec();
    p.multi("stablehlo.sort", n, &[region], &attrs, &shapes)
}

/// The sorted operands: each line along the axis is ordered by a stable
/// insertion sort with the comparator (which need not be a total order).
pub(crate) fn eval(op: &Op, args: &[&Literal]) -> Vec<Literal> {
    let Op::Sort { comparator, axis } = op else {
        unreachable!("{op:?} is not a sort")
    };
    let s = args[0].shape();
    let len = s.dims()[*axis] as usize;
    let step = strides(s.dims())[*axis];
    let mut out: Vec<Vec<f64>> = args.iter().map(|l| l.data().to_vec()).collect();
    let less = |i: usize, j: usize| {
        let pairs: Vec<f64> = args
            .iter()
            .flat_map(|l| [l.data()[i], l.data()[j]])
            .collect();
        apply(comparator, &pairs)[0] != 0.0
    };
    for start in 0..s.count() {
        if unravel(start, s.dims())[*axis] != 0 {
            continue;
        }
        let mut order: Vec<usize> = Vec::with_capacity(len);
        for k in 0..len {
            let at = start + k * step;
            let mut j = order.len();
            while j > 0 && less(at, order[j - 1]) {
                j -= 1;
            }
            order.insert(j, at);
        }
        for (k, &from) in order.iter().enumerate() {
            for (o, l) in out.iter_mut().zip(args) {
                o[start + k * step] = l.data()[from];
            }
        }
    }
    args.iter()
        .zip(out)
        .map(|(l, d)| Literal::new(l.shape(), d))
        .collect()
}
