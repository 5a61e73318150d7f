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
mod dots;
mod rows;
mod unpack;

pub use dot::{dot, dot_bias, dot_bias_gelu_erf};
pub use dots::dots;
pub use radix_quant::{DOT_MAX_TOKENS, Format};
pub use rows::rows;
pub use unpack::dequantize;

use crate::{DType, Shape};

/// What a blocks axis's tag starts with; the format's name follows.
const TAG_PREFIX: &str = "blocks:";

/// What a blocks axis's tag ends with when its products are [`Products::Exact`].
const EXACT_SUFFIX: &str = ":exact";

/// What a blocks axis's tag ends with when its F32 rows are packed in
/// panels ([`Layout::Panels`]).
const PANELS_SUFFIX: &str = ":panels";

/// What a blocks axis's tag ends with when its rows are split
/// ([`Layout::Split`]: Q8_0, Q4_0, Q4_1 and Q5_0).
const SPLIT_SUFFIX: &str = ":split";

/// The order of a blocks matrix's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Row after row, as files store them.
    #[default]
    Rows,
    /// F32 only: panels of [`radix_quant::PANEL_ROWS`] rows with each
    /// column's 16 weights side by side ([`radix_quant::pack_panels`]),
    /// packed once at load so that a prompt's products take a vector of
    /// weights per load and nothing is rearranged per call. The shape is
    /// the row-major one (`[rows, cols × 4]`); only the tag differs.
    Panels,
    /// Q8_0, Q4_0, Q4_1 and Q5_0 only: each row's codes (Q8_0's as unsigned
    /// bytes, `w ^ 0x80`; Q5_0's nibbles, then their fifth bits), then its
    /// scales (then Q4_1's minimums) ([`radix_quant::split_rows`]), split
    /// once at load so that the VNNI decode dot takes two Q8_0 or four
    /// 4- or 5-bit blocks' codes per load and sixteen blocks' scales per
    /// load. The shape is the row-major one and
    /// a row is still a row; only the tag differs. Products are
    /// [`Products::Int8`].
    Split,
}

/// How the CPU kernels multiply a blocks matrix by f32 activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Products {
    /// As llama.cpp computes them: each activation row quantized once to
    /// 8-bit blocks (Q8_0's scheme), then integer multiply-adds. A decode
    /// step or a batch of them (up to `radix_quant::DOT_MAX_TOKENS` tokens)
    /// takes a dot per row for every block format (F32, F16 and BF16 are
    /// [`Products::Exact`] there); a longer prompt takes tiled
    /// integer products for every quantized format where the CPU has
    /// AVX-512 VNNI (and exact tiled f32 products where it does not, those
    /// being faster than integer ones without VNNI). The result is `W·x̃`
    /// for the quantized `x̃`: faster, and each activation moves by up to
    /// 1/254 of its block's largest magnitude.
    #[default]
    Int8,
    /// `W·x` with every weight decoded exactly and products summed in f32,
    /// equal to "dequantize, then an f32 dot" up to the order of the sums.
    Exact,
}

impl Products {
    /// The name a program spells it with (the `products` attribute of
    /// `radix.quant_dot`): `int8` or `exact`.
    pub fn name(self) -> &'static str {
        match self {
            Products::Int8 => "int8",
            Products::Exact => "exact",
        }
    }

    /// The products named `name` ([`Products::name`]).
    pub fn from_name(name: &str) -> Option<Products> {
        [Products::Int8, Products::Exact]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

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
    blocks_shape_with(format, rows, cols, Products::default())
}

/// [`blocks_shape`] whose products the kernels compute as `products` says
/// (the tag records it, so a program, and its cache key, follow it).
///
/// ```
/// use radix::quant::{Format, Products, blocks_products, blocks_shape_with};
/// let s = blocks_shape_with(Format::Q8_0, ("out", 8), 64, Products::Exact).unwrap();
/// assert_eq!(blocks_products(&s), Some(Products::Exact));
/// ```
pub fn blocks_shape_with(
    format: Format,
    rows: (&str, i64),
    cols: i64,
    products: Products,
) -> Result<Shape, String> {
    let (Ok(_), Ok(n_cols)) = (usize::try_from(rows.1), usize::try_from(cols)) else {
        return Err(format!(
            "{} × {cols} {}: sizes must not be negative",
            rows.1,
            format.name()
        ));
    };
    let row_bytes = format.row_bytes(n_cols).map_err(|e| e.to_string())?;
    let suffix = match products {
        Products::Int8 => "",
        Products::Exact => EXACT_SUFFIX,
    };
    let tag = format!("{TAG_PREFIX}{}{suffix}", format.name());
    Ok(Shape::tagged(
        DType::U8,
        &[rows, (tag.as_str(), row_bytes as i64)],
    ))
}

/// An F32 matrix of `rows` (an axis `(tag, size)`, a multiple of
/// [`radix_quant::PANEL_ROWS`]) by `cols` packed in panels
/// ([`Layout::Panels`]): `u8 [rows, cols × 4]`, the last axis tagged
/// `blocks:F32:panels`.
///
/// ```
/// use radix::quant::{Format, Layout, blocks_format, blocks_layout, panels_shape};
/// let s = panels_shape(("out", 32), 8).unwrap();
/// assert_eq!(blocks_format(&s), Some((Format::F32, 8)));
/// assert_eq!(blocks_layout(&s), Some(Layout::Panels));
/// assert!(panels_shape(("out", 20), 8).is_err());
/// ```
pub fn panels_shape(rows: (&str, i64), cols: i64) -> Result<Shape, String> {
    if rows.1 < 0 || rows.1 % radix_quant::PANEL_ROWS as i64 != 0 {
        return Err(format!(
            "{} rows are not a whole number of {}-row panels",
            rows.1,
            radix_quant::PANEL_ROWS
        ));
    }
    let rows_major = blocks_shape(Format::F32, rows, cols)?;
    let tag = format!("{TAG_PREFIX}{}{PANELS_SUFFIX}", Format::F32.name());
    Ok(Shape::tagged(
        DType::U8,
        &[rows, (tag.as_str(), rows_major.dims()[1])],
    ))
}

/// A Q8_0, Q4_0, Q4_1 or Q5_0 matrix of `rows` (an axis `(tag, size)`) by `cols`
/// with its rows split ([`Layout::Split`]): `u8 [rows, row_bytes]` as
/// [`blocks_shape`] gives, the last axis tagged `blocks:<format>:split`.
/// `Err` for another format (only Q8_0, Q4_0, Q4_1 and Q5_0 rows split) or sizes
/// `blocks_shape` refuses.
///
/// ```
/// use radix::quant::{Format, Layout, blocks_format, blocks_layout, split_shape};
/// let s = split_shape(Format::Q8_0, ("out", 8), 64).unwrap();
/// assert_eq!(s.dims(), &[8, 68]);
/// assert_eq!(blocks_format(&s), Some((Format::Q8_0, 64)));
/// assert_eq!(blocks_layout(&s), Some(Layout::Split));
/// assert!(split_shape(Format::Q5_1, ("out", 8), 64).is_err());
/// ```
pub fn split_shape(format: Format, rows: (&str, i64), cols: i64) -> Result<Shape, String> {
    radix_quant::RowLayout::Split
        .check(format)
        .map_err(|e| e.to_string())?;
    let rows_major = blocks_shape(format, rows, cols)?;
    let tag = format!("{TAG_PREFIX}{}{SPLIT_SUFFIX}", format.name());
    Ok(Shape::tagged(
        DType::U8,
        &[rows, (tag.as_str(), rows_major.dims()[1])],
    ))
}

/// The order of a blocks shape's bytes, or `None` for any other shape.
pub fn blocks_layout(shape: &Shape) -> Option<Layout> {
    blocks_format(shape)?;
    let tag = shape.tag(shape.rank() - 1)?.as_str();
    Some(if tag.ends_with(PANELS_SUFFIX) {
        Layout::Panels
    } else if tag.ends_with(SPLIT_SUFFIX) {
        Layout::Split
    } else {
        Layout::Rows
    })
}

/// Whether rows of the format named `name` may be split ([`Layout::Split`]).
fn splits(name: &str) -> bool {
    Format::from_name(name).is_some_and(|f| radix_quant::RowLayout::Split.check(f).is_ok())
}

/// The block format of a blocks shape ([`blocks_shape`]) and the number of
/// elements in each row, or `None` for any other shape.
pub fn blocks_format(shape: &Shape) -> Option<(Format, i64)> {
    if shape.dtype() != DType::U8 || shape.rank() == 0 {
        return None;
    }
    let last = shape.rank() - 1;
    let name = shape.tag(last)?.as_str().strip_prefix(TAG_PREFIX)?;
    // At most one suffix: exact products, panels and split rows each
    // stand alone (panels and split rows take their own products).
    if let Some(name) = name.strip_suffix(EXACT_SUFFIX) {
        return Format::from_name(name)
            .and_then(|f| Some((f, f.row_cols(shape.dims()[last] as usize)? as i64)));
    }
    let name = match (
        name.strip_suffix(PANELS_SUFFIX),
        name.strip_suffix(SPLIT_SUFFIX),
    ) {
        (Some(f32), _) if f32 == Format::F32.name() => f32,
        (_, Some(split)) if splits(split) => split,
        (Some(_), _) | (_, Some(_)) => return None,
        (None, None) => name,
    };
    let format = Format::from_name(name)?;
    let cols = format.row_cols(shape.dims()[last] as usize)?;
    Some((format, cols as i64))
}

/// How the kernels multiply a blocks shape's matrix ([`blocks_shape_with`]),
/// or `None` for any other shape.
pub fn blocks_products(shape: &Shape) -> Option<Products> {
    blocks_format(shape)?;
    let tag = shape.tag(shape.rank() - 1)?.as_str();
    Some(if tag.ends_with(EXACT_SUFFIX) {
        Products::Exact
    } else {
        Products::Int8
    })
}
