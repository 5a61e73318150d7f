//! Constants: scalars, host arrays, `iota`/`arange`, filled tensors.
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/constant.rs`.

use crate::ir::Op;
use crate::ir::ops::Source;
use crate::literal::{Literal, encode};
use crate::tensor::{emit, fail};
use crate::{DType, Element, Shape, Tensor};
use std::sync::Arc;

impl Tensor {
    /// A rank-0 constant `v` of `dtype` (`stablehlo.constant`).
    #[track_caller]
    pub fn scalar(v: f64, dtype: DType) -> Tensor {
        let shape = Shape::scalar(dtype);
        emit(
            Op::Source(Source::Constant(encode(dtype, &[v]).into())),
            &[],
            shape,
        )
    }

    /// A constant holding `values` with sizes `dims` (`stablehlo.constant`).
    #[track_caller]
    pub fn from_slice<T: Element>(values: &[T], dims: &[i64]) -> Tensor {
        Tensor::constant(&Literal::from_slice(values, dims))
    }

    /// A constant holding `literal` (`stablehlo.constant`).
    #[track_caller]
    pub fn constant(literal: &Literal) -> Tensor {
        emit(
            Op::Source(Source::Constant(Arc::from(literal.to_bytes()))),
            &[],
            literal.shape(),
        )
    }

    /// A tensor of `shape` filled with `v` (a splat `stablehlo.constant`).
    #[track_caller]
    pub fn full(shape: Shape, v: f64) -> Tensor {
        emit(
            Op::Source(Source::Constant(encode(shape.dtype(), &[v]).into())),
            &[],
            shape,
        )
    }

    /// A tensor of `shape` filled with zeros.
    #[track_caller]
    pub fn zeros(shape: Shape) -> Tensor {
        Tensor::full(shape, 0.0)
    }

    /// A tensor of `shape` whose values count 0, 1, 2, ... along `axis`
    /// (`stablehlo.iota`).
    #[track_caller]
    pub fn iota(shape: Shape, axis: impl Into<crate::AxisRef>) -> Tensor {
        let axis = axis.into();
        match shape.axis(axis) {
            Some(i) if shape.dtype() != DType::Bool => {
                emit(Op::Source(Source::Iota(i)), &[], shape)
            }
            Some(_) => fail("iota", "iota of bools".into(), &[], shape),
            None => fail("iota", format!("no axis {axis} in {shape}"), &[], shape),
        }
    }

    /// `[0, 1, ..., n-1]` of `dtype` (`stablehlo.iota`).
    #[track_caller]
    pub fn arange(n: i64, dtype: DType) -> Tensor {
        Tensor::iota(Shape::new(dtype, &[n]), 0)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, Literal, Shape, Tensor};

    #[test]
    fn constants_iota_arange() {
        let none: [Literal; 0] = [];
        check(
            &none,
            |_| Tensor::from_slice(&[1.5f32, -2.0, 3.25], &[3]),
            &[1.5, -2.0, 3.25],
            Tol::EXACT,
        );
        check(
            &none,
            |_| Tensor::full(Shape::new(DType::I64, &[2, 2]), 7.0),
            &[7.0; 4],
            Tol::EXACT,
        );
        check(
            &none,
            |_| Tensor::arange(4, DType::F32) * 0.5,
            &[0.0, 0.5, 1.0, 1.5],
            Tol::EXACT,
        );
        let it = check(
            &none,
            |_| Tensor::iota(Shape::tagged(DType::I32, &[("a", 2), ("b", 3)]), "b"),
            &[0., 1., 2., 0., 1., 2.],
            Tol::EXACT,
        );
        assert_eq!(it.shape().dim("b"), Some(3));
        let bools = check(
            &none,
            |_| Tensor::from_slice(&[true, false, true, true], &[2, 2]),
            &[1., 0., 1., 1.],
            Tol::EXACT,
        );
        assert_eq!(bools.shape().dtype(), DType::Bool);
        check(
            &none,
            |_| Tensor::from_slice(&[half::bf16::from_f32(1.5)], &[]),
            &[1.5],
            Tol::EXACT,
        );
    }
}
