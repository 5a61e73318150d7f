//! `x · Wᵀ` with `W` in blocks: the custom call `radix.quant_dot`, whose
//! kernel is radix-quant's `matvec` (one token: each weight byte read once),
//! `matmul` (several: a tile of rows decoded once for every token) or, for
//! [`Products::Int8`], `matmul_q8_with`, on radix-quant's spinning
//! `SpinPool`, and whose fallback decodes `W` in the graph and contracts it
//! with `dot_general`.

use std::sync::LazyLock;

use radix_quant::{Config, Isa, RowLayout};

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::quant::{Format, Layout, Products, blocks_format, blocks_layout, blocks_products};
use crate::tensor::fail;
use crate::{DType, DotDims, Shape, Tensor};

/// The axis tag of the decoded weight's columns inside the fallback.
const COLS: &str = "__cols";

/// `x [n, cols] f32` times the blocks `w [rows, row_bytes]` (format in the
/// `format` attribute), contracting `cols`, plus the optional third operand
/// `bias [rows] f32` on every row, then the optional `activation`
/// ([`ACTIVATION`]): `[n, rows] f32`.
static QUANT_DOT: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.quant_dot", 1, shape_rule, kernel)
        .fallback(fallback)
        .derivative(derivative)
        .register()
        .expect("radix.quant_dot is declared once")
});

/// The call in ordinary ops: `w` decoded in the graph, contracted with
/// `x`, plus the bias, then the activation.
pub(super) fn fallback(x: &[Tensor], attrs: &Attrs) -> Vec<Tensor> {
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
    let y = match x.get(2) {
        Some(&bias) => y + bias.broadcast_in_dim(y.shape(), &[1]),
        None => y,
    };
    match activation_attr(attrs) {
        Ok(Some(Activation::GeluErf)) => vec![y.gelu_erf()],
        _ => vec![y],
    }
}

/// The cotangents of `x` and the bias: those of [`fallback`] (the blocks
/// decoded in the graph), by [`crate::vjp`]. The blocks are integers and
/// get none (zeros), so a quantized weight stays a constant of training,
/// while gradients flow through it to what comes before (LoRA adapters
/// on a quantized model). The blocks are decoded only once the cotangent
/// exists (an [`optimization_barrier`](crate::optimization_barrier) ties
/// them): otherwise XLA decodes every layer's weights at the start of the
/// backward pass, since they depend on nothing else, and holds them all
/// at once (SmolLM2's MLP matrices alone: 318 MB in a LoRA step).
pub(super) fn derivative(x: &[Tensor], _: &[Tensor], cts: &[Tensor], attrs: &Attrs) -> Vec<Tensor> {
    let tied = crate::optimization_barrier(&[x[1], cts[0]]);
    let (w, ct) = (tied[0], tied[1]);
    let floats: Vec<Tensor> = std::iter::once(x[0]).chain(x.get(2).copied()).collect();
    let f = |p: &Vec<Tensor>, w: &Tensor| {
        let operands: Vec<Tensor> = [p[0], *w].into_iter().chain(p.get(1).copied()).collect();
        fallback(&operands, attrs)[0]
    };
    let (_, d) = crate::vjp(f, &floats, &w, &ct);
    let mut res = vec![d[0], Tensor::zeros(w.shape())];
    res.extend(d.get(1).copied());
    res
}

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
    dot_and_add(x, w, None, None, axis)
}

/// [`dot`] plus `bias` (f32, one value per row of `w`) on every output, in
/// the same call: on the CPU plugin the kernel adds it to the products it
/// has just written, where a separate add would be an operation of its own
/// (a linear layer's bias).
#[track_caller]
pub fn dot_bias(x: Tensor, w: Tensor, bias: Tensor, axis: &str) -> Tensor {
    match bias_error(w, bias) {
        Some(msg) => failed_bias(x, w, bias, msg),
        None => dot_and_add(x, w, Some(bias), None, axis),
    }
}

/// [`dot_bias`], then exact GELU ([`crate::nn::gelu_erf`]) on every output,
/// in the same call: on the CPU plugin the kernel applies it in the pass
/// that adds the bias, where a call of its own would read and write the
/// outputs once more (a BERT layer's up-projection: 6.3 M values per layer
/// for a batch of 32 sentences of 128 tokens).
#[track_caller]
pub fn dot_bias_gelu_erf(x: Tensor, w: Tensor, bias: Tensor, axis: &str) -> Tensor {
    match bias_error(w, bias) {
        Some(msg) => failed_bias(x, w, bias, msg),
        None => dot_and_add(x, w, Some(bias), Some(Activation::GeluErf), axis),
    }
}

/// Why `bias` is no bias of `w`'s rows, if it is not.
fn bias_error(w: Tensor, bias: Tensor) -> Option<String> {
    let (bs, rows) = (bias.shape(), w.shape().dims().first().copied());
    let ok = bs.rank() == 1 && bs.dtype() == DType::F32 && Some(bs.dims()[0]) == rows;
    (!ok).then(|| format!("wants an f32 bias of {rows:?} values, got {bs}"))
}

#[track_caller]
fn failed_bias(x: Tensor, w: Tensor, bias: Tensor, msg: String) -> Tensor {
    fail(
        "quant_dot",
        msg,
        &[x, w, bias],
        x.shape().with_dtype(DType::F32),
    )
}

#[track_caller]
fn dot_and_add(
    x: Tensor,
    w: Tensor,
    bias: Option<Tensor>,
    activation: Option<Activation>,
    axis: &str,
) -> Tensor {
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
    let products = blocks_products(&ws).unwrap_or_default();
    let mut attrs = Attrs::new()
        .with("format", format.name())
        .with("products", products.name());
    match blocks_layout(&ws) {
        Some(Layout::Panels) => attrs = attrs.with(LAYOUT, PANELS),
        Some(Layout::Split) => attrs = attrs.with(LAYOUT, SPLIT),
        _ => {}
    }
    if let Some(a) = activation {
        attrs = attrs.with(ACTIVATION, a.name());
    }
    let tokens = Tokens::of(x, at, cols);
    let attrs = tokens.with_sequence(attrs);
    let y2 = match bias {
        Some(b) => QUANT_DOT.call(&[tokens.x2, w, b.reshape(&[ws.dims()[0]])], &attrs)[0],
        None => QUANT_DOT.call(&[tokens.x2, w], &attrs)[0],
    };
    tokens.result(y2, w)
}

/// `x` as the rows of a product: its axis of `cols` (at `at`) moved last
/// and the others merged into one, `[n, cols]`.
pub(super) struct Tokens {
    x: Tensor,
    pub(super) x2: Tensor,
    /// `x`'s shape without the contracted axis.
    rest: Shape,
}

impl Tokens {
    #[track_caller]
    pub(super) fn of(x: Tensor, at: usize, cols: i64) -> Tokens {
        let xs = x.shape();
        let rest = xs.remove_axis(at).expect("the axis exists");
        let mut perm: Vec<usize> = (0..xs.rank()).filter(|&i| i != at).collect();
        perm.push(at);
        let x2 = x
            .transpose(perm.as_slice())
            .reshape(&[rest.count() as i64, cols]);
        Tokens { x, x2, rest }
    }

    /// `attrs` with [`SEQUENCE`] where `x` holds several sequences (a step
    /// of a batch: tagged `(b, s, ...)`), each of that many tokens.
    pub(super) fn with_sequence(&self, attrs: Attrs) -> Attrs {
        let xs = self.x.shape();
        let sequence = xs.axis(crate::nn::tags::S).map(|s| xs.dims()[s]);
        match sequence.filter(|&s| s < self.rest.count() as i64) {
            Some(s) => attrs.with(SEQUENCE, s),
            None => attrs,
        }
    }

    /// The product `y2` (`[n, rows]`) of these rows and the blocks `w` with
    /// `x`'s other axes back, then `w`'s rows axis.
    #[track_caller]
    pub(super) fn result(&self, y2: Tensor, w: Tensor) -> Tensor {
        let (xs, ws) = (self.x.shape(), w.shape());
        let rows_tag = ws.tag(0).map_or("", |t| t.as_str());
        let out = self
            .rest
            .insert_axis(self.rest.rank(), ws.dims()[0], rows_tag)
            .map(|s| s.with_dtype(DType::F32));
        match out {
            Some(out) => y2.reshape_to(out),
            None => fail(
                "quant_dot",
                format!("{xs} has no room for another axis"),
                &[self.x, w],
                xs,
            ),
        }
    }
}

/// `[n, cols] f32` and `[rows, row_bytes] u8` in `format` (and a bias
/// `[rows] f32`) give `[n, rows] f32`.
fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    let format = format_attr(attrs)?;
    activation_attr(attrs)?;
    sequence_attr(attrs)?;
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
    check_layout(layout_attr(attrs)?, format, w, attrs)?;
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

/// `Err` unless `w`'s rows in `format` can have `layout`: panels hold
/// F32 rows in whole panels, split rows are of a format that splits
/// ([`radix_quant::RowLayout::check`] names them) with 8-bit products.
pub(super) fn check_layout(
    layout: Layout,
    format: Format,
    w: &Shape,
    attrs: &Attrs,
) -> Result<(), String> {
    match layout {
        Layout::Panels
            if format != Format::F32 || w.dims()[0] % radix_quant::PANEL_ROWS as i64 != 0 =>
        {
            Err(format!(
                "panels hold F32 rows in whole panels of {}, not {} rows of {}",
                radix_quant::PANEL_ROWS,
                w.dims()[0],
                format.name()
            ))
        }
        Layout::Split => {
            radix_quant::RowLayout::Split
                .check(format)
                .map_err(|e| e.to_string())?;
            let products = attrs.str("products")?;
            if products != Products::Int8.name() {
                return Err(format!(
                    "split rows take {} products, not {products}",
                    Products::Int8.name()
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The attribute naming the weights' [`Layout`] where it is not
/// [`Layout::Rows`] (so the programs of row-major weights print as before).
const LAYOUT: &str = "layout";

/// [`LAYOUT`]'s value for [`Layout::Panels`].
const PANELS: &str = "panels";

/// [`LAYOUT`]'s value for [`Layout::Split`].
pub(super) const SPLIT: &str = "split";

/// The attribute naming the function applied to every output after the
/// bias; absent, none.
const ACTIVATION: &str = "activation";

/// The attribute giving the tokens of each sequence in `x`'s rows, where
/// they hold several sequences (a batch's step); absent, one. With
/// [`Products::Int8`], sequences of up to `radix_quant::DOT_MAX_TOKENS`
/// tokens take a dot per token however many rows there are, so that a
/// sequence's results in a batch's step are those of a step of it alone.
const SEQUENCE: &str = "sequence";

/// A function [`ACTIVATION`] may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Activation {
    /// [`crate::nn::gelu_erf`].
    GeluErf,
}

impl Activation {
    fn name(self) -> &'static str {
        match self {
            Activation::GeluErf => "gelu_erf",
        }
    }
}

/// The `activation` attribute, if any.
fn activation_attr(attrs: &Attrs) -> Result<Option<Activation>, String> {
    match attrs.get(ACTIVATION) {
        None => Ok(None),
        Some(_) => match attrs.str(ACTIVATION)? {
            name if name == Activation::GeluErf.name() => Ok(Some(Activation::GeluErf)),
            other => Err(format!(
                "no activation {other:?} (only {:?})",
                Activation::GeluErf.name()
            )),
        },
    }
}

/// The [`SEQUENCE`] attribute: the tokens of each sequence, at least 1
/// (absent: `None`, the rows are one sequence).
pub(super) fn sequence_attr(attrs: &Attrs) -> Result<Option<usize>, String> {
    match attrs.get(SEQUENCE) {
        None => Ok(None),
        Some(_) => match attrs.i64(SEQUENCE)? {
            s if s >= 1 => Ok(Some(s as usize)),
            s => Err(format!("{SEQUENCE} {s}: a sequence has at least 1 token")),
        },
    }
}

/// The `layout` attribute as a [`Layout`] (absent: [`Layout::Rows`]).
fn layout_attr(attrs: &Attrs) -> Result<Layout, String> {
    match attrs.get(LAYOUT) {
        None => Ok(Layout::Rows),
        Some(_) => match attrs.str(LAYOUT)? {
            PANELS => Ok(Layout::Panels),
            SPLIT => Ok(Layout::Split),
            other => Err(format!("no layout {other:?} ({PANELS:?} or {SPLIT:?})")),
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
    let layout = layout_attr(k.attrs())?;
    products(k, &config, (format, layout, w, rows, cols), (n, x), y)?;
    let bias = match k.input_shape(2) {
        Some(_) => Some(k.input::<f32>(2)?),
        None => None,
    };
    let activation = activation_attr(k.attrs())?;
    if (bias.is_some() || activation.is_some()) && rows > 0 {
        finish(bias, activation, rows, y)?;
    }
    Ok(())
}

/// The least outputs a task of [`finish`] takes: fewer cost more to hand
/// over than to add; with an activation, GELU's own least task
/// ([`crate::nn::MIN_GELU_TASK`]: ~20 cycles a vector).
const MIN_FINISH_TASK: usize = 64 * 1024;

/// `bias` added to every row of `y` (its rows are `rows` long), then
/// `activation`, in one pass; a prompt's rows split over the kernel
/// workers.
fn finish(
    bias: Option<&[f32]>,
    activation: Option<Activation>,
    rows: usize,
    y: &mut [f32],
) -> Result<(), String> {
    let least = match activation {
        Some(_) => crate::nn::MIN_GELU_TASK,
        None => MIN_FINISH_TASK,
    };
    let per_task = (least / rows).max(1) * rows;
    radix_quant::SpinPool::global().try_run_chunks(y, per_task, &|_, part| {
        if let Some(bias) = bias {
            for y in part.chunks_exact_mut(rows) {
                for (y, b) in y.iter_mut().zip(bias) {
                    *y += b;
                }
            }
        }
        // While the part is still in this core's caches.
        if activation == Some(Activation::GeluErf) {
            crate::nn::gelu_erf_in_place(part);
        }
    })
}

/// The products of `kernel`'s call into `y`, the weights `w` in `layout`
/// (checked by the shape rule).
pub(super) fn products(
    k: &Kernel<'_>,
    config: &Config,
    (format, layout, w, rows, cols): (Format, Layout, &[u8], usize, usize),
    (n, x): (usize, &[f32]),
    y: &mut [f32],
) -> Result<(), String> {
    // Int8: a decode step's (or a batch's) dots, or a prompt's tiled integer
    // products where the CPU has them (`radix_quant::DOT_MAX_TOKENS`), by
    // the tokens of a sequence.
    let sequence = sequence_attr(k.attrs())?.unwrap_or(n);
    let dots = sequence <= radix_quant::DOT_MAX_TOKENS;
    match layout {
        Layout::Panels => {
            return radix_quant::matmul_panels_with(config, w, rows, cols, n, x, y)
                .map_err(|e| e.to_string());
        }
        Layout::Split => {
            let (w, shape) = ((format, RowLayout::Split, w), (rows, cols, n));
            let res = match dots {
                true => radix_quant::matmul_q8_dots_laid_out_with(config, w, shape, x, y),
                false => radix_quant::matmul_q8_laid_out_with(config, w, shape, x, y),
            };
            return res.map_err(|e| e.to_string());
        }
        Layout::Rows => {}
    }
    let products = k.attrs().str("products")?;
    let products = Products::from_name(products)
        .ok_or_else(|| format!("no products {products:?} (int8 or exact)"))?;
    let res = if products == Products::Int8 && dots {
        radix_quant::matmul_q8_dots_with(config, format, w, rows, cols, n, x, y)
    } else if products == Products::Int8 {
        radix_quant::matmul_q8_with(config, format, w, rows, cols, n, x, y)
    } else if n == 1 {
        radix_quant::matvec_with(config, format, w, rows, cols, x, y)
    } else {
        radix_quant::matmul_with(config, format, w, rows, cols, n, x, y)
    };
    res.map_err(|e| e.to_string())
}
