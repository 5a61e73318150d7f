//! `x · Wᵀ` with `W` in blocks: the custom call `radix.quant_dot`, whose
//! kernel is radix-quant's `matvec` (one token: each weight byte read once),
//! `matmul` (several: a tile of rows decoded once for every token) or, for
//! [`Products::Int8`], `matmul_q8_with`, on radix-quant's spinning
//! `SpinPool`, and whose fallback decodes `W` in the graph and contracts it
//! with `dot_general`.

use std::sync::LazyLock;

use radix_quant::{Config, Isa};

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::quant::{Format, Layout, Products, blocks_format, blocks_layout, blocks_products};
use crate::tensor::fail;
use crate::{DType, DotDims, Shape, Tensor};

/// The axis tag of the decoded weight's columns inside the fallback.
const COLS: &str = "__cols";

/// `x [n, cols] f32` times the blocks `w [rows, row_bytes]` (format in the
/// `format` attribute), contracting `cols`, plus the optional third operand
/// `bias [rows] f32` on every row: `[n, rows] f32`.
static QUANT_DOT: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.quant_dot", 1, shape_rule, kernel)
        .fallback(|x, _| {
            let w = crate::quant::dequantize(x[1], COLS);
            let y = x[0].dot_general(
                w,
                DotDims {
                    lhs_batch: vec![],
                    rhs_batch: vec![],
                    lhs_contract: vec![1],
                    rhs_contract: vec![1],
                },
            );
            match x.get(2) {
                Some(&bias) => vec![y + bias.broadcast_in_dim(y.shape(), &[1])],
                None => vec![y],
            }
        })
        .register()
        .expect("radix.quant_dot is declared once")
});

/// `x` times the block-format matrix `w` (a [`blocks_shape`](crate::quant::blocks_shape)
/// `[rows, row_bytes]`, holding `rows × cols` elements), contracting `x`'s
/// axis `axis` (of size `cols`) with `w`'s columns, as
/// `x.dot(dequantized w, axis)` would: the result has `x`'s other axes,
/// then `w`'s rows axis, in f32.
///
/// On the CPU plugin this is a kernel reading the blocks as they are;
/// elsewhere (and with [`CustomCallMode::Fallback`](crate::CustomCallMode))
/// the blocks are decoded in the graph first.
#[track_caller]
pub fn dot(x: Tensor, w: Tensor, axis: &str) -> Tensor {
    dot_and_add(x, w, None, axis)
}

/// [`dot`] plus `bias` (f32, one value per row of `w`) on every output, in
/// the same call: on the CPU plugin the kernel adds it to the products it
/// has just written, where a separate add would be an operation of its own
/// (a linear layer's bias).
#[track_caller]
pub fn dot_bias(x: Tensor, w: Tensor, bias: Tensor, axis: &str) -> Tensor {
    let (bs, rows) = (bias.shape(), w.shape().dims().first().copied());
    if bs.rank() != 1 || bs.dtype() != DType::F32 || Some(bs.dims()[0]) != rows {
        let msg = format!("wants an f32 bias of {rows:?} values, got {bs}");
        return fail(
            "quant_dot",
            msg,
            &[x, w, bias],
            x.shape().with_dtype(DType::F32),
        );
    }
    dot_and_add(x, w, Some(bias), axis)
}

#[track_caller]
fn dot_and_add(x: Tensor, w: Tensor, bias: Option<Tensor>, axis: &str) -> Tensor {
    let xs = x.shape();
    let ws = w.shape();
    let (Some((format, cols)), Some(at)) = (blocks_format(&ws), xs.axis(axis)) else {
        let msg = format!("wants a blocks matrix and an axis .{axis} of x, got {xs} and {ws}");
        return fail("quant_dot", msg, &[x, w], xs.with_dtype(DType::F32));
    };
    if ws.rank() != 2 || xs.dtype() != DType::F32 || xs.dims()[at] != cols {
        let msg = format!(
            "wants f32 x with .{axis} of {cols} and [rows, row_bytes] blocks, got {xs} and {ws}"
        );
        return fail("quant_dot", msg, &[x, w], xs.with_dtype(DType::F32));
    }
    let rest = xs.remove_axis(at).expect("the axis exists");
    let mut perm: Vec<usize> = (0..xs.rank()).filter(|&i| i != at).collect();
    perm.push(at);
    let n = rest.count() as i64;
    let x2 = x.transpose(perm.as_slice()).reshape(&[n, cols]);
    let products = blocks_products(&ws).unwrap_or_default();
    let mut attrs = Attrs::new()
        .with("format", format.name())
        .with("products", products.name());
    if blocks_layout(&ws) == Some(Layout::Panels) {
        attrs = attrs.with(LAYOUT, PANELS);
    }
    let y2 = match bias {
        Some(b) => QUANT_DOT.call(&[x2, w, b.reshape(&[ws.dims()[0]])], &attrs)[0],
        None => QUANT_DOT.call(&[x2, w], &attrs)[0],
    };
    let rows_tag = ws.tag(0).map_or("", |t| t.as_str());
    let out = rest
        .insert_axis(rest.rank(), ws.dims()[0], rows_tag)
        .map(|s| s.with_dtype(DType::F32));
    match out {
        Some(out) => y2.reshape_to(out),
        None => fail(
            "quant_dot",
            format!("{xs} has no room for another axis"),
            &[x, w],
            xs,
        ),
    }
}

/// `[n, cols] f32` and `[rows, row_bytes] u8` in `format` (and a bias
/// `[rows] f32`) give `[n, rows] f32`.
fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    let format = format_attr(attrs)?;
    let (x, w, bias) = match s {
        [x, w] => (x, w, None),
        [x, w, b] => (x, w, Some(b)),
        _ => {
            return Err(format!(
                "wants x, the blocks and an optional bias, got {} operands",
                s.len()
            ));
        }
    };
    if let Some(b) = bias
        && (b.rank() != 1 || b.dtype() != DType::F32 || b.dims()[0] != w.dims()[0])
    {
        return Err(format!("wants an f32 bias [{}], got {b}", w.dims()[0]));
    }
    if x.rank() != 2 || w.rank() != 2 || x.dtype() != DType::F32 || w.dtype() != DType::U8 {
        return Err(format!(
            "wants f32 [n, cols] and u8 [rows, row_bytes], got {x} and {w}"
        ));
    }
    if layout_attr(attrs)? == Layout::Panels
        && (format != Format::F32 || w.dims()[0] % radix_quant::PANEL_ROWS as i64 != 0)
    {
        return Err(format!(
            "panels hold F32 rows in whole panels of {}, not {} rows of {}",
            radix_quant::PANEL_ROWS,
            w.dims()[0],
            format.name()
        ));
    }
    let cols = usize::try_from(x.dims()[1]).map_err(|e| e.to_string())?;
    let row_bytes = format.row_bytes(cols).map_err(|e| e.to_string())?;
    if w.dims()[1] as usize != row_bytes {
        return Err(format!(
            "{} rows of {cols} elements take {row_bytes} bytes, not {}",
            format.name(),
            w.dims()[1]
        ));
    }
    Ok(vec![Shape::new(DType::F32, &[x.dims()[0], w.dims()[0]])])
}

/// The attribute naming the weights' [`Layout`] where it is not
/// [`Layout::Rows`] (so the programs of row-major weights print as before).
const LAYOUT: &str = "layout";

/// [`LAYOUT`]'s value for [`Layout::Panels`].
const PANELS: &str = "panels";

/// The `layout` attribute as a [`Layout`] (absent: [`Layout::Rows`]).
fn layout_attr(attrs: &Attrs) -> Result<Layout, String> {
    match attrs.get(LAYOUT) {
        None => Ok(Layout::Rows),
        Some(_) => match attrs.str(LAYOUT)? {
            PANELS => Ok(Layout::Panels),
            other => Err(format!("no layout {other:?} (only {PANELS:?})")),
        },
    }
}

/// The `format` attribute as a [`Format`].
pub(super) fn format_attr(attrs: &Attrs) -> Result<Format, String> {
    let name = attrs.str("format")?;
    Format::from_name(name).ok_or_else(|| format!("no block format {name:?}"))
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let format = format_attr(k.attrs())?;
    let (x, w) = (k.input::<f32>(0)?, k.input::<u8>(1)?);
    let (xs, ws) = (
        k.input_shape(0).ok_or("no x")?,
        k.input_shape(1).ok_or("no blocks")?,
    );
    let (n, cols, rows) = (
        xs.dims()[0] as usize,
        xs.dims()[1] as usize,
        ws.dims()[0] as usize,
    );
    let y = k.output::<f32>(0)?;
    // radix's spinning workers rather than XLA's pool, whose threads sleep
    // between the ~200 products of a decode token: measured on a 2-core
    // Xeon, SmolLM2 decoded at 56 tokens/s on them against 36 on XLA's.
    let config = Config {
        isa: Isa::best(),
        parallel: radix_quant::SpinPool::global(),
    };
    products(k, &config, (format, w, rows, cols), (n, x), y)?;
    if k.input_shape(2).is_some() && rows > 0 {
        add_bias(k.input::<f32>(2)?, y)?;
    }
    Ok(())
}

/// The least outputs a task of [`add_bias`] takes: fewer cost more to hand
/// over than to add.
const MIN_BIAS_TASK: usize = 64 * 1024;

/// `bias` added to every row of `y` (its rows are `bias.len()` long), a
/// prompt's rows split over the kernel workers.
fn add_bias(bias: &[f32], y: &mut [f32]) -> Result<(), String> {
    let per_task = (MIN_BIAS_TASK / bias.len()).max(1) * bias.len();
    radix_quant::SpinPool::global().try_run_chunks(y, per_task, &|_, part| {
        for y in part.chunks_exact_mut(bias.len()) {
            for (y, b) in y.iter_mut().zip(bias) {
                *y += b;
            }
        }
    })
}

/// The products of `kernel`'s call into `y`.
fn products(
    k: &Kernel<'_>,
    config: &Config,
    (format, w, rows, cols): (Format, &[u8], usize, usize),
    (n, x): (usize, &[f32]),
    y: &mut [f32],
) -> Result<(), String> {
    if layout_attr(k.attrs())? == Layout::Panels {
        return radix_quant::matmul_panels_with(config, w, rows, cols, n, x, y)
            .map_err(|e| e.to_string());
    }
    let products = k.attrs().str("products")?;
    let products = Products::from_name(products)
        .ok_or_else(|| format!("no products {products:?} (int8 or exact)"))?;
    // Int8: a decode step's (or a batch's) dots, or a prompt's tiled integer
    // products where the CPU has them (`radix_quant::DOT_MAX_TOKENS`).
    let res = if products == Products::Int8 {
        radix_quant::matmul_q8_with(config, format, w, rows, cols, n, x, y)
    } else if n == 1 {
        radix_quant::matvec_with(config, format, w, rows, cols, x, y)
    } else {
        radix_quant::matmul_with(config, format, w, rows, cols, n, x, y)
    };
    res.map_err(|e| e.to_string())
}
