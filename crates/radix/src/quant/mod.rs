//! Quantized weights kept quantized. A matrix stored in a GGUF block format
//! is a `u8` tensor of its raw blocks, `[rows, row_bytes]`, whose last axis
//! is tagged with the format (`blocks:Q4_1`): the shape alone tells tracing
//! the format, so a model struct holds such a weight in an ordinary
//! [`Tensor`](crate::Tensor) field, its [`Shapes`](crate::Shapes) twin says
//! what an executable was compiled for, and the executable cache keys on it.
//!
//! [`nn::Linear`](crate::nn::Linear) and [`nn::Embedding`](crate::nn::Embedding)
//! accept such weights; the block formats, the reference dequantizer and the
//! CPU kernels are `radix-quant`'s.

mod dot;
mod rows;
mod unpack;

pub use dot::dot;
pub use radix_quant::Format;
pub use rows::rows;
pub use unpack::dequantize;

use crate::{DType, Shape};

/// What a blocks axis's tag starts with; the format's name follows.
const TAG_PREFIX: &str = "blocks:";

/// The shape of a matrix of `rows` (an axis `(tag, size)`) by `cols`
/// elements stored as `format` blocks: `u8 [rows, row_bytes]`, the last axis
/// tagged `blocks:<format>`. `Err` if `cols` is not a whole number of blocks
/// or a size is negative.
///
/// ```
/// use radix::quant::{Format, blocks_shape, blocks_format};
/// let s = blocks_shape(Format::Q4_1, ("out", 8), 64).unwrap();
/// assert_eq!(s.dims(), &[8, 40]);
/// assert_eq!(blocks_format(&s), Some((Format::Q4_1, 64)));
/// ```
pub fn blocks_shape(format: Format, rows: (&str, i64), cols: i64) -> Result<Shape, String> {
    let (Ok(_), Ok(n_cols)) = (usize::try_from(rows.1), usize::try_from(cols)) else {
        return Err(format!(
            "{} × {cols} {}: sizes must not be negative",
            rows.1,
            format.name()
        ));
    };
    let row_bytes = format.row_bytes(n_cols).map_err(|e| e.to_string())?;
    let tag = format!("{TAG_PREFIX}{}", format.name());
    Ok(Shape::tagged(
        DType::U8,
        &[rows, (tag.as_str(), row_bytes as i64)],
    ))
}

/// The block format of a blocks shape ([`blocks_shape`]) and the number of
/// elements in each row, or `None` for any other shape.
pub fn blocks_format(shape: &Shape) -> Option<(Format, i64)> {
    if shape.dtype() != DType::U8 || shape.rank() == 0 {
        return None;
    }
    let last = shape.rank() - 1;
    let name = shape.tag(last)?.as_str().strip_prefix(TAG_PREFIX)?;
    let format = Format::from_name(name)?;
    let cols = format.row_cols(shape.dims()[last] as usize)?;
    Some((format, cols as i64))
}
