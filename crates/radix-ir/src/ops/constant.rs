//! Constants and `iota`: their shape rule, printing (splats and dense
//! bytes) and reference semantics. The methods making them are in
//! radix's `tensor/constant.rs`.

use std::sync::Arc;

use super::Family;
use crate::Shape;
use crate::literal::{Literal, decode, strides};
use crate::print::{OpPrinter, dense};

/// The ops that make values from nothing; both state their result type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// `stablehlo.constant` with little-endian bytes (one element: a splat).
    Constant(Arc<[u8]>),
    /// `stablehlo.iota` along an axis.
    Iota(usize),
}

impl Family for Source {
    fn name(&self) -> &'static str {
        match self {
            Source::Constant(_) => "constant",
            Source::Iota(_) => "iota",
        }
    }

    /// A constant's bytes hold one element (a splat) or one per element of
    /// its declared type; `iota`'s axis is one of the declared type's.
    fn infer(&self, args: &[Shape], declared: Shape) -> Result<super::Shapes, String> {
        super::arity(args, 0)?;
        match self {
            Source::Constant(bytes) => {
                let size = declared.dtype().size_in_bytes();
                if bytes.len() == size || bytes.len() == size * declared.count() {
                    Ok(vec![declared])
                } else {
                    Err(format!("{} bytes for a constant {declared}", bytes.len()))
                }
            }
            Source::Iota(axis) if *axis < declared.rank() => Ok(vec![declared]),
            Source::Iota(axis) => Err(format!("iota along axis {axis} of {declared}")),
        }
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        match self {
            Source::Constant(bytes) => {
                let shape = p.shape();
                p.generic(
                    "stablehlo.constant",
                    &format!("value = {}", dense(&shape, bytes)),
                )
            }
            Source::Iota(axis) => {
                p.generic("stablehlo.iota", &format!("iota_dimension = {axis} : i64"))
            }
        }
    }

    fn eval(&self, _: &[&Literal], shape: Shape) -> Vec<Literal> {
        let value = match self {
            Source::Constant(bytes) => {
                let values = decode(shape.dtype(), bytes);
                let data = if values.len() == 1 {
                    vec![values[0]; shape.count()]
                } else {
                    values
                };
                Literal::new(shape, data)
            }
            Source::Iota(axis) => {
                let st = strides(shape.dims());
                let d = shape.dims()[*axis] as usize;
                Literal::new(
                    shape,
                    (0..shape.count())
                        .map(|i| ((i / st[*axis]) % d) as f64)
                        .collect(),
                )
            }
        };
        vec![value]
    }
}
