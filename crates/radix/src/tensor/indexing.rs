//! Indexing: `dynamic_slice` and `dynamic_update_slice` at run-time offsets,
//! `gather` of slices along an axis (embedding lookup), `scatter` of slices
//! with an update function (a hermetic block over scalars: override, add).
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/indexing.rs`.

use crate::ir::Op;
use crate::ir::ops::indexing::*;
use crate::shape::AxisRef;
use crate::tensor::reduce::{check_body, scalar_block};
use crate::tensor::{located, record_inferred};
use crate::{DType, Tensor};
use std::panic::Location;
use std::sync::Arc;

impl Tensor {
    /// Entry `i` (an integer scalar, clamped into the axis) of a stack's
    /// leading axis, without that axis: a `dynamic_slice` of the whole
    /// entry and a reshape. Where a custom call's kernel reads it, the
    /// kernel reads it inside the stack, with no copy
    /// ([`crate::ir::passes::layers`]): a loop over a model's stacked
    /// layers reads each layer's matrices where they lie.
    #[track_caller]
    pub fn layer(self, i: Tensor) -> Tensor {
        let dims = self.shape().dims().to_vec();
        let zero = Tensor::scalar(0.0, i.dtype());
        let mut starts = vec![i];
        starts.resize(dims.len().max(1), zero);
        let mut sizes = dims.clone();
        if let Some(lead) = sizes.first_mut() {
            *lead = 1;
        }
        self.dynamic_slice(&starts, &sizes).squeeze(0)
    }

    /// A box of sizes `sizes` starting at `starts` (one integer scalar tensor
    /// per axis); starts are clamped so the box fits (`stablehlo.dynamic_slice`).
    #[track_caller]
    pub fn dynamic_slice(self, starts: &[Tensor], sizes: &[i64]) -> Tensor {
        let mut args = vec![self];
        args.extend_from_slice(starts);
        record_inferred(
            "dynamic_slice",
            &args,
            Ok(Op::Indexing(Indexing::DynamicSlice(sizes.to_vec()))),
        )
    }

    /// `self` with `update` written at `starts` (clamped so it fits)
    /// (`stablehlo.dynamic_update_slice`).
    #[track_caller]
    pub fn dynamic_update_slice(self, update: Tensor, starts: &[Tensor]) -> Tensor {
        let mut args = vec![self, update];
        args.extend_from_slice(starts);
        record_inferred(
            "dynamic_update_slice",
            &args,
            Ok(Op::Indexing(Indexing::DynamicUpdateSlice)),
        )
    }

    /// Slices of `self` along `axis` picked by integer `indices`: the result
    /// has `self`'s axes with `axis` replaced by the axes of `indices`
    /// (embedding lookup: `table.gather("voc", ids)`); indices are clamped
    /// (`stablehlo.gather`).
    #[track_caller]
    pub fn gather(self, axis: impl Into<AxisRef>, indices: Tensor) -> Tensor {
        let a = gathered_shape(self.shape(), axis.into(), indices.shape()).map(|(a, _)| a);
        record_inferred(
            "gather",
            &[self, indices],
            a.map(|a| Op::Indexing(Indexing::Gather(a))),
        )
    }

    /// `self` with row `i` (an `i32` scalar) of its leading axis replaced
    /// by `row`, shaped as the other axes: how a loop stacks a value per
    /// iteration.
    #[track_caller]
    pub(crate) fn with_row(self, i: Tensor, row: Tensor) -> Tensor {
        let tag = self.shape().tag(0).map_or("", |t| t.as_str());
        let starts = [vec![i], vec![Tensor::scalar(0.0, DType::I32); row.rank()]].concat();
        self.dynamic_update_slice(row.unsqueeze(0, tag), &starts)
    }

    /// Row `i` (an `i32` scalar) of the leading axis, shaped as the other
    /// axes: what [`Tensor::with_row`] wrote.
    #[track_caller]
    pub(crate) fn row(self, i: Tensor) -> Tensor {
        let mut sizes = self.dims();
        sizes[0] = 1;
        let starts = [
            vec![i],
            vec![Tensor::scalar(0.0, DType::I32); self.rank() - 1],
        ]
        .concat();
        self.dynamic_slice(&starts, &sizes).squeeze(0)
    }

    /// `self` with the slices along `axis` at `indices` replaced by `updates`
    /// (shaped as `self.gather(axis, indices)`); out-of-range indices are
    /// skipped, and which update wins at a repeated index is unspecified
    /// (`stablehlo.scatter` returning the update).
    #[track_caller]
    pub fn scatter(self, axis: impl Into<AxisRef>, indices: Tensor, updates: Tensor) -> Tensor {
        let axis = axis.into();
        located(Location::caller(), || {
            self.scatter_with(axis, indices, updates, |_, new| new)
        })
    }

    /// `self` with `updates` added to the slices along `axis` at `indices`;
    /// updates at a repeated index accumulate (`stablehlo.scatter` with `add`).
    #[track_caller]
    pub fn scatter_add(self, axis: impl Into<AxisRef>, indices: Tensor, updates: Tensor) -> Tensor {
        let axis = axis.into();
        located(Location::caller(), || {
            self.scatter_with(axis, indices, updates, |old, new| old + new)
        })
    }

    /// `self` with each element `old` of the slices along `axis` at
    /// `indices` replaced by `update(old, new)`, `new` from `updates`
    /// (shaped as `self.gather(axis, indices)`); out-of-range indices are
    /// skipped (`stablehlo.scatter`). `update` is a hermetic block over
    /// scalars; at a repeated index it is applied once per update, in an
    /// unspecified order.
    #[track_caller]
    pub fn scatter_with(
        self,
        axis: impl Into<AxisRef>,
        indices: Tensor,
        updates: Tensor,
        update: impl FnOnce(Tensor, Tensor) -> Tensor,
    ) -> Tensor {
        let s = self.shape();
        let axis = axis.into();
        let block = scalar_block("scatter update", &[s.dtype()], 2, |x| {
            vec![update(x[0], x[1])]
        });
        let op = gathered_shape(s, axis, indices.shape()).and_then(|(a, _)| {
            check_body(&block, &[s.dtype()])?;
            Ok(Op::Indexing(Indexing::Scatter {
                axis: a,
                update: Arc::new(block.function),
            }))
        });
        record_inferred("scatter", &[self, indices, updates], op)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, Literal, Shape, Tensor};

    fn table() -> Literal {
        Literal::new(
            Shape::tagged(DType::F32, &[("voc", 4), ("d", 2)]),
            vec![0., 1., 10., 11., 20., 21., 30., 31.],
        )
    }

    #[test]
    fn embedding_lookup_gather() {
        let ids = Literal::new(Shape::tagged(DType::I32, &[("s", 3)]), vec![2., 0., 3.]);
        let r = check(
            &[table(), ids],
            |x| x[0].gather("voc", x[1]),
            &[20., 21., 0., 1., 30., 31.],
            Tol::EXACT,
        );
        assert_eq!(r.shape(), Shape::tagged(DType::F32, &[("s", 3), ("d", 2)]));
        let cols = Literal::from_slice(&[1i64, 1, 0], &[3]);
        check(
            &[table(), cols],
            |x| x[0].gather("d", x[1]),
            &[1., 1., 0., 11., 11., 10., 21., 21., 20., 31., 31., 30.],
            Tol::EXACT,
        );
    }

    #[test]
    fn scatter_slices() {
        let ids = Literal::from_slice(&[3i32, 1], &[2]);
        let upd = Literal::new(Shape::new(DType::F32, &[2, 2]), vec![-1., -2., -3., -4.]);
        check(
            &[table(), ids, upd],
            |x| x[0].scatter("voc", x[1], x[2]),
            &[0., 1., -3., -4., 20., 21., -1., -2.],
            Tol::EXACT,
        );
    }

    #[test]
    fn dynamic_slices_clamp() {
        let at = |i: f64| Tensor::scalar(i, DType::I32);
        check(
            &[table()],
            |x| x[0].dynamic_slice(&[at(1.0), at(1.0)], &[2, 1]),
            &[11., 21.],
            Tol::EXACT,
        );
        check(
            &[table()],
            |x| x[0].dynamic_slice(&[at(3.0), at(0.0)], &[2, 2]),
            &[20., 21., 30., 31.],
            Tol::EXACT,
        );
        let upd = Literal::new(Shape::new(DType::F32, &[1, 2]), vec![7., 8.]);
        check(
            &[table(), upd],
            |x| x[0].dynamic_update_slice(x[1], &[at(2.0), at(0.0)]),
            &[0., 1., 10., 11., 7., 8., 30., 31.],
            Tol::EXACT,
        );
    }
}
