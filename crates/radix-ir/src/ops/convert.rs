//! Element type changes, `stablehlo.convert` (by value) and
//! `stablehlo.bitcast_convert` (by bits): the shape rules, printing,
//! reference semantics and derivatives.

use super::Family;
use crate::literal::{Literal, encode};
use crate::print::OpPrinter;
use crate::{DType, Shape};

/// The shape rule of `stablehlo.bitcast_convert` from `from` to `to`: the
/// same dims for equal widths; a narrower `to` appends an (untagged) axis of
/// the width ratio, holding each element's pieces least significant first
/// (little-endian memory order); a wider `to` consumes a trailing axis that
/// must be that ratio. Bools bitcast to nothing else.
pub fn bitcast_shape(from: Shape, to: DType) -> Result<Shape, String> {
    let (a, b) = (from.dtype().size_in_bytes(), to.size_in_bytes());
    if (from.dtype() == DType::Bool) != (to == DType::Bool) {
        return Err(format!(
            "{} and {to}: bools bitcast to bools only",
            from.dtype()
        ));
    }
    if a == b {
        return Ok(from.with_dtype(to));
    }
    if a > b {
        let ratio = (a / b) as i64;
        return from
            .with_dtype(to)
            .insert_axis(from.rank(), ratio, "")
            .ok_or_else(|| format!("{from} to {to}: no room for another axis"));
    }
    let ratio = (b / a) as i64;
    match from.dims().last() {
        Some(&last) if last == ratio => Ok(from
            .with_dtype(to)
            .remove_axis(from.rank() - 1)
            .expect("the last axis exists")),
        _ => Err(format!(
            "{from} to {to}: the last axis must have size {ratio}, the width ratio"
        )),
    }
}

/// The element type changes; both state their result type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Conversion {
    /// `stablehlo.convert`.
    Convert,
    /// `stablehlo.bitcast_convert` (widths may differ: see [`bitcast_shape`]).
    Bitcast,
}

impl Family for Conversion {
    fn name(&self) -> &'static str {
        match self {
            Conversion::Convert => "convert",
            Conversion::Bitcast => "bitcast",
        }
    }

    /// `convert`: the declared type has the operand's dims;
    /// `bitcast_convert`: it is [`bitcast_shape`] to the declared dtype.
    fn infer(&self, args: &[Shape], declared: Shape) -> Result<super::Shapes, String> {
        super::arity(args, 1)?;
        let want = match self {
            Conversion::Convert => args[0].with_dtype(declared.dtype()),
            Conversion::Bitcast => bitcast_shape(args[0], declared.dtype())?,
        };
        super::same_type(want, declared).map(|()| vec![declared])
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        match self {
            Conversion::Convert => p.generic("stablehlo.convert", ""),
            Conversion::Bitcast => p.generic("stablehlo.bitcast_convert", ""),
        }
    }

    fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal> {
        let value = match self {
            Conversion::Convert => Literal::new(shape, args[0].data().to_vec()),
            // The operand's row-major little-endian bytes are the result's at
            // any widths: an added or consumed axis is the last, the fastest
            // varying, and holds each wide element's pieces in memory order.
            // (NaN payloads are not kept: literals hold values as f64.)
            Conversion::Bitcast => {
                let bytes = encode(args[0].shape().dtype(), args[0].data());
                Literal::from_bytes(shape, &bytes)
            }
        };
        vec![value]
    }
}
