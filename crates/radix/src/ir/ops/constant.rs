//! Constants and `iota`: printing (splats and dense bytes) and reference
//! semantics. The methods making them are in `tensor/constant.rs`.

use crate::Shape;
use crate::ir::Op;
use crate::ir::print::{OpPrinter, dense};
use crate::literal::{Literal, decode, strides};

/// The shape rule of a constant (its bytes hold one element, a splat, or
/// one per element of its declared type) and of `iota` (its axis is one of
/// the declared type's).
pub(crate) fn infer(op: &Op, args: &[Shape], declared: Shape) -> Result<Shape, String> {
    super::arity(args, 0)?;
    match op {
        Op::Constant(bytes) => {
            let size = declared.dtype().size_in_bytes();
            if bytes.len() == size || bytes.len() == size * declared.count() {
                Ok(declared)
            } else {
                Err(format!("{} bytes for a constant {declared}", bytes.len()))
            }
        }
        Op::Iota(axis) if *axis < declared.rank() => Ok(declared),
        Op::Iota(axis) => Err(format!("iota along axis {axis} of {declared}")),
        _ => Err(format!("{} is not a constant", op.name())),
    }
}

pub(crate) fn print(op: &Op, p: &mut OpPrinter<'_>) {
    match op {
        Op::Constant(bytes) => {
            let shape = p.shape();
            p.generic(
                "stablehlo.constant",
                &format!("value = {}", dense(&shape, bytes)),
            )
        }
        Op::Iota(axis) => p.generic("stablehlo.iota", &format!("iota_dimension = {axis} : i64")),
        _ => unreachable!(),
    }
}

pub(crate) fn eval(op: &Op, shape: Shape) -> Literal {
    match op {
        Op::Constant(bytes) => {
            let values = decode(shape.dtype(), bytes);
            let data = if values.len() == 1 {
                vec![values[0]; shape.count()]
            } else {
                values
            };
            Literal::new(shape, data)
        }
        Op::Iota(axis) => {
            let st = strides(shape.dims());
            let d = shape.dims()[*axis] as usize;
            Literal::new(
                shape,
                (0..shape.count())
                    .map(|i| ((i / st[*axis]) % d) as f64)
                    .collect(),
            )
        }
        _ => unreachable!(),
    }
}
