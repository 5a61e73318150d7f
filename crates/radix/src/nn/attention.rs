//! Scaled dot-product attention with grouped key/value heads and its masks.
//!
//! Tags: queries `(.., q, h, hd)`, keys and values `(.., k, h, hd)` where the
//! queries' `h` is a multiple of the keys' (grouped-query attention: query head
//! `i` reads key head `i / (n_heads / n_kv_heads)`). Masks are bools, `true`
//! where a query may read a key, tagged with a subset of the scores' tags
//! (`b`, `q`, `k`), in that order.

use crate::Tensor;
use crate::nn::broadcast_like;
use crate::nn::tags::{H, HD, K, Q};

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
