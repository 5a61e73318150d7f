//! Sorting along an axis, `stablehlo.sort` (variadic, stable, with a
//! comparator body): the order, printing and reference semantics.

use super::reduce::apply;
use crate::Function;
use crate::literal::{Literal, strides, unravel};
use crate::print::OpPrinter;
use crate::{DType, Shape};
use std::sync::Arc;

/// The order of a sort by value (`x.sort(axis, order)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Smallest first.
    Ascending,
    /// Largest first.
    Descending,
}

/// `stablehlo.sort` along an axis, stable, of several operands (one
/// result each); `comparator` is hermetic over scalars (lhs0, rhs0, ...).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sort {
    /// Whether `lhs` comes before `rhs`: a bool scalar.
    pub comparator: Arc<Function>,
    /// The axis sorted along.
    pub axis: usize,
}

impl super::Family for Sort {
    fn name(&self) -> &'static str {
        "sort"
    }

    fn infer(&self, args: &[Shape], _: Shape) -> Result<super::Shapes, String> {
        infer(&self.comparator, self.axis, args)
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        let n = p.arg_shapes().len();
        let region = p.region(0, &self.comparator, 2 * n, &[]);
        let attrs = format!("dimension = {} : i64, is_stable = true", self.axis);
        let shapes = p.arg_shapes().to_vec();
        p.multi("stablehlo.sort", n, &[region], &attrs, &shapes)
    }

    fn eval(&self, args: &[&Literal], _: Shape) -> Vec<Literal> {
        eval(self, args)
    }
}

/// The shape rule of `sort`: operands of one dims with `axis` among
/// them, a comparator from (lhs0, rhs0, lhs1, rhs1, ...) scalars to a bool;
/// each result is its operand's type.
fn infer(comparator: &Function, axis: usize, args: &[Shape]) -> Result<super::Shapes, String> {
    let first = *args.first().ok_or("no operands")?;
    if let Some(t) = args.iter().find(|t| t.dims() != first.dims()) {
        return Err(format!("operands {first} and {t} differ"));
    }
    if axis >= first.rank() {
        return Err(format!("no axis {axis} in {first}"));
    }
    let params: Vec<Shape> = args
        .iter()
        .flat_map(|t| [Shape::scalar(t.dtype()); 2])
        .collect();
    super::signature(
        comparator,
        "comparator",
        &params,
        &[Shape::scalar(DType::Bool)],
    )?;
    Ok(args.to_vec())
}

/// The sorted operands: each line along the axis is ordered by a stable
/// insertion sort with the comparator (which need not be a total order).
fn eval(op: &Sort, args: &[&Literal]) -> Vec<Literal> {
    let Sort { comparator, axis } = op;
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
