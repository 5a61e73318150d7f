//! Ops that move elements without computing: reshape, transpose, broadcast,
//! slice, concatenate, pad, reverse, and the tag-preserving helpers built on
//! them (squeeze/unsqueeze, split/merge axes, stack, rename).
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/shape_ops.rs`.

use crate::ir::Op;
use crate::ir::ops::shape_ops::*;
use crate::shape::{Axes, AxisRef, Size};
use crate::tensor::{emit, fail, record, record_inferred};
use crate::{Shape, Tensor};

impl Tensor {
    /// The same values with sizes `dims` (one may be `-1`, inferred); tags
    /// are dropped (`stablehlo.reshape`).
    #[track_caller]
    pub fn reshape(self, dims: &[i64]) -> Tensor {
        let res = infer_dims(self.shape(), dims).map(|d| {
            (
                Op::Movement(Movement::Reshape),
                Shape::new(self.dtype(), &d),
            )
        });
        record("reshape", &[self], res)
    }

    /// The same values with shape `shape` (same count and dtype; tags kept
    /// from `shape`) (`stablehlo.reshape`).
    #[track_caller]
    pub fn reshape_to(self, shape: Shape) -> Tensor {
        let res = if shape.count() != self.shape().count() || shape.dtype() != self.dtype() {
            Err(format!("cannot reshape to {shape}"))
        } else {
            Ok((Op::Movement(Movement::Reshape), shape))
        };
        record("reshape", &[self], res)
    }

    /// The axes reordered: axis `i` of the result is axis `axes[i]` of `self`,
    /// by position or tag (`stablehlo.transpose`).
    #[track_caller]
    pub fn transpose(self, axes: impl Axes) -> Tensor {
        let perm = self.shape().resolve(&axes);
        record_inferred(
            "transpose",
            &[self],
            perm.map(|p| Op::Movement(Movement::Transpose(p))),
        )
    }

    /// Broadcasts to `shape` (its dims and tags; dtype kept): axis `k` of
    /// `self` becomes axis `axes[k]`; a size-1 axis stretches
    /// (`stablehlo.broadcast_in_dim`).
    #[track_caller]
    pub fn broadcast_in_dim(self, shape: Shape, axes: &[usize]) -> Tensor {
        let s = self.shape();
        // The target's untagged axes take the tags of the operand's axes
        // sent there; the rule checks the axes.
        let mut out = shape.with_dtype(s.dtype());
        for (k, &a) in axes.iter().enumerate() {
            if let (None, Some(t)) = (out.tag(a), s.tag(k)) {
                out = out.with_tag(a, t.as_str()).unwrap_or(out);
            }
        }
        emit(
            Op::Movement(Movement::Broadcast(axes.to_vec())),
            &[self],
            out,
        )
    }

    /// Broadcasts to `shape` matching axes by tag: every axis of `self` must
    /// be tagged and its tag present in `shape` (`stablehlo.broadcast_in_dim`).
    #[track_caller]
    pub fn broadcast(self, shape: Shape) -> Tensor {
        let s = self.shape();
        let axes: Result<Vec<usize>, String> = s
            .tags()
            .iter()
            .enumerate()
            .map(|(k, t)| match t {
                Some(t) => shape
                    .axis(*t)
                    .ok_or_else(|| format!("no axis .{t} in {shape}")),
                None => Err(format!("axis {k} has no tag")),
            })
            .collect();
        match axes {
            Ok(axes) => self.broadcast_in_dim(shape, &axes),
            Err(msg) => fail("broadcast", msg, &[self], shape.with_dtype(s.dtype())),
        }
    }

    /// Broadcasts to `shape`, `self`'s axes becoming its first axes.
    #[track_caller]
    pub fn broadcast_left(self, shape: Shape) -> Tensor {
        let axes: Vec<usize> = (0..self.rank()).collect();
        self.broadcast_in_dim(shape, &axes)
    }

    /// Broadcasts to `shape`, `self`'s axes becoming its last axes (as numpy does).
    #[track_caller]
    pub fn broadcast_right(self, shape: Shape) -> Tensor {
        let off = shape.rank().saturating_sub(self.rank());
        let axes: Vec<usize> = (off..off + self.rank()).collect();
        self.broadcast_in_dim(shape, &axes)
    }

    /// The elements in `range` along `axis` (`x.slice("s", 0..n)`, `1..`,
    /// `..-1`); negative bounds count from the end (`stablehlo.slice`).
    #[track_caller]
    pub fn slice(self, axis: impl Into<AxisRef>, range: impl SliceRange) -> Tensor {
        self.slice_step(axis, range, 1)
    }

    /// Every `step`-th element in `range` along `axis`, from its start
    /// (`stablehlo.slice` with a stride).
    #[track_caller]
    pub fn slice_step(self, axis: impl Into<AxisRef>, range: impl SliceRange, step: i64) -> Tensor {
        let s = self.shape();
        let axis = axis.into();
        let Some(a) = s.axis(axis) else {
            return fail("slice", format!("no axis {axis}"), &[self], s);
        };
        let d = s.dims()[a];
        let fix = |i: i64| if i < 0 { i + d } else { i };
        let (start, end) = range.bounds(d);
        let mut spec = SliceSpec {
            start: vec![0; s.rank()],
            limit: s.dims().to_vec(),
            strides: vec![1; s.rank()],
        };
        spec.start[a] = fix(start);
        spec.limit[a] = fix(end);
        spec.strides[a] = step;
        self.slice_all(spec)
    }

    /// A strided box of the tensor (`stablehlo.slice`).
    #[track_caller]
    pub fn slice_all(self, spec: SliceSpec) -> Tensor {
        record_inferred("slice", &[self], Ok(Op::Movement(Movement::Slice(spec))))
    }

    /// `tensors` joined along `axis` (`stablehlo.concatenate`).
    #[track_caller]
    pub fn concatenate(tensors: &[Tensor], axis: impl Into<AxisRef>) -> Tensor {
        let axis = axis.into();
        let Some(first) = tensors.first() else {
            return fail(
                "concatenate",
                "no tensors".into(),
                &[],
                Shape::scalar(crate::DType::F32),
            );
        };
        let a = first
            .shape()
            .axis(axis)
            .ok_or_else(|| format!("no axis {axis}"));
        record_inferred(
            "concatenate",
            tensors,
            a.map(|a| Op::Movement(Movement::Concatenate(a))),
        )
    }

    /// `tensors` (equal shapes) stacked along a new axis at `at` tagged `tag`.
    #[track_caller]
    pub fn stack(tensors: &[Tensor], at: usize, tag: &str) -> Tensor {
        let parts: Vec<Tensor> = tensors.iter().map(|t| t.unsqueeze(at, tag)).collect();
        Tensor::concatenate(&parts, at)
    }

    /// Pads with `value`: `low`/`high` elements before/after each axis and
    /// `interior` between elements (`stablehlo.pad`).
    #[track_caller]
    pub fn pad(self, value: f64, spec: PadSpec) -> Tensor {
        let pad_value = Tensor::scalar(value, self.dtype());
        record_inferred(
            "pad",
            &[self, pad_value],
            Ok(Op::Movement(Movement::Pad(spec))),
        )
    }

    /// The order of elements reversed along `axes` (`stablehlo.reverse`).
    #[track_caller]
    pub fn reverse(self, axes: impl Axes) -> Tensor {
        let axes = self.shape().resolve(&axes);
        record_inferred(
            "reverse",
            &[self],
            axes.map(|a| Op::Movement(Movement::Reverse(a))),
        )
    }

    /// Without the size-1 `axis` (`stablehlo.reshape`, tags kept).
    #[track_caller]
    pub fn squeeze(self, axis: impl Into<AxisRef>) -> Tensor {
        let s = self.shape();
        let axis = axis.into();
        let res = match s.axis(axis) {
            Some(a) if s.dims()[a] == 1 => Ok((
                Op::Movement(Movement::Reshape),
                s.remove_axis(a).unwrap_or(s),
            )),
            Some(a) => Err(format!("axis {a} has size {}, not 1", s.dims()[a])),
            None => Err(format!("no axis {axis}")),
        };
        record("squeeze", &[self], res)
    }

    /// With a new size-1 axis at `at` tagged `tag` (untagged if empty)
    /// (`stablehlo.reshape`).
    #[track_caller]
    pub fn unsqueeze(self, at: usize, tag: &str) -> Tensor {
        let s = self.shape();
        let res = s
            .insert_axis(at, 1, tag)
            .map(|o| (Op::Movement(Movement::Reshape), o))
            .ok_or_else(|| format!("cannot insert an axis at {at}"));
        record("unsqueeze", &[self], res)
    }

    /// `axis` split into `(tag, size)` parts, one of which may be
    /// [`Size::Auto`]: `x.split_axis("d", &[("h", n_heads.into()), ("hd", Size::Auto)])`
    /// (`stablehlo.reshape`).
    #[track_caller]
    pub fn split_axis(self, axis: impl Into<AxisRef>, parts: &[(&str, Size)]) -> Tensor {
        let axis = axis.into();
        let res = self
            .shape()
            .split_axis(axis, parts)
            .map(|o| (Op::Movement(Movement::Reshape), o))
            .ok_or_else(|| format!("cannot split axis {axis} into {parts:?}"));
        record("split_axis", &[self], res)
    }

    /// Consecutive `axes` merged into one axis tagged `tag` (`stablehlo.reshape`).
    #[track_caller]
    pub fn merge_axes(self, axes: impl Axes, tag: &str) -> Tensor {
        let refs = axes.to_refs();
        let res = self
            .shape()
            .merge_axes(&refs, tag)
            .map(|o| (Op::Movement(Movement::Reshape), o))
            .ok_or_else(|| format!("cannot merge axes {refs:?}"));
        record("merge_axes", &[self], res)
    }

    /// The same tensor with axis tag `from` renamed `to` (no op is emitted).
    #[track_caller]
    pub fn rename(self, from: &str, to: &str) -> Tensor {
        match self.shape().rename(from, to) {
            Some(s) => self.retag(s),
            None => fail("rename", format!("no axis .{from}"), &[self], self.shape()),
        }
    }

    /// The same tensor with its axes tagged `tags` in order (no op is emitted).
    #[track_caller]
    pub fn with_tags(self, tags: &[&str]) -> Tensor {
        if tags.len() != self.rank() {
            return fail(
                "with_tags",
                format!("{} tags for rank {}", tags.len(), self.rank()),
                &[self],
                self.shape(),
            );
        }
        self.retag(self.shape().with_tags(tags))
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, Literal, PadSpec, Shape, Tensor};

    fn x23() -> [Literal; 1] {
        [Literal::new(
            Shape::tagged(DType::F32, &[("a", 2), ("b", 3)]),
            vec![1., 2., 3., 4., 5., 6.],
        )]
    }

    #[test]
    fn reshape_transpose_reverse() {
        let r = check(
            &x23(),
            |x| x[0].reshape(&[3, -1]),
            &[1., 2., 3., 4., 5., 6.],
            Tol::EXACT,
        );
        assert_eq!(r.shape().dims(), &[3, 2]);
        let t = check(
            &x23(),
            |x| x[0].transpose(["b", "a"]),
            &[1., 4., 2., 5., 3., 6.],
            Tol::EXACT,
        );
        assert_eq!(t.shape(), Shape::tagged(DType::F32, &[("b", 3), ("a", 2)]));
        check(
            &x23(),
            |x| x[0].reverse("b"),
            &[3., 2., 1., 6., 5., 4.],
            Tol::EXACT,
        );
        check(
            &x23(),
            |x| x[0].transpose([1, 0]).reverse([0, 1]),
            &[6., 3., 5., 2., 4., 1.],
            Tol::EXACT,
        );
    }

    #[test]
    fn broadcasts_by_position_tag_and_side() {
        let v = [Literal::new(
            Shape::tagged(DType::F32, &[("b", 3)]),
            vec![1., 2., 3.],
        )];
        let target = Shape::tagged(DType::F32, &[("a", 2), ("b", 3)]);
        let want = [1., 2., 3., 1., 2., 3.];
        let r = check(&v, |x| x[0].broadcast(target), &want, Tol::EXACT);
        assert_eq!(r.shape(), target);
        check(
            &v,
            |x| x[0].broadcast_right(Shape::new(DType::F32, &[2, 3])),
            &want,
            Tol::EXACT,
        );
        check(
            &v,
            |x| x[0].broadcast_left(Shape::new(DType::F32, &[3, 2])),
            &[1., 1., 2., 2., 3., 3.],
            Tol::EXACT,
        );
        let r = check(
            &v,
            |x| x[0].broadcast_in_dim(Shape::new(DType::F32, &[3, 2]), &[0]),
            &[1., 1., 2., 2., 3., 3.],
            Tol::EXACT,
        );
        assert_eq!(r.shape().tag(0).map(|t| t.as_str()), Some("b"));
    }

    #[test]
    fn slice_concat_stack_pad() {
        check(
            &x23(),
            |x| x[0].slice_step("b", 0..3, 2),
            &[1., 3., 4., 6.],
            Tol::EXACT,
        );
        check(
            &x23(),
            |x| x[0].slice(1, -2..3),
            &[2., 3., 5., 6.],
            Tol::EXACT,
        );
        let c = check(
            &x23(),
            |x| Tensor::concatenate(&[x[0], x[0].slice("a", 1..)], "a"),
            &[1., 2., 3., 4., 5., 6., 4., 5., 6.],
            Tol::EXACT,
        );
        assert_eq!(c.shape().dim("a"), Some(3));
        let s = check(
            &x23(),
            |x| Tensor::stack(&[x[0], x[0] * 2.0], 0, "s"),
            &[1., 2., 3., 4., 5., 6., 2., 4., 6., 8., 10., 12.],
            Tol::EXACT,
        );
        assert_eq!(s.shape().dims(), &[2, 2, 3]);
        let spec = PadSpec {
            low: vec![0, 1],
            high: vec![1, 0],
            interior: vec![0, 1],
        };
        check(
            &x23(),
            |x| x[0].pad(0.5, spec),
            &[
                0.5, 1., 0.5, 2., 0.5, 3., 0.5, 4., 0.5, 5., 0.5, 6., 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
            ],
            Tol::EXACT,
        );
    }

    #[test]
    fn tag_preserving_reshapes() {
        let s = check(
            &x23(),
            |x| {
                x[0].split_axis("b", &[("h", 3.into()), ("e", 1.into())])
                    .squeeze("e")
                    .unsqueeze(0, "one")
            },
            &[1., 2., 3., 4., 5., 6.],
            Tol::EXACT,
        );
        assert_eq!(
            s.shape(),
            Shape::tagged(DType::F32, &[("one", 1), ("a", 2), ("h", 3)])
        );
        let m = check(
            &x23(),
            |x| x[0].merge_axes(["a", "b"], "ab").rename("ab", "n"),
            &[1., 2., 3., 4., 5., 6.],
            Tol::EXACT,
        );
        assert_eq!(m.shape(), Shape::tagged(DType::F32, &[("n", 6)]));
    }
}
