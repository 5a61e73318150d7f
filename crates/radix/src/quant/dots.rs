//! `x · Wᵢᵀ` for several block matrices that read the same `x` (a layer's
//! query, key and value projections; its gate and up projections): the
//! custom call `radix.quant_dots`, one call where [`dot`](super::dot)
//! would make one per matrix. Its kernel quantizes a decode step's token
//! once and multiplies the rows of every matrix as one job of the kernel
//! workers (`radix_quant::matvec_q8_stacked_with`), each matrix's results
//! the bits its own call gives; a step of several tokens takes each
//! matrix's products in turn. Fallback and derivative are
//! [`dot`](super::dot)'s, matrix by matrix.

use std::sync::LazyLock;

use radix_quant::{Config, Isa, RowLayout, Stacked};

use super::dot::{SPLIT, Tokens, check_layout, derivative, fallback, products, sequence_attr};
use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::quant::{Format, Layout, Products, blocks_format, blocks_layout, blocks_products};
use crate::{DType, Shape, Tensor};

/// `x [n, cols] f32` times each of the blocks `w₁ … wₖ [rowsᵢ, row_bytesᵢ]`
/// (formats in the `formats` attribute, comma-separated; where a matrix's
/// rows are split, the `layouts` attribute lists each one's), contracting
/// `cols`: `k` results `[n, rowsᵢ] f32`.
static QUANT_DOTS: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.quant_dots", 1, shape_rule, kernel)
        .fallback(each_fallback)
        .derivative(each_derivative)
        .register()
        .expect("radix.quant_dots is declared once")
});

/// The attribute listing the matrices' formats.
const FORMATS: &str = "formats";

/// [`dot`](super::dot) of `x` with each of `ws`, contracting `x`'s axis
/// `axis`: the same results, in one call where every matrix is in blocks
/// with [`Products::Int8`] in rows of the same length (otherwise one call
/// each).
#[track_caller]
pub fn dots(x: Tensor, ws: &[Tensor], axis: &str) -> Vec<Tensor> {
    let xs = x.shape();
    let formats: Option<Vec<(Format, i64)>> = ws
        .iter()
        .map(|w| {
            let s = w.shape();
            let int8 = blocks_products(&s) == Some(Products::Int8);
            let layout = blocks_layout(&s).filter(|&l| l != Layout::Panels);
            blocks_format(&s).filter(|_| int8 && layout.is_some() && s.rank() == 2)
        })
        .collect();
    // One call where there are several matrices of `x`'s columns.
    let at = xs
        .axis(axis)
        .filter(|_| ws.len() > 1 && xs.dtype() == DType::F32);
    let fused = formats
        .zip(at)
        .filter(|(f, at)| f.iter().all(|&(_, cols)| cols == xs.dims()[*at]));
    // Loops, not closures, so that each node keeps the caller's line.
    let mut out = Vec::with_capacity(ws.len());
    let Some((formats, at)) = fused else {
        for &w in ws {
            out.push(super::dot(x, w, axis));
        }
        return out;
    };
    let names: Vec<&str> = formats.iter().map(|(f, _)| f.name()).collect();
    let tokens = Tokens::of(x, at, formats[0].1);
    let mut attrs = Attrs::new()
        .with(FORMATS, names.join(",").as_str())
        .with("products", Products::Int8.name());
    // Layouts only where a matrix's rows are split, so that the programs
    // of blocks print as before.
    let layouts: Vec<Layout> = ws
        .iter()
        .filter_map(|w| blocks_layout(&w.shape()))
        .collect();
    if layouts.contains(&Layout::Split) {
        let names: Vec<&str> = layouts
            .iter()
            .map(|&l| if l == Layout::Split { SPLIT } else { ROWS })
            .collect();
        attrs = attrs.with(LAYOUTS, names.join(",").as_str());
    }
    let attrs = tokens.with_sequence(attrs);
    let operands: Vec<Tensor> = std::iter::once(tokens.x2)
        .chain(ws.iter().copied())
        .collect();
    for (y, &w) in QUANT_DOTS.call(&operands, &attrs).into_iter().zip(ws) {
        out.push(tokens.result(y, w));
    }
    out
}

/// The attribute listing the matrices' layouts, where one is split.
const LAYOUTS: &str = "layouts";

/// [`LAYOUTS`]'s name for a matrix of rows as files store them.
const ROWS: &str = "rows";

/// The layouts the [`LAYOUTS`] attribute names, one per matrix of
/// `formats` (absent: rows as files store them).
fn layouts_attr(attrs: &Attrs, formats: &[Format]) -> Result<Vec<Layout>, String> {
    if attrs.get(LAYOUTS).is_none() {
        return Ok(vec![Layout::Rows; formats.len()]);
    }
    let layouts: Vec<Layout> = attrs
        .str(LAYOUTS)?
        .split(',')
        .map(|name| match name {
            ROWS => Ok(Layout::Rows),
            SPLIT => Ok(Layout::Split),
            other => Err(format!("no layout {other:?} ({ROWS:?} or {SPLIT:?})")),
        })
        .collect::<Result<_, _>>()?;
    if layouts.len() != formats.len() {
        return Err(format!(
            "{} layouts for {} formats",
            layouts.len(),
            formats.len()
        ));
    }
    Ok(layouts)
}

/// The formats the [`FORMATS`] attribute names.
fn formats_attr(attrs: &Attrs) -> Result<Vec<Format>, String> {
    let names = attrs.str(FORMATS)?;
    names
        .split(',')
        .map(|name| Format::from_name(name).ok_or_else(|| format!("no block format {name:?}")))
        .collect()
}

/// The attributes of one matrix's [`dot`](super::dot): its format and the
/// products.
fn one(format: Format) -> Attrs {
    Attrs::new()
        .with("format", format.name())
        .with("products", Products::Int8.name())
}

/// `[n, cols] f32` and, per format, `[rows, row_bytes] u8` give a
/// `[n, rows] f32` each.
fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    let formats = formats_attr(attrs)?;
    let layouts = layouts_attr(attrs, &formats)?;
    sequence_attr(attrs)?;
    let Some((x, ws)) = s.split_first() else {
        return Err("wants x and the blocks".into());
    };
    if ws.len() != formats.len() {
        return Err(format!(
            "{} formats for {} matrices",
            formats.len(),
            ws.len()
        ));
    }
    if x.rank() != 2 || x.dtype() != DType::F32 {
        return Err(format!("wants f32 [n, cols], got {x}"));
    }
    let cols = usize::try_from(x.dims()[1]).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(ws.len());
    for (i, ((w, format), layout)) in ws.iter().zip(formats).zip(layouts).enumerate() {
        check_layout(layout, format, w, attrs).map_err(|e| format!("matrix {i}: {e}"))?;
        let row_bytes = format.row_bytes(cols).map_err(|e| e.to_string())?;
        if w.rank() != 2 || w.dtype() != DType::U8 || w.dims()[1] as usize != row_bytes {
            return Err(format!(
                "matrix {i}: {} rows of {cols} elements are u8 [rows, {row_bytes}], not {w}",
                format.name()
            ));
        }
        out.push(Shape::new(DType::F32, &[x.dims()[0], w.dims()[0]]));
    }
    Ok(out)
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let formats = formats_attr(k.attrs())?;
    let layouts = layouts_attr(k.attrs(), &formats)?;
    let x = k.input::<f32>(0)?;
    let xs = k.input_shape(0).ok_or("no x")?;
    let (n, cols) = (xs.dims()[0] as usize, xs.dims()[1] as usize);
    let config = Config {
        isa: Isa::best(),
        parallel: radix_quant::SpinPool::global(),
    };
    let mut matrices = Vec::with_capacity(formats.len());
    let mut ys = Vec::with_capacity(formats.len());
    for (i, &format) in formats.iter().enumerate() {
        let ws = k.input_shape(i + 1).ok_or("no blocks")?;
        let weights = k.input::<u8>(i + 1)?;
        matrices.push(Stacked {
            format,
            weights,
            rows: ws.dims()[0] as usize,
            layout: match layouts[i] {
                Layout::Split => RowLayout::Split,
                _ => RowLayout::Blocks,
            },
        });
        ys.push(k.output::<f32>(i)?);
    }
    if n == 1 {
        return radix_quant::matvec_q8_stacked_with(&config, &matrices, cols, x, &mut ys)
            .map_err(|e| e.to_string());
    }
    for ((m, y), layout) in matrices.iter().zip(ys).zip(layouts) {
        products(
            k,
            &config,
            (m.format, layout, m.weights, m.rows, cols),
            (n, x),
            y,
        )?;
    }
    Ok(())
}

/// [`dot`](super::dot)'s fallback for each matrix.
fn each_fallback(x: &[Tensor], attrs: &Attrs) -> Vec<Tensor> {
    let formats = formats_attr(attrs).unwrap_or_default();
    (x[1..].iter().zip(formats))
        .map(|(&w, f)| fallback(&[x[0], w], &one(f))[0])
        .collect()
}

/// The cotangent of `x`: the sum of each matrix's ([`dot`](super::dot)'s
/// derivative); the blocks get none (zeros).
fn each_derivative(x: &[Tensor], ys: &[Tensor], cts: &[Tensor], attrs: &Attrs) -> Vec<Tensor> {
    let formats = formats_attr(attrs).unwrap_or_default();
    let mut dx: Option<Tensor> = None;
    let mut res = vec![];
    for (((&w, &y), &ct), f) in x[1..].iter().zip(ys).zip(cts).zip(formats) {
        let d = derivative(&[x[0], w], &[y], &[ct], &one(f));
        dx = Some(match dx {
            Some(dx) => dx + d[0],
            None => d[0],
        });
        res.push(d[1]);
    }
    std::iter::once(dx.unwrap_or_else(|| Tensor::zeros(x[0].shape())))
        .chain(res)
        .collect()
}
