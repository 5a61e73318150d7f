//! Neural-network layers written with radix's tracing [`Tensor`]s.
//!
//! Each layer is a plain struct of parameter tensors with `#[derive(Module)]`:
//! a constructor that makes its parameters (tagged shapes, no data), and a
//! `forward` that records ops. The struct's field paths are the names its
//! weights are looked up by ([`load_weights`]), and its visit order is the
//! executable's argument order, so a model's struct type is its ABI.
//!
//! Layers name their axes: a layer states the tags it contracts or normalises
//! over (`"d"`, `"hd"`, `"k"`), never an axis position. The conventions used by
//! the attention helpers: queries `(.., q, h, hd)`, keys and values
//! `(.., k, h, hd)`.

mod attention;
mod cached_attention;
mod embedding;
mod gelu;
mod kv_cache;
mod layer_norm;
mod linear;
mod lora;
mod mlp;
mod norm;
mod padded_attention;
mod rms_norm;
mod rope;
mod rotate;
mod rows;
mod sin_cos;
mod vector_math;

/// The axis tags the layers use, as constants (`x.dot(w, tags::D)`).
pub mod tags {
    /// Batch.
    pub const B: &str = "b";
    /// Sequence positions.
    pub const S: &str = "s";
    /// Model width.
    pub const D: &str = "d";
    /// Attention heads.
    pub const H: &str = "h";
    /// Width of one head.
    pub const HD: &str = "hd";
    /// Query positions in attention scores.
    pub const Q: &str = "q";
    /// Key positions in attention scores and the KV cache.
    pub const K: &str = "k";
    /// The hidden width of a feed-forward block.
    pub const FF: &str = "ff";
    /// The query, the key and the value of a token, packed side by side
    /// (size 3, in that order; [`padded_self_attention`](super::padded_self_attention)).
    pub const QKV: &str = "qkv";
    /// The vocabulary.
    pub const VOC: &str = "voc";
    /// The layers of a stack of layers' weights or caches (a loop over
    /// them reads one at a time: [`Tensor::layer`](crate::Tensor::layer)).
    pub const LAYER: &str = "layer";
}

pub use attention::{attention, causal_mask, padding_mask, window_mask};
pub use cached_attention::cached_attention;
pub use embedding::Embedding;
pub use gelu::gelu_erf;
pub(crate) use gelu::{MIN_GELU_TASK, gelu_erf_in_place};
pub use kv_cache::{CacheType, KvCache};
pub use linear::Linear;
pub use lora::{Lora, RANK as LORA_RANK};
pub use mlp::{GatedMlp, Mlp};
pub use norm::{LayerNorm, RmsNorm};
pub use padded_attention::{padded_attention, padded_self_attention};
pub use rope::{RopeLayout, RopeScaling, Rotary};

use radix_quant::RowLayout;

use crate::io::WeightStore;
use crate::quant::{
    Format, Layout, Products, blocks_format, blocks_layout, blocks_shape_with, panels_shape,
    split_shape,
};
use crate::{Buffer, Bufferized, DType, Module, Platform, Shape, Tensor};

/// Why weights could not be loaded: the file side or the device side.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Reading a weight failed (missing tensor, shape mismatch, bad file).
    #[error(transparent)]
    Io(#[from] crate::io::Error),
    /// Uploading a weight failed.
    #[error(transparent)]
    Device(#[from] crate::Error),
}

/// An `f32` parameter with axes `(tag, size)`: the placeholder a layer holds
/// until it is traced (its data is bound by [`load_weights`]).
pub fn param(axes: &[(&str, i64)]) -> Tensor {
    Tensor::param(Shape::tagged(DType::F32, axes))
}

/// The form the matrices of [`Linear`] and [`Embedding`] layers take on the
/// device (see [`set_matrix_formats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatrixFormat {
    /// As the file stores them: a block-format matrix (GGUF's Q4_K, ...)
    /// stays in blocks, read by the quantized kernels with 8-bit activations
    /// where the format has an integer kernel ([`Products::Int8`], as
    /// llama.cpp does); F16 and BF16 stay 16-bit; F32 stays f32. Q8_0 and
    /// Q4_1 rows are split at load where the CPU's dot reads them so
    /// ([`Layout::Split`](crate::quant::Layout::Split): the same values,
    /// each row's codes before its scales).
    #[default]
    AsStored,
    /// As stored, but every product of a blocks matrix exact: `W·x` with the
    /// activations in f32 ([`Products::Exact`]), for comparisons with
    /// references that dequantize.
    Exact,
    /// Every matrix in f32, dequantized at load.
    F32,
    /// Every matrix in BF16, converted at load.
    BF16,
    /// As stored, and f32 matrices too as blocks of the F32 format: every
    /// matrix product goes to radix's CPU kernels (`radix.quant_dot`, the
    /// in-graph fallback elsewhere) instead of XLA's dot. A linear layer's
    /// f32 matrix is packed in panels at load
    /// ([`Layout::Panels`](crate::quant::Layout::Panels)), as a BLAS packs
    /// a constant operand once; an embedding table keeps its rows in order.
    Kernels,
}

/// Gives each matrix weight of `model` (the weight of a [`Linear`] or
/// [`Embedding`]: an f32 parameter whose rows axis is the layer's) the form
/// `how` asks for, from the format `store` holds it in: a blocks parameter
/// ([`crate::quant::blocks_shape`]) or f32 as declared. Call it before
/// tracing and [`load_weights`]; other parameters keep their dtype. Returns
/// how many matrices changed form.
pub fn set_matrix_formats<M: Module + ?Sized>(
    model: &mut M,
    store: &WeightStore,
    how: MatrixFormat,
) -> usize {
    let mut changed = 0;
    model.visit_mut(&mut String::new(), &mut |path, t| {
        let shape = t.shape();
        let rows_tag = shape.tag(0).map(|t| t.as_str());
        let is_matrix = shape.rank() == 2
            && shape.dtype() == DType::F32
            && matches!(rows_tag, Some(linear::OUT | tags::VOC));
        if !is_matrix {
            return;
        }
        let format = match how {
            MatrixFormat::AsStored | MatrixFormat::Exact => {
                store.format(path).filter(|&f| f != Format::F32)
            }
            MatrixFormat::F32 => None,
            MatrixFormat::BF16 => Some(Format::BF16),
            MatrixFormat::Kernels => store.format(path),
        };
        let rows = (rows_tag.unwrap_or(""), shape.dims()[0]);
        let products = match how {
            MatrixFormat::Exact => Products::Exact,
            _ => Products::Int8,
        };
        // A linear layer's f32 matrix for the kernels is packed in panels
        // (the products of a prompt take a vector of weights per load);
        // an embedding table keeps its rows in order for the lookup.
        let panels = how == MatrixFormat::Kernels
            && format == Some(Format::F32)
            && rows.0 == linear::OUT
            && rows.1 % radix_quant::PANEL_ROWS as i64 == 0;
        // Q8_0, Q4_0, Q4_1 and Q5_0 rows with 8-bit products are split where this
        // CPU's dot reads them so (a decode token's products 20–35 %
        // sooner); a table's lookups join the rows they read.
        let split = format.is_some_and(|f| RowLayout::Split.check(f).is_ok())
            && products == Products::Int8
            && radix_quant::Isa::best().reads_split_rows();
        let blocks = match format {
            Some(_) if panels => panels_shape(rows, shape.dims()[1]).ok(),
            Some(f) if split => split_shape(f, rows, shape.dims()[1]).ok(),
            Some(f) => blocks_shape_with(f, rows, shape.dims()[1], products).ok(),
            None => None,
        };
        if let Some(blocks) = blocks {
            *t = Tensor::param(blocks);
            changed += 1;
        }
    });
    changed
}

/// Reads every tensor of `model` from `store` by its field path (mapped by the
/// store's name map), checks its dims against the parameter's, and uploads it:
/// the model's weights on the device, as the same tree.
pub fn load_weights<M: Module + ?Sized>(
    platform: &Platform,
    store: &WeightStore,
    model: &M,
) -> Result<Bufferized<M>, LoadError> {
    let params: Vec<(String, Shape)> = crate::module::tensors(model)
        .into_iter()
        .map(|(path, t)| (path, t.shape()))
        .collect();
    // Reading (dequantizing) and uploading a weight is independent of the
    // others: spread over the cores, a model loads that much sooner.
    let mut loaded =
        parallel_map(&params, |(path, shape)| load(platform, store, path, *shape)).into_iter();
    model.map(&mut String::new(), &mut |_, _| {
        loaded
            .next()
            .expect("model.map visits the leaves tensors() listed")
    })
}

/// One weight, read from `store` and uploaded as `shape`: bytes of the
/// parameter's dtype or block format go up as they are (from the file's
/// memory map), others are converted to `f32` (or BF16 blocks) first.
fn load(
    platform: &Platform,
    store: &WeightStore,
    path: &str,
    shape: Shape,
) -> Result<Buffer, LoadError> {
    if let Some((format, cols)) = blocks_format(&shape) {
        let mut dims = shape.dims().to_vec();
        *dims.last_mut().expect("blocks have a last axis") = cols;
        if format == Format::BF16 && store.format(path) != Some(Format::BF16) {
            let values = store.get(path, &dims)?.to_f32_vec();
            let bytes: Vec<u8> = values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect();
            return Ok(Buffer::weights_from_bytes(platform, &bytes, shape)?);
        }
        let host = store.blocks(path, format, &dims)?;
        match blocks_layout(&shape) {
            Some(Layout::Panels) => {
                let (rows, cols) = (dims[0] as usize, cols as usize);
                let panels = radix_quant::pack_panels(rows, cols, host.bytes())
                    .map_err(|e| crate::Error::Host(format!("{path}: {e}")))?;
                return Ok(Buffer::weights_from_bytes(platform, &panels, shape)?);
            }
            Some(Layout::Split) => {
                let split = (format, cols as usize);
                return Buffer::weights_split(platform, &host, shape, split)
                    .map_err(|e| crate::Error::Host(format!("{path}: {e}")).into());
            }
            _ => {}
        }
        return Ok(Buffer::weights_from_host(platform, &host, shape)?);
    }
    let host = store.get(path, shape.dims())?;
    if host.dtype() == shape.dtype() {
        return Ok(Buffer::weights_from_host(platform, &host, shape)?);
    }
    Ok(Buffer::from_slice(platform, &host.to_f32_vec(), shape)?)
}

/// `f` of each item, in order, computed on up to as many threads as the
/// machine has cores.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = vec![];
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break mine };
                        mine.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// `x` contracted with the matrix `w` over `x`'s axis `axis` (and `w`'s
/// columns), whichever form `w` has: f32 (`x.dot`) or blocks
/// ([`crate::quant::dot`]).
#[track_caller]
pub(crate) fn dot_matrix(x: Tensor, w: Tensor, axis: &str) -> Tensor {
    match blocks_format(&w.shape()) {
        Some(_) => crate::quant::dot(x, w, axis),
        None => x.dot(w, axis),
    }
}

/// Whether shape `s` has exactly the axes tagged `tags`, in any order.
pub(crate) fn has_axes(s: Shape, tags: &[&str]) -> bool {
    s.rank() == tags.len() && tags.iter().all(|&t| s.axis(t).is_some())
}

/// `t` (whose axes are all tagged and present in `like`) broadcast to
/// `like`'s dims, in `like`'s axis order.
#[track_caller]
pub(crate) fn broadcast_like(t: Tensor, like: Tensor) -> Tensor {
    t.broadcast(like.shape().with_dtype(t.dtype()))
}

#[cfg(test)]
mod tests;
