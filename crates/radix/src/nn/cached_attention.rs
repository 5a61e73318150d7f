//! Causal attention of new queries over a key/value cache: the custom call
//! `radix.cached_attention`, whose kernel reads only the cache positions
//! each query may see (so a decode step costs what the tokens in the cache
//! cost, not its capacity), and whose fallback is [`attention`] over the
//! whole cache with a causal (and sliding-window) mask. The cache may be
//! f32, f16 or Q8_0 blocks ([`CacheType`]); the kernel widens what it reads
//! to f32, the fallback decodes the whole cache ([`KvCache::values`]).

mod cached;
mod loops;

use std::sync::LazyLock;

use cached::Operand;

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::nn::has_axes;
use radix_quant::blocks::BlockQ8_0;

use crate::nn::kv_cache::order;
use crate::nn::tags::{B, H, HD, K, Q};
use crate::nn::{CacheType, KvCache, attention, window_mask};
use crate::tensor::fail;
use crate::{DType, Shape, Tensor};

/// `q [b, q, h, hd] f32`, the cache's `k` and `v` `[rows, k, kv, hd]`, both
/// f32 or both f16, or both `u8 [rows, k, kv, 34 hd / 32]` of Q8_0 blocks
/// (`rows >= b`), and the queries' positions `[b, q] i32`:
/// `[b, q, h, hd] f32`.
/// Attribute `window`: how many positions a query sees, itself included (0:
/// all before it).
static CACHED_ATTENTION: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.cached_attention", 1, shape_rule, kernel)
        .fallback(|x, attrs| {
            let window = attrs.i64("window").unwrap_or(0);
            vec![masked(x[0], x[1], x[2], x[3], window)]
        })
        .derivative(|x, _, g, attrs| {
            // The fallback's: the kernel computes the same function.
            let window = attrs.i64("window").unwrap_or(0);
            let (q, k, v, pos) = (x[0], x[1], x[2], x[3]);
            if k.dtype() == DType::U8 {
                // Q8_0 codes have no derivative: the queries' alone.
                let f = |q: &Tensor, kvp: &(Tensor, Tensor, Tensor)| {
                    masked(*q, kvp.0, kvp.1, kvp.2, window)
                };
                let (_, dq) = crate::vjp(f, &q, &(k, v, pos), &g[0]);
                let zeros = |t: Tensor| Tensor::zeros(t.shape());
                return vec![dq, zeros(k), zeros(v), zeros(pos)];
            }
            let f = |qkv: &(Tensor, Tensor, Tensor), pos: &Tensor| {
                masked(qkv.0, qkv.1, qkv.2, *pos, window)
            };
            let (_, (dq, dk, dv)) = crate::vjp(f, &(q, k, v), &pos, &g[0]);
            vec![dq, dk, dv, Tensor::zeros(pos.shape())]
        })
        .register()
        .expect("radix.cached_attention is declared once")
});

/// Attention of queries `q` `(b, q, h, hd)` at positions `q_pos` `(b, q)`
/// over `cache` (keys and values tagged `(b, k, h, hd)`, at least `b` rows):
/// query at position `p` reads the keys at positions `..= p`, or, with a
/// `window` of `w`, the last `w` of them. The result has `q`'s shape; the
/// keys' scores are scaled by `1 / sqrt(hd)`. The cache may be any
/// [`CacheType`] (read as f32).
///
/// On the CPU plugin this is a kernel that reads only those positions;
/// elsewhere it is [`attention`] over the whole cache with a
/// [`causal_mask`].
#[track_caller]
pub fn cached_attention(q: Tensor, q_pos: Tensor, cache: KvCache, window: Option<i64>) -> Tensor {
    let (qs, ks, ps) = (q.shape(), cache.k.shape(), q_pos.shape());
    let order = order(&ks);
    let is_cache = KvCache::layout(&ks).is_some() && has_axes(ks, &order);
    if !has_axes(qs, &[B, Q, H, HD]) || !is_cache || !has_axes(ps, &[B, Q]) {
        let msg = format!(
            "wants q (b, q, h, hd), a cache (b, k, h, hd) and positions (b, q), got {qs}, {ks} and {ps}"
        );
        return fail("cached_attention", msg, &[q, cache.k, cache.v, q_pos], qs);
    }
    let q = q.transpose([B, Q, H, HD]);
    let (k, v) = (cache.k.transpose(order), cache.v.transpose(order));
    let pos = q_pos.transpose([B, Q]).convert(DType::I32);
    let attrs = Attrs::new().with("window", window.unwrap_or(0));
    CACHED_ATTENTION.call(&[q, k, v, pos], &attrs)[0]
}

/// The fallback: [`attention`] over every cache position, with those a
/// query may not read masked.
fn masked(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, window: i64) -> Tensor {
    let (k, v) = (KvCache::values(k), KvCache::values(v));
    let rows = q.dim(B);
    let (k, v) = if k.dim(B) > rows {
        (k.slice(B, 0..rows), v.slice(B, 0..rows))
    } else {
        (k, v)
    };
    let k_pos = Tensor::iota(Shape::tagged(DType::I32, &[(K, k.dim(K))]), K);
    attention(q, k, v, Some(window_mask(q_pos, k_pos, Some(window))))
}

fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    let [q, k, v, pos] = s else {
        return Err(format!(
            "wants q, k, v and positions, got {} operands",
            s.len()
        ));
    };
    let window = attrs.i64("window")?;
    let cached = matches!(k.dtype(), DType::F32 | DType::F16 | DType::U8);
    if q.rank() != 4 || q.dtype() != DType::F32 || k.rank() != 4 || !cached || k != v {
        return Err(format!(
            "wants an f32 q and f32, f16 or u8 (Q8_0) k and v of rank 4, k and v alike, got {q}, {k} and {v}"
        ));
    }
    let (qd, kd) = (q.dims(), k.dims());
    let width = match k.dtype() {
        DType::U8 => {
            CacheType::Q8_0.check(qd[3])?;
            CacheType::Q8_0.bytes(qd[3] as usize) as i64
        }
        _ => qd[3],
    };
    let fits = kd[0] >= qd[0] && kd[3] == width && kd[2] > 0 && qd[2] % kd[2] == 0;
    if !fits {
        return Err(format!(
            "q {q} does not fit the cache {k}: rows, head width, or heads not a multiple of the cache's"
        ));
    }
    if pos.dtype() != DType::I32 || pos.dims() != &qd[..2] {
        return Err(format!(
            "wants i32 positions [{}, {}], got {pos}",
            qd[0], qd[1]
        ));
    }
    if window < 0 {
        return Err(format!("a window of {window} positions"));
    }
    Ok(vec![*q])
}

/// The sizes of one call.
#[derive(Clone, Copy)]
struct Dims {
    n_q: usize,
    heads: usize,
    kv_heads: usize,
    hd: usize,
    capacity: usize,
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let window = k.attrs().i64("window")?;
    let (qs, ks) = (
        k.input_shape(0).ok_or("no q")?,
        k.input_shape(1).ok_or("no keys")?,
    );
    let (qd, kd) = (qs.dims(), ks.dims());
    let dims = Dims {
        n_q: qd[1] as usize,
        heads: qd[2] as usize,
        kv_heads: kd[2] as usize,
        hd: qd[3] as usize,
        capacity: kd[1] as usize,
    };
    let window = usize::try_from(window).map_err(|e| e.to_string())?;
    match ks.dtype() {
        DType::F16 => attend_all::<half::f16>(k, &dims, window),
        DType::U8 => attend_all::<BlockQ8_0>(k, &dims, window),
        _ => attend_all::<f32>(k, &dims, window),
    }
}

/// Queries of one cache row that a task attends together: each key and
/// value it reads is converted once for all of them (a prompt's tokens read
/// the same positions), where a task per query read them once each.
const QUERY_BLOCK: usize = 8;

/// The kernel over a cache of `T`.
fn attend_all<T: Operand>(k: &Kernel<'_>, dims: &Dims, window: usize) -> Result<(), String> {
    let (q, keys, values) = (k.input::<f32>(0)?, T::operand(k, 1)?, T::operand(k, 2)?);
    let pos = k.input::<i32>(3)?;
    let out = k.output::<f32>(0)?;
    // One task per (row, key/value head, block of queries): it reads that
    // head's cache positions in order and writes the outputs of the query
    // heads that share it (adjacent) for its queries. A decode token's
    // query is thus split over the kernel workers too: read by one thread,
    // an f32 cache of 30 layers took 6 % of a SmolLM2 token's samples.
    let group = dims.heads / dims.kv_heads;
    let chunk = group * dims.hd;
    let blocks = dims.n_q.div_ceil(QUERY_BLOCK);
    let rows = pos.len() / dims.n_q.max(1);
    // By (row, query, key/value head): the outputs of one query's heads
    // that share that key/value head.
    let parts: Vec<std::sync::Mutex<&mut [f32]>> = out
        .chunks_exact_mut(chunk)
        .map(std::sync::Mutex::new)
        .collect();
    let run = |task: usize| {
        let (row, rest) = (
            task / (dims.kv_heads * blocks),
            task % (dims.kv_heads * blocks),
        );
        let (kv_head, block) = (rest / blocks, rest % blocks);
        let first = block * QUERY_BLOCK;
        let part = |j: usize| (row * dims.n_q + j) * dims.kv_heads + kv_head;
        let along = first..(first + QUERY_BLOCK).min(dims.n_q);
        let queries: Vec<Query> = along
            .clone()
            .map(|j| Query {
                seen: visible(pos[row * dims.n_q + j], window, dims.capacity),
                q: &q[part(j) * chunk..][..chunk],
            })
            .collect();
        let mut guards: Vec<_> = along
            .map(|j| parts[part(j)].lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let mut outs: Vec<&mut [f32]> = guards.iter_mut().map(|g| &mut ***g).collect();
        let at = Heads { row, kv_head };
        T::attend_best(dims, &at, &queries, keys, values, &mut outs);
    };
    radix_quant::SpinPool::global().try_run(rows * dims.kv_heads * blocks, &run)
}

/// The cache positions a query at `pos` reads: `..= pos`, the last
/// `window` of them when `window > 0`, within the cache. Empty for a
/// query before the cache's first position.
fn visible(pos: i32, window: usize, capacity: usize) -> std::ops::Range<usize> {
    let Ok(pos) = usize::try_from(pos) else {
        return 0..0;
    };
    let end = pos.saturating_add(1).min(capacity);
    let start = if window > 0 {
        (pos + 1).saturating_sub(window)
    } else {
        0
    };
    start.min(end)..end
}

/// Which cache row and key/value head one task reads.
struct Heads {
    row: usize,
    kv_head: usize,
}

/// One query of a task: the positions it sees, and its heads that share
/// the task's key/value head (`heads / kv_heads` of them, adjacent).
struct Query<'a> {
    seen: std::ops::Range<usize>,
    q: &'a [f32],
}
