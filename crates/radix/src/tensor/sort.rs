//! Sorting along an axis: [`sort`] (`stablehlo.sort`, variadic, with a
//! user-written comparator) and what is built on it: [`Tensor::sort`],
//! [`Tensor::argsort`] and [`Tensor::top_k`].
//!
//! The comparator is a *hermetic* block over scalars; the sort is stable,
//! so equal keys keep their order.
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/sort.rs`.

use crate::ir::Op;
use crate::ir::ops::sort::*;
use crate::shape::AxisRef;
use crate::tensor::control::{poison, record_multi};
use crate::tensor::located;
use crate::tensor::reduce::{check_body, scalar_block};
use crate::{DType, Shape, Tensor};
use std::panic::Location;
use std::sync::Arc;

/// Sorts `operands` (tensors of equal dims) together along `axis`, stably
/// (`stablehlo.sort` with `is_stable = true`). `less(lhs, rhs)` gets one
/// scalar per operand on each side and returns a bool scalar: whether `lhs`
/// comes before `rhs`. It is a hermetic block. The results keep the
/// operands' shapes and tags.
#[track_caller]
pub fn sort(
    operands: &[Tensor],
    axis: impl Into<AxisRef>,
    less: impl FnOnce(&[Tensor], &[Tensor]) -> Tensor,
) -> Vec<Tensor> {
    let axis = axis.into();
    let n = operands.len();
    // StableHLO's comparator takes (lhs0, rhs0, lhs1, rhs1, ...).
    let dtypes: Vec<DType> = operands.iter().flat_map(|t| [t.dtype(); 2]).collect();
    let block = scalar_block("sort comparator", &dtypes, 1, |s| {
        let lhs: Vec<Tensor> = (0..n).map(|i| s[2 * i]).collect();
        let rhs: Vec<Tensor> = (0..n).map(|i| s[2 * i + 1]).collect();
        vec![less(&lhs, &rhs)]
    });
    let shapes: Vec<Shape> = operands.iter().map(|t| t.shape()).collect();
    let res = (|| {
        let first = operands.first().ok_or("no operands")?;
        let a = first
            .shape()
            .axis(axis)
            .ok_or_else(|| format!("no axis {axis} in {}", first.shape()))?;
        // The rule checks the operands' dims as the op is recorded.
        check_body(&block, &[DType::Bool])?;
        Ok(a)
    })();
    match res {
        Ok(a) => {
            let op = Op::Sort(crate::ir::ops::Sort {
                comparator: Arc::new(block.function),
                axis: a,
            });
            record_multi("sort", op, operands, &shapes)
        }
        Err(msg) => poison("sort", msg, operands, &shapes),
    }
}

impl Tensor {
    /// `self` sorted along `axis` in `order` (`stablehlo.sort`).
    #[track_caller]
    pub fn sort(self, axis: impl Into<AxisRef>, order: Order) -> Tensor {
        located(Location::caller(), || {
            sort(&[self], axis, |l, r| before(order, l[0], r[0]))[0]
        })
    }

    /// The `i32` positions that sort `self` along `axis` in `order` (equal
    /// values keep their order): `stablehlo.sort` of the values and an iota.
    #[track_caller]
    pub fn argsort(self, axis: impl Into<AxisRef>, order: Order) -> Tensor {
        self.sorted_with_indices(axis.into(), order).1
    }

    /// The `k` largest values along `axis`, largest first, and their `i32`
    /// positions (the first on ties); `axis` keeps its tag with size `k`.
    /// A descending [`sort`] of values and positions, sliced.
    #[track_caller]
    pub fn top_k(self, axis: impl Into<AxisRef>, k: i64) -> (Tensor, Tensor) {
        let axis = axis.into();
        let (v, i) = self.sorted_with_indices(axis, Order::Descending);
        (v.slice(axis, 0..k), i.slice(axis, 0..k))
    }

    #[track_caller]
    fn sorted_with_indices(self, axis: AxisRef, order: Order) -> (Tensor, Tensor) {
        let s = self.shape();
        let a = s.axis(axis).unwrap_or(0);
        let iota = Tensor::iota(s.with_dtype(DType::I32), a);
        let res = located(Location::caller(), || {
            sort(&[self, iota], axis, |l, r| before(order, l[0], r[0]))
        });
        (res[0], res[1])
    }
}

/// Whether `l` comes before `r` in `order`.
#[track_caller]
fn before(order: Order, l: Tensor, r: Tensor) -> Tensor {
    match order {
        Order::Ascending => l.lt(r),
        Order::Descending => l.gt(r),
    }
}
