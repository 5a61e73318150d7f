//! The key/value cache of one attention layer, in f32, f16 or llama.cpp's
//! Q8_0 blocks ([`CacheType`]).
//!
//! A Q8_0 cache is a `u8` tensor `(b, k, h, blocks:Q8_0)`: each head's
//! `hd` values of a position are `hd / 32` of ggml's `block_q8_0`
//! ([`radix_quant::blocks::BlockQ8_0`]: an f16 scale `d = max|x| / 127`
//! and 32 codes `round(x / d)`), so a position takes 34 bytes per 32
//! values, and copies of rows or positions (the engine's slots, its prompt
//! cache) move whole blocks as they move f32 values. [`KvCache::write`]
//! quantizes new keys and values in the program, as ggml's
//! `quantize_row_q8_0_ref` does, bit for bit.

use radix_quant::blocks::{BlockQ8_0, field_range};

use crate::nn::tags::{B, H, HD, K, LAYER};
use crate::quant::{Format, blocks_format, blocks_shape, dequantize};
use crate::tensor::{fail, located};
use crate::{DType, Module, Shape, Tensor};
use std::panic::Location;

/// How a key/value cache stores its keys and values.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheType {
    /// f32 values.
    F32,
    /// f16 values (new keys and values rounded to nearest).
    F16,
    /// llama.cpp's Q8_0 blocks of 32 values along each head (see the
    /// module doc): heads must be a multiple of 32 wide.
    Q8_0,
}

impl CacheType {
    /// The name the command line and reports spell it with: `f32`, `f16`
    /// or `q8_0`.
    pub fn name(self) -> &'static str {
        match self {
            CacheType::F32 => "f32",
            CacheType::F16 => "f16",
            CacheType::Q8_0 => "q8_0",
        }
    }

    /// The bytes `n` values of one head take (for Q8_0 `34 · n / 32`,
    /// rounded up to whole blocks).
    pub fn bytes(self, n: usize) -> usize {
        match self {
            CacheType::F32 => 4 * n,
            CacheType::F16 => 2 * n,
            CacheType::Q8_0 => n.div_ceil(QK) * size_of::<BlockQ8_0>(),
        }
    }

    /// `Err` (naming `head_dim`) where this type cannot hold heads of
    /// `head_dim` values: Q8_0 needs a multiple of 32.
    pub fn check(self, head_dim: i64) -> Result<(), String> {
        if head_dim < 0 || (self == CacheType::Q8_0 && head_dim % QK as i64 != 0) {
            return Err(format!(
                "a {} key/value cache needs heads a multiple of {QK} wide, and these are {head_dim} (head_dim)",
                self.name()
            ));
        }
        Ok(())
    }
}

/// The values in one Q8_0 block.
const QK: usize = 32;

/// Keys and values of one attention layer for `capacity` positions, tagged
/// `(b, k, h, hd)` (or `(b, k, h, blocks:Q8_0)`, see [`KvCache::shape`]): an
/// argument and a result of each decoding step.
#[derive(Module, Clone, Copy, Debug)]
pub struct KvCache {
    /// The keys.
    pub k: Tensor,
    /// The values.
    pub v: Tensor,
}

impl KvCache {
    /// The shape of the keys (and of the values) of a layer's cache:
    /// `(b, k, h, hd)` of f32 or f16, or for [`CacheType::Q8_0`] `u8 (b,
    /// k, h, blocks:Q8_0)`, `34 · head_dim / 32` bytes per head. `Err`
    /// (naming `head_dim`) for heads Q8_0 cannot split into blocks, or a
    /// negative size.
    pub fn shape(
        batch: i64,
        capacity: i64,
        n_kv_heads: i64,
        head_dim: i64,
        ty: CacheType,
    ) -> Result<Shape, String> {
        ty.check(head_dim)?;
        let (lead, dtype) = ([(B, batch), (K, capacity), (H, n_kv_heads)], ty.dtype());
        if lead.iter().any(|a| a.1 < 0) {
            return Err(format!("a cache of {lead:?}: sizes must not be negative"));
        }
        let last = match ty {
            CacheType::F32 | CacheType::F16 => (HD, head_dim),
            CacheType::Q8_0 => {
                let row = blocks_shape(Format::Q8_0, (H, n_kv_heads), head_dim)?;
                let tag = row.tag(1).ok_or("a blocks shape has a tagged last axis")?;
                (tag.as_str(), row.dims()[1])
            }
        };
        let [b, k, h] = lead;
        Ok(Shape::tagged(dtype, &[b, k, h, last]))
    }

    /// The type and the head width of a cache of `shape` ([`KvCache::shape`],
    /// its axes in any order), or `None` for a shape no cache has.
    pub fn layout(shape: &Shape) -> Option<(CacheType, i64)> {
        match shape.dtype() {
            DType::F32 | DType::F16 if shape.rank() == 4 => {
                let ty = match shape.dtype() {
                    DType::F32 => CacheType::F32,
                    _ => CacheType::F16,
                };
                Some((ty, shape.dim(HD)?))
            }
            DType::U8 if shape.rank() == 4 => match blocks_format(shape)? {
                (Format::Q8_0, head_dim) => Some((CacheType::Q8_0, head_dim)),
                _ => None,
            },
            _ => None,
        }
    }

    /// A cache placeholder (for tracing) of `shape` (see [`KvCache::shape`]).
    pub fn param(shape: Shape) -> KvCache {
        KvCache {
            k: Tensor::param(shape),
            v: Tensor::param(shape),
        }
    }

    /// An empty cache of `shape`, made inside the program (zero values; a
    /// Q8_0 cache's blocks of zero scale and codes).
    pub fn zeros(shape: Shape) -> KvCache {
        KvCache {
            k: Tensor::zeros(shape),
            v: Tensor::zeros(shape),
        }
    }

    /// `cache` (keys or values of a cache, [`KvCache::shape`]) as f32
    /// `(b, k, h, hd)`: itself converted, or its Q8_0 blocks decoded.
    #[track_caller]
    pub fn values(cache: Tensor) -> Tensor {
        match KvCache::layout(&cache.shape()) {
            Some((CacheType::Q8_0, _)) => dequantize(cache, HD),
            _ => cache.convert(DType::F32),
        }
    }

    /// The cache with new keys and values (tagged `(b, k, h, hd)` in any order,
    /// converted to the cache's element type, or quantized to its Q8_0
    /// blocks) written
    /// from position `start` (a rank-0 integer tensor) on
    /// (`stablehlo.dynamic_update_slice`). A `start` tagged `(b)` gives each
    /// row of the batch its own first position (sequences of different
    /// lengths running together): row `i`'s keys go to positions
    /// `start[i]..` of the cache's row `i`, those past the capacity are
    /// dropped, and the cache may hold more rows, which keep what they hold.
    #[track_caller]
    pub fn write(self, start: Tensor, k: Tensor, v: Tensor) -> KvCache {
        if start.shape().rank() == 1 {
            return self.write_rows(start, k, v);
        }
        let zero = Tensor::scalar(0.0, start.dtype());
        let starts = [zero, start, zero, zero];
        let write = |cache: Tensor, new: Tensor| {
            let order = order(&cache.shape());
            let cache = cache.transpose(order);
            cache.dynamic_update_slice(encode(new, &cache.shape()), &starts)
        };
        // The closure's nodes too are at the caller's line.
        located(Location::caller(), || KvCache {
            k: write(self.k, k),
            v: write(self.v, v),
        })
    }

    /// The shape of `layers` caches of `shape` ([`KvCache::shape`]) stacked
    /// along a leading axis tagged `layer`: what a loop over a model's
    /// layers carries ([`KvCache::layer`], [`KvCache::write_layer`]).
    pub fn stacked_shape(layers: i64, shape: Shape) -> Option<Shape> {
        shape.insert_axis(0, layers, LAYER)
    }

    /// Layer `i` (a rank-0 integer tensor) of a stacked cache
    /// ([`KvCache::stacked_shape`]): what its attention reads, in place
    /// where a kernel reads it ([`Tensor::layer`]).
    #[track_caller]
    pub fn layer(self, i: Tensor) -> KvCache {
        KvCache {
            k: self.k.layer(i),
            v: self.v.layer(i),
        }
    }

    /// [`KvCache::write`] into layer `layer` (a rank-0 integer tensor) of a
    /// stacked cache ([`KvCache::stacked_shape`]), in place: one
    /// `dynamic_update_slice` of the stack, where writing a slice of it and
    /// putting the slice back would copy the layer twice. `start` is one
    /// position (rank 0): a stack of one sequence's caches.
    #[track_caller]
    pub fn write_layer(self, layer: Tensor, start: Tensor, k: Tensor, v: Tensor) -> KvCache {
        let stack = self.k.shape();
        let failed = |msg: String| KvCache {
            k: fail("write_layer", msg.clone(), &[self.k, k, start], stack),
            v: fail("write_layer", msg, &[self.v, v, start], stack),
        };
        let Some(one) = stack
            .remove_axis(0)
            .filter(|_| stack.tag(0).map(|t| t.as_str()) == Some(LAYER))
        else {
            return failed(format!(
                "wants a cache stacked along a leading axis {LAYER}, got {stack}"
            ));
        };
        if start.shape().rank() != 0 {
            return failed(format!(
                "wants one first position (rank 0), got {}",
                start.shape()
            ));
        }
        let zero = Tensor::scalar(0.0, start.dtype());
        let layer = layer.convert(start.dtype());
        let starts = [layer, zero, start, zero, zero];
        let [b, k_, h, last] = order(&one);
        let write = |cache: Tensor, new: Tensor| {
            let cache = cache.transpose([LAYER, b, k_, h, last]);
            let new = encode(new, &one).unsqueeze(0, LAYER);
            cache.dynamic_update_slice(new, &starts)
        };
        located(Location::caller(), || KvCache {
            k: write(self.k, k),
            v: write(self.v, v),
        })
    }

    /// The cache with the positions of `part` (a cache of the same type,
    /// heads and width, at most as many rows and positions) copied in as
    /// they are stored, from position `start` (a rank-0 integer tensor) on
    /// of its first rows: no conversion, no quantizing (a prompt cache's
    /// entry pasted into a full cache).
    #[track_caller]
    pub fn paste(self, start: Tensor, part: KvCache) -> KvCache {
        let zero = Tensor::scalar(0.0, start.dtype());
        let starts = [zero, start, zero, zero];
        let paste = |cache: Tensor, part: Tensor| {
            let order = order(&cache.shape());
            let part = part.transpose(order);
            cache.transpose(order).dynamic_update_slice(part, &starts)
        };
        located(Location::caller(), || KvCache {
            k: paste(self.k, part.k),
            v: paste(self.v, part.v),
        })
    }

    /// [`KvCache::write`] with a first position per row: the `s` keys of
    /// row `i` of `k` and `v` written from position `starts[i]` (`starts`
    /// tagged `(b)`) of the cache's row `i`. One scatter into the cache seen
    /// as `(b k, h, hd)`, at `i * capacity + starts[i] + j`: XLA's CPU
    /// backend writes it in place, where an update per row copied the whole
    /// cache for each, and a select over the cache read and wrote all of it.
    /// A key whose position is past the capacity gets an index past the
    /// whole cache, which the scatter skips, rather than one in the next
    /// row.
    #[track_caller]
    fn write_rows(self, starts: Tensor, k: Tensor, v: Tensor) -> KvCache {
        const ROWS: &str = "__rows";
        let (rows, capacity) = (self.k.dim(B), self.k.dim(K));
        let at = Shape::tagged(starts.dtype(), &[(B, k.dim(B)), (K, k.dim(K))]);
        let pos = Tensor::iota(at, K) + starts.broadcast(at);
        let inside = pos.lt(Tensor::scalar(capacity as f64, at.dtype()));
        let past_all = Tensor::scalar((rows * capacity) as f64, at.dtype());
        let at = inside.select(Tensor::iota(at, B) * capacity as f64 + pos, past_all);
        let write = |cache: Tensor, new: Tensor| {
            let order = order(&cache.shape());
            let cache = cache.transpose(order);
            let new = encode(new, &cache.shape());
            cache
                .merge_axes([B, K], ROWS)
                .scatter(ROWS, at, new)
                .split_axis(ROWS, &[(B, rows.into()), (K, capacity.into())])
        };
        // The closure's nodes too are at the caller's line.
        located(Location::caller(), || KvCache {
            k: write(self.k, k),
            v: write(self.v, v),
        })
    }
}

impl CacheType {
    /// The element type of a cache of this type.
    fn dtype(self) -> DType {
        match self {
            CacheType::F32 => DType::F32,
            CacheType::F16 => DType::F16,
            CacheType::Q8_0 => DType::U8,
        }
    }
}

/// A cache's axes in the order [`KvCache::shape`] makes them: `(b, k, h,
/// hd)`, or `(b, k, h, blocks:Q8_0)`.
pub(super) fn order(cache: &Shape) -> [&'static str; 4] {
    let last = match KvCache::layout(cache) {
        Some((CacheType::Q8_0, _)) => cache.tag(cache.rank() - 1).map(|t| t.as_str()),
        _ => None,
    };
    [B, K, H, last.unwrap_or(HD)]
}

/// New keys or values `new` (`(b, k, h, hd)` in any order) as a cache of
/// `cache`'s type stores them, `(b, k, h, last)`: converted, or quantized.
#[track_caller]
fn encode(new: Tensor, cache: &Shape) -> Tensor {
    let new = new.transpose([B, K, H, HD]);
    match KvCache::layout(cache) {
        Some((CacheType::Q8_0, _)) => {
            let d = new.shape().dims().to_vec();
            let bytes = cache.dims()[3];
            let target = Shape::tagged(
                DType::U8,
                &[(B, d[0]), (K, d[1]), (H, d[2]), (order(cache)[3], bytes)],
            );
            quantize_q8_0(new.convert(DType::F32)).reshape_to(target)
        }
        _ => new.convert(cache.dtype()),
    }
}

/// `x` (f32, its last axis a multiple of 32) as Q8_0 blocks, the last axis
/// replaced by their bytes (untagged): per block of 32, `d = amax / 127`,
/// `id = 1 / d` (0 where `d` is), the f16 of `d`, and the codes
/// `round(x · id)` with halves away from zero, as ggml's
/// `quantize_row_q8_0_ref` computes them.
#[track_caller]
fn quantize_q8_0(x: Tensor) -> Tensor {
    let dims = x.shape().dims().to_vec();
    let Some((&hd, lead)) = dims.split_last() else {
        return x.convert(DType::U8);
    };
    let n_blocks = hd / QK as i64;
    let blocks_at: Vec<i64> = lead.iter().copied().chain([n_blocks, QK as i64]).collect();
    let x = x.reshape(&blocks_at);
    let last = blocks_at.len() - 1;
    let amax = x.abs().max(last);
    let d = amax / 127.0;
    let zero = Tensor::zeros(d.shape());
    let id = d.eq(zero).select(zero, 1.0 / d);
    let id = id.broadcast_in_dim(x.shape(), &(0..last).collect::<Vec<_>>());
    let codes = round_half_away(x * id)
        .convert(DType::I8)
        .bitcast(DType::U8);
    let scale = d.convert(DType::F16).bitcast(DType::U8);
    // ggml's `block_q8_0`: the scale's two bytes, then the 32 codes.
    debug_assert_eq!(field_range(|b: &BlockQ8_0| &b.d), 0..2);
    debug_assert_eq!(field_range(|b: &BlockQ8_0| &b.qs), 2..34);
    let blocks = Tensor::concatenate(&[scale, codes], last);
    let bytes: Vec<i64> = lead
        .iter()
        .copied()
        .chain([n_blocks * size_of::<BlockQ8_0>() as i64])
        .collect();
    blocks.reshape(&bytes)
}

/// `v` rounded to an integer with halves away from zero (C's `roundf`, which
/// ggml calls), in ops that no compiler contracts with the product `v`
/// comes from: `round_nearest_even` but at a half, `ceil` above zero and
/// `floor` below. A half is where `2v` is an integer and `v` is not.
#[track_caller]
fn round_half_away(v: Tensor) -> Tensor {
    let twice = v * 2.0;
    let half = twice.floor().eq(twice).and(v.floor().ne(v));
    let zero = Tensor::zeros(v.shape());
    let away = v.gt(zero).select(v.ceil(), v.floor());
    half.select(away, v.round())
}
