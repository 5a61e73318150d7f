//! Rows of a block-format table looked up by id (an embedding lookup): the
//! custom call `radix.quant_rows`, whose kernel decodes just the rows asked
//! for with radix-quant's reference dequantizer (split Q8_0 rows joined
//! into blocks first), and whose fallback gathers the rows' blocks and
//! decodes them in the graph.

use std::sync::LazyLock;

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::quant::{Format, Layout, blocks_format, blocks_layout};
use crate::tensor::fail;
use crate::{DType, Shape, Tensor};

/// `table [rows, row_bytes] u8` (format in the `format` attribute; the
/// `layout` attribute `split` where its Q8_0 rows are split) at `ids [n]
/// i32`, clamped to the table: `[n, cols] f32`.
static QUANT_ROWS: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.quant_rows", 1, shape_rule, kernel)
        .fallback(|x, _| {
            let rows = x[0].gather(0, x[1]);
            vec![crate::quant::dequantize(rows, "")]
        })
        .register()
        .expect("radix.quant_rows is declared once")
});

/// The rows of the block-format table `table` (a
/// [`blocks_shape`](crate::quant::blocks_shape) `[rows, row_bytes]`) at the
/// integer `ids` (clamped to the table, as `gather` does), decoded to f32:
/// the result has `ids`' axes, then an axis of the row's elements tagged
/// `tag`. The table's rows may be split ([`Layout::Split`]), not packed in
/// panels.
#[track_caller]
pub fn rows(table: Tensor, ids: Tensor, tag: &str) -> Tensor {
    let (ts, is) = (table.shape(), ids.shape());
    let layout = blocks_layout(&ts).filter(|&l| l != Layout::Panels);
    let Some((format, cols)) = blocks_format(&ts).filter(|_| ts.rank() == 2 && layout.is_some())
    else {
        let msg =
            format!("wants a [rows, row_bytes] blocks table with its rows in order, got {ts}");
        return fail("quant_rows", msg, &[table, ids], ts);
    };
    let out = is
        .insert_axis(is.rank(), cols, tag)
        .map(|s| s.with_dtype(DType::F32));
    let Some(out) = out.filter(|_| is.dtype().is_integer()) else {
        let msg = format!("wants integer ids with room for another axis, got {is}");
        return fail("quant_rows", msg, &[table, ids], ts);
    };
    let flat = ids.reshape(&[is.count() as i64]).convert(DType::I32);
    let mut attrs = Attrs::new().with("format", format.name());
    if layout == Some(Layout::Split) {
        attrs = attrs.with(LAYOUT, super::dot::SPLIT);
    }
    QUANT_ROWS.call(&[table, flat], &attrs)[0].reshape_to(out)
}

/// The attribute saying the table's rows are split.
const LAYOUT: &str = "layout";

/// Whether the [`LAYOUT`] attribute says the rows of `format` are split
/// (`Err` for another value, or split rows of a format that has none).
fn split_attr(attrs: &Attrs, format: Format) -> Result<bool, String> {
    match attrs.get(LAYOUT) {
        None => Ok(false),
        Some(_) if attrs.str(LAYOUT)? != super::dot::SPLIT => Err(format!(
            "no layout {:?} (only {:?})",
            attrs.str(LAYOUT)?,
            super::dot::SPLIT
        )),
        Some(_) => radix_quant::RowLayout::Split
            .check(format)
            .map(|()| true)
            .map_err(|e| e.to_string()),
    }
}

/// `[rows, row_bytes] u8` in `format` and `[n]` i32 ids give `[n, cols] f32`.
fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    let format = super::dot::format_attr(attrs)?;
    split_attr(attrs, format)?;
    let [table, ids] = s else {
        return Err(format!("wants a table and ids, got {} operands", s.len()));
    };
    if table.rank() != 2
        || table.dtype() != DType::U8
        || ids.rank() != 1
        || ids.dtype() != DType::I32
    {
        return Err(format!(
            "wants u8 [rows, row_bytes] and i32 [n], got {table} and {ids}"
        ));
    }
    let row_bytes = table.dims()[1] as usize;
    let cols = format
        .row_cols(row_bytes)
        .ok_or_else(|| format!("{row_bytes} bytes are not whole {} blocks", format.name()))?;
    Ok(vec![Shape::new(DType::F32, &[ids.dims()[0], cols as i64])])
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let format: Format = super::dot::format_attr(k.attrs())?;
    let (table, ids) = (k.input::<u8>(0)?, k.input::<i32>(1)?);
    let ts = k.input_shape(0).ok_or("no table")?;
    let (n_rows, row_bytes) = (ts.dims()[0] as usize, ts.dims()[1] as usize);
    let out = k.output::<f32>(0)?;
    if ids.is_empty() || out.is_empty() {
        return Ok(());
    }
    if n_rows == 0 {
        return Err("an empty table has no rows to look up".into());
    }
    let cols = out.len() / ids.len();
    let split = split_attr(k.attrs(), format)?;
    let mut joined = vec![0u8; if split { row_bytes } else { 0 }];
    for (&id, out) in ids.iter().zip(out.chunks_exact_mut(cols)) {
        let row = (id.max(0) as usize).min(n_rows - 1);
        let mut bytes = &table[row * row_bytes..(row + 1) * row_bytes];
        if split {
            radix_quant::join_rows(format, cols, bytes, &mut joined).map_err(|e| e.to_string())?;
            bytes = &joined;
        }
        radix_quant::dequantize(format, bytes, out).map_err(|e| e.to_string())?;
    }
    Ok(())
}
