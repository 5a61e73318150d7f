//! Scaled dot-product attention with grouped key/value heads, its masks, and
//! a key/value cache.
//!
//! Tags: queries `(.., q, h, hd)`, keys and values `(.., k, h, hd)` where the
//! queries' `h` is a multiple of the keys' (grouped-query attention: query head
//! `i` reads key head `i / (n_heads / n_kv_heads)`). Masks are bools, `true`
//! where a query may read a key, tagged with a subset of the scores' tags
//! (`b`, `q`, `k`), in that order.

use crate::nn::broadcast_like;
use crate::nn::tags::{B, H, HD, K, Q};
use crate::{DType, Module, Shape, Tensor};

/// The group of query heads that share one key/value head.
const REP: &str = "rep";

/// `softmax(q k^T / sqrt(hd) masked) v` per head: the result has `q`'s shape.
///
/// `mask` (bools, see the module doc) hides keys where it is `false`; a query
/// that may read no key gets the mean of all values (no NaN).
#[track_caller]
pub fn attention(q: Tensor, k: Tensor, v: Tensor, mask: Option<Tensor>) -> Tensor {
    let n_heads = q.dim(H);
    let n_kv = k.dim(H);
    let head_dim = q.dim(HD);
    let rep = n_heads / n_kv.max(1);
    let q = q.split_axis(H, &[(H, n_kv.into()), (REP, rep.into())]);
    let scores = q.dot(k, HD) * (1.0 / (head_dim as f64).sqrt());
    let scores = match mask {
        Some(m) => {
            let hidden = Tensor::full(scores.shape(), f64::from(f32::MIN));
            broadcast_like(m, scores).select(scores, hidden)
        }
        None => scores,
    };
    let probs = scores.softmax(K);
    let out = probs.dot(v, K);
    let order: Vec<&str> = q
        .shape()
        .tags()
        .iter()
        .map(|t| t.map_or("", |t| t.as_str()))
        .collect();
    out.transpose(order.as_slice()).merge_axes([H, REP], H)
}

/// Bools tagged `(.., q, k)`: query at position `q_pos` may read keys at
/// positions `<= q_pos`. `q_pos` is tagged `q` and `k_pos` tagged `k`, with
/// optional leading batch axes on either.
#[track_caller]
pub fn causal_mask(q_pos: Tensor, k_pos: Tensor) -> Tensor {
    let mut axes: Vec<(&str, i64)> = vec![];
    for t in [q_pos, k_pos] {
        for (tag, d) in t.shape().tags().iter().zip(t.shape().dims()) {
            let tag = tag.map_or("", |t| t.as_str());
            if !axes.iter().any(|a| a.0 == tag) {
                axes.push((tag, *d));
            }
        }
    }
    // Batch axes first, then q, then k.
    axes.sort_by_key(|a| match a.0 {
        Q => 1,
        K => 2,
        _ => 0,
    });
    let grid = crate::Shape::tagged(q_pos.dtype(), &axes);
    k_pos.broadcast(grid).le(q_pos.broadcast(grid))
}

/// [`causal_mask`], and with a `window` of `w` positions only the last `w`
/// keys up to each query's position (a sliding-window layer's mask).
#[track_caller]
pub fn window_mask(q_pos: Tensor, k_pos: Tensor, window: Option<i64>) -> Tensor {
    let mask = causal_mask(q_pos, k_pos);
    match window {
        // Keys within the last `w` positions: q_pos <= k_pos + w - 1.
        Some(w) if w > 0 => mask.and(causal_mask(k_pos + (w - 1) as f64, q_pos)),
        _ => mask,
    }
}

/// Bools tagged `(b, k)` from `valid` (ones for real tokens, zeros for padding,
/// any integer or float dtype): keys that are padding are hidden.
#[track_caller]
pub fn padding_mask(valid: Tensor) -> Tensor {
    valid.ne(Tensor::scalar(0.0, valid.dtype()))
}

/// Keys and values of one attention layer for `capacity` positions, tagged
/// `(b, k, h, hd)`: an argument and a result of each decoding step.
#[derive(Module, Clone, Copy, Debug)]
pub struct KvCache {
    /// The keys.
    pub k: Tensor,
    /// The values.
    pub v: Tensor,
}

impl KvCache {
    /// The shape of the keys (and of the values) of a layer's cache.
    pub fn shape(batch: i64, capacity: i64, n_kv_heads: i64, head_dim: i64, dtype: DType) -> Shape {
        Shape::tagged(
            dtype,
            &[(B, batch), (K, capacity), (H, n_kv_heads), (HD, head_dim)],
        )
    }

    /// A cache placeholder (for tracing) of `shape` (see [`KvCache::shape`]).
    pub fn param(shape: Shape) -> KvCache {
        KvCache {
            k: Tensor::param(shape),
            v: Tensor::param(shape),
        }
    }

    /// An empty cache of `shape`, made inside the program.
    pub fn zeros(shape: Shape) -> KvCache {
        KvCache {
            k: Tensor::zeros(shape),
            v: Tensor::zeros(shape),
        }
    }

    /// The cache with new keys and values (tagged `(b, k, h, hd)` in any order,
    /// converted to the cache's element type) written
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
            let new = new.convert(cache.dtype()).transpose([B, K, H, HD]);
            cache.dynamic_update_slice(new, &starts)
        };
        KvCache {
            k: write(self.k, k),
            v: write(self.v, v),
        }
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
            let new = new.convert(cache.dtype()).transpose([B, K, H, HD]);
            cache
                .transpose([B, K, H, HD])
                .merge_axes([B, K], ROWS)
                .scatter(ROWS, at, new)
                .split_axis(ROWS, &[(B, rows.into()), (K, capacity.into())])
        };
        KvCache {
            k: write(self.k, k),
            v: write(self.v, v),
        }
    }
}
