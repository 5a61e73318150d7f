//! Causal attention of new queries over a key/value cache: the custom call
//! `radix.cached_attention`, whose kernel reads only the cache positions
//! each query may see (so a decode step costs what the tokens in the cache
//! cost, not its capacity), and whose fallback is [`attention`] over the
//! whole cache with a causal (and sliding-window) mask. The cache may be
//! f32, f16 or Q8_0 blocks ([`CacheType`]); the kernel widens what it reads
//! to f32, the fallback decodes the whole cache ([`KvCache::values`]).

use std::sync::LazyLock;

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::nn::has_axes;
use radix_quant::blocks::{BlockQ8_0, blocks};

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

/// [`attend`] compiled for AVX2, FMA and F16C where the CPU has them (its
/// loops then run eight lanes at a time), else as portable code.
fn attend_best_of<T: Cached>(
    d: &Dims,
    at: &Heads,
    queries: &[Query<'_>],
    keys: &[T],
    values: &[T],
    outs: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C, checked just above.
        return unsafe { attend_avx2(d, at, queries, keys, values, outs) };
    }
    attend::<T, Portable>(d, at, queries, keys, values, outs)
}

/// Whether the CPU runs [`attend_avx2`]: AVX2 and FMA for its loops, F16C
/// for an f16 cache's conversions (every AVX2 CPU has it).
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn attend_avx2<T: Cached>(
    d: &Dims,
    at: &Heads,
    queries: &[Query<'_>],
    keys: &[T],
    values: &[T],
    outs: &mut [&mut [f32]],
) {
    attend::<T, Avx2>(d, at, queries, keys, values, outs)
}

/// For each query `j` and each of its heads `h` (of the key/value head
/// `at.kv_head`): `outs[j][h] = softmax(q[h] · k[seen] / sqrt(hd)) ·
/// v[seen]` over the positions `seen` it sees of the cache row `at.row`.
/// Both passes walk the positions in order, a block at a time, so the
/// cache streams from memory, each position converted once for every query
/// that sees it. Each query's sums are those of [`dot`] and of `y = w·x + y`
/// over the positions in order, whatever runs beside it: so its bits are
/// the same alone, in a batch, and through `D`'s instructions or the
/// portable loops. A query that sees no position gets the mean of all
/// values, as the masked fallback does.
#[inline(always)]
fn attend<T: Cached, D: Dots>(
    d: &Dims,
    at: &Heads,
    queries: &[Query<'_>],
    keys: &[T],
    values: &[T],
    outs: &mut [&mut [f32]],
) {
    let scale = (1.0 / (d.hd as f64).sqrt()) as f32;
    let (group, hd) = (d.heads / d.kv_heads, d.hd);
    // A head's elements of `T` at a position (f32 or f16 values, or blocks).
    let width = hd / T::VALUES;
    let position = d.kv_heads * width;
    let head = at.kv_head * width;
    let seens: Vec<std::ops::Range<usize>> = queries
        .iter()
        .map(|q| match q.seen.is_empty() {
            true => 0..d.capacity,
            false => q.seen.clone(),
        })
        .collect();
    let lo = seens.iter().map(|s| s.start).min().unwrap_or(0);
    let hi = seens.iter().map(|s| s.end).max().unwrap_or(0);
    let n = hi - lo;
    let first = (at.row * d.capacity + lo) * position;
    let (keys, values) = (
        &keys[first..][..n * position],
        &values[first..][..n * position],
    );
    // The part of query `j`'s positions (from `lo`) within `block`.
    let part = |j: usize, block: std::ops::Range<usize>| {
        let (from, to) = (seens[j].start - lo, seens[j].end - lo);
        from.max(block.start)..to.min(block.end)
    };
    // Scores by query, head, then position from `lo`.
    let mut scores = vec![0.0f32; queries.len() * group * n];
    let layout = (position, head, width);
    let mut block = vec![0.0f32; BLOCK * hd];
    for (b, ks) in keys.chunks(BLOCK * position).enumerate() {
        let p0 = b * BLOCK;
        let m = widen_block(ks, layout, hd, &mut block);
        for (j, q) in queries.iter().enumerate() {
            if part(j, p0..p0 + m).is_empty() {
                continue;
            }
            for (h, qh) in q.q.chunks_exact(hd).enumerate() {
                let out = &mut scores[(j * group + h) * n + p0..][..m];
                D::scores(qh, &block[..m * hd], scale, out);
            }
        }
    }
    for (j, seen) in seens.iter().enumerate() {
        let (from, to) = (seen.start - lo, seen.end - lo);
        for h in 0..group {
            softmax(&mut scores[(j * group + h) * n..][from..to]);
        }
    }
    outs.iter_mut().for_each(|o| o.fill(0.0));
    for (b, vs) in values.chunks(BLOCK * position).enumerate() {
        let p0 = b * BLOCK;
        let m = widen_block(vs, layout, hd, &mut block);
        for (j, out) in outs.iter_mut().enumerate() {
            let seen = part(j, p0..p0 + m);
            if seen.is_empty() {
                continue;
            }
            let vs = &block[(seen.start - p0) * hd..(seen.end - p0) * hd];
            for (h, oh) in out.chunks_exact_mut(hd).enumerate() {
                let w = &scores[(j * group + h) * n..][seen.clone()];
                weighted_sum(w, vs, oh);
            }
        }
    }
}

/// `s` made `softmax(s)`: `e^(s - max)` ([`exp_nonpositive`]) summed in
/// eight lanes added in order, then each divided by the sum. Written so
/// that the compiler runs it eight lanes at a time on every path (a call of
/// libm's `expf` per score took 45 % of a prompt step's attention), with
/// the same bits.
#[inline(always)]
fn softmax(s: &mut [f32]) {
    let mut most = [f32::NEG_INFINITY; 8];
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        for l in 0..8 {
            most[l] = most[l].max(c[l]);
        }
    }
    let max = (most.iter().chain(chunks.remainder())).fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut lanes = [0.0f32; 8];
    let mut chunks = s.chunks_exact_mut(8);
    for c in &mut chunks {
        for l in 0..8 {
            c[l] = exp_nonpositive(c[l] - max);
            lanes[l] += c[l];
        }
    }
    let mut tail = 0.0f32;
    for v in chunks.into_remainder() {
        *v = exp_nonpositive(*v - max);
        tail += *v;
    }
    let sum = lanes.iter().sum::<f32>() + tail;
    s.iter_mut().for_each(|v| *v /= sum);
}

/// `e^x` for `x <= 0` (a score less the largest), within about 2 ulp: `x
/// = n ln 2 + r` with `|r| <= ln 2 / 2` (Cody and Waite's two-part `ln 2`),
/// `e^r` by its Taylor polynomial to `r^7` (the next term is below 5e-9 of
/// it), times `2^n` made from its bits. Below -87.3 (where `e^x` is no
/// longer a normal f32) it gives `e^-87.3`, which the sum of a softmax,
/// at least 1, does not notice; a NaN stays NaN.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Not `max`, which would make a NaN (of a NaN query) a number.
    let x = if x < -87.3 { -87.3 } else { x };
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let mut p: f32 = 1.0 / 5040.0;
    for c in [720.0f32, 120.0, 24.0, 6.0, 2.0, 1.0, 1.0] {
        p = p.mul_add(r, 1.0 / c);
    }
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// How many positions [`attend`] converts at a time: their keys or values
/// (64 of SmolLM2's f32 heads, 16 KiB) stay in the first-level cache while
/// every query head that shares them reads them.
const BLOCK: usize = 64;

/// The heads `head..head + width` of the positions of `cache` (`position`
/// elements each) as f32, `hd` values each, one after another in `block`;
/// how many positions `cache` holds.
#[inline(always)]
fn widen_block<T: Cached>(
    cache: &[T],
    (position, head, width): (usize, usize, usize),
    hd: usize,
    block: &mut [f32],
) -> usize {
    for (i, x) in cache.chunks_exact(position).enumerate() {
        prefetch(cache, (i + AHEAD) * position + head, width);
        T::widen_into(&x[head..][..width], &mut block[i * hd..][..hd]);
    }
    cache.len() / position
}

/// `y += Σ_p w[p] · x[p]` (`x` holds `w.len()` vectors of `y.len()`), each
/// element summed as `y = w[p]·x[p] + y` over `p` in order; 64 elements at
/// a time, held in registers over every position.
#[inline(always)]
fn weighted_sum(w: &[f32], x: &[f32], y: &mut [f32]) {
    const LANES: usize = 64;
    let hd = y.len();
    let mut at = 0;
    while at + LANES <= hd {
        let mut acc = [0.0f32; LANES];
        acc.copy_from_slice(&y[at..at + LANES]);
        for (w, x) in w.iter().zip(x.chunks_exact(hd)) {
            let x = &x[at..at + LANES];
            for l in 0..LANES {
                acc[l] = w.mul_add(x[l], acc[l]);
            }
        }
        y[at..at + LANES].copy_from_slice(&acc);
        at += LANES;
    }
    if at < hd {
        for (w, x) in w.iter().zip(x.chunks_exact(hd)) {
            axpy(*w, &x[at..], &mut y[at..]);
        }
    }
}

/// How many positions ahead of the one it reads [`attend`] asks for the
/// cache's lines. A task reads one head's slice of each position (128
/// bytes of f16 every 384 for SmolLM2), a stride the CPU's own prefetcher
/// did not follow: without the hint, the loads' misses took about half of
/// a long decode step's attention.
const AHEAD: usize = 16;

/// Asks the CPU to bring `x[at..at + n]` into its caches (a hint: nothing
/// is read, and nothing past `x`'s end is asked for).
#[inline(always)]
fn prefetch<T>(x: &[T], at: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if at + n <= x.len() {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let bytes = n * size_of::<T>();
        let start = x[at..].as_ptr().cast::<i8>();
        for line in (0..bytes).step_by(64) {
            // SAFETY: a prefetch reads nothing; the address is within `x`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(line)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, at, n);
}

/// `a · b` in eight lanes (which the compiler keeps in vector registers),
/// the lanes then added in order: the sum every path of the kernel makes.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] = x[l].mul_add(y[l], acc[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += w · x`.
#[inline(always)]
fn axpy(w: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = w.mul_add(*x, *y);
    }
}

/// How [`attend`] computes a query head's scores over a block of keys.
trait Dots {
    /// `out[p] = dot(q, keys[p]) · scale` for the `out.len()` keys of
    /// `keys` (each `q.len()` wide), with [`dot`]'s bits.
    fn scores(q: &[f32], keys: &[f32], scale: f32, out: &mut [f32]);
}

/// [`dot`] key by key.
struct Portable;

impl Dots for Portable {
    #[inline(always)]
    fn scores(q: &[f32], keys: &[f32], scale: f32, out: &mut [f32]) {
        for (o, k) in out.iter_mut().zip(keys.chunks_exact(q.len())) {
            *o = dot(q, k) * scale;
        }
    }
}

/// Eight keys at a time in AVX2's registers: each key's eight lanes as
/// [`dot`] sums them, then the lanes of the eight keys transposed, so that
/// adding the rows adds each key's lanes in [`dot`]'s order, with no sum
/// across a register per key. Made only where the CPU has AVX2 and FMA
/// ([`attend_avx2`]).
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Dots for Avx2 {
    #[inline(always)]
    fn scores(q: &[f32], keys: &[f32], scale: f32, out: &mut [f32]) {
        use std::arch::x86_64::*;
        let hd = q.len();
        if !hd.is_multiple_of(8) {
            return Portable::scores(q, keys, scale, out);
        }
        let full = out.len() / 8 * 8;
        for (o, k) in out[..full]
            .chunks_exact_mut(8)
            .zip(keys.chunks_exact(8 * hd))
        {
            // SAFETY: `Avx2` is used only where the CPU has AVX2 and FMA;
            // every load reads 8 floats of `q` or of one of the 8 keys of
            // `k` (each `hd` wide, `hd` a multiple of 8), the store writes
            // `o`'s 8.
            unsafe {
                let mut acc = [_mm256_setzero_ps(); 8];
                for c in (0..hd).step_by(8) {
                    let qc = _mm256_loadu_ps(q.as_ptr().add(c));
                    for (i, a) in acc.iter_mut().enumerate() {
                        let kc = _mm256_loadu_ps(k.as_ptr().add(i * hd + c));
                        *a = _mm256_fmadd_ps(qc, kc, *a);
                    }
                }
                // Transposed: `t[l]` holds lane `l` of each key's sums.
                let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
                let (u0, u1) = (_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
                let (u2, u3) = (_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
                let (u4, u5) = (_mm256_unpacklo_ps(a4, a5), _mm256_unpackhi_ps(a4, a5));
                let (u6, u7) = (_mm256_unpacklo_ps(a6, a7), _mm256_unpackhi_ps(a6, a7));
                let s0 = _mm256_shuffle_ps::<0x44>(u0, u2);
                let s1 = _mm256_shuffle_ps::<0xEE>(u0, u2);
                let s2 = _mm256_shuffle_ps::<0x44>(u1, u3);
                let s3 = _mm256_shuffle_ps::<0xEE>(u1, u3);
                let s4 = _mm256_shuffle_ps::<0x44>(u4, u6);
                let s5 = _mm256_shuffle_ps::<0xEE>(u4, u6);
                let s6 = _mm256_shuffle_ps::<0x44>(u5, u7);
                let s7 = _mm256_shuffle_ps::<0xEE>(u5, u7);
                let t = [
                    _mm256_permute2f128_ps::<0x20>(s0, s4),
                    _mm256_permute2f128_ps::<0x20>(s1, s5),
                    _mm256_permute2f128_ps::<0x20>(s2, s6),
                    _mm256_permute2f128_ps::<0x20>(s3, s7),
                    _mm256_permute2f128_ps::<0x31>(s0, s4),
                    _mm256_permute2f128_ps::<0x31>(s1, s5),
                    _mm256_permute2f128_ps::<0x31>(s2, s6),
                    _mm256_permute2f128_ps::<0x31>(s3, s7),
                ];
                let sum = t[1..].iter().fold(t[0], |s, &l| _mm256_add_ps(s, l));
                let scaled = _mm256_mul_ps(sum, _mm256_set1_ps(scale));
                _mm256_storeu_ps(o.as_mut_ptr(), scaled);
            }
        }
        Portable::scores(q, &keys[full * hd..], scale, &mut out[full..]);
    }
}

/// An element type a cache holds: read as f32.
trait Cached: Copy {
    /// How many values one element holds (32 for a Q8_0 block).
    const VALUES: usize = 1;

    /// `x` as f32: itself, or converted into `scratch` (room for `x`'s
    /// values).
    fn as_f32<'a>(x: &'a [Self], scratch: &'a mut [f32]) -> &'a [f32];

    /// `x` as f32, written into `out` (room for `x`'s values): for every
    /// type but f32, what [`Cached::as_f32`] writes into its scratch.
    #[inline(always)]
    fn widen_into(x: &[Self], out: &mut [f32]) {
        Self::as_f32(x, out);
    }

    /// [`attend`] as this CPU runs it best for a cache of `Self`.
    fn attend_best(
        d: &Dims,
        at: &Heads,
        queries: &[Query<'_>],
        keys: &[Self],
        values: &[Self],
        outs: &mut [&mut [f32]],
    ) {
        attend_best_of(d, at, queries, keys, values, outs)
    }
}

/// An element type a cache operand of the kernel holds.
trait Operand: Cached + Sync {
    /// Kernel operand `i` as elements of `Self`.
    fn operand<'a>(k: &'a Kernel<'_>, i: usize) -> Result<&'a [Self], String>;
}

impl Operand for f32 {
    fn operand<'a>(k: &'a Kernel<'_>, i: usize) -> Result<&'a [f32], String> {
        k.input::<f32>(i)
    }
}

impl Operand for half::f16 {
    fn operand<'a>(k: &'a Kernel<'_>, i: usize) -> Result<&'a [half::f16], String> {
        k.input::<half::f16>(i)
    }
}

impl Operand for BlockQ8_0 {
    fn operand<'a>(k: &'a Kernel<'_>, i: usize) -> Result<&'a [BlockQ8_0], String> {
        let bytes = k.input::<u8>(i)?;
        if bytes.len() % size_of::<BlockQ8_0>() != 0 {
            return Err(format!("{} bytes are not whole Q8_0 blocks", bytes.len()));
        }
        Ok(blocks(bytes))
    }
}

impl Cached for f32 {
    #[inline(always)]
    fn as_f32<'a>(x: &'a [f32], _: &'a mut [f32]) -> &'a [f32] {
        x
    }

    #[inline(always)]
    fn widen_into(x: &[f32], out: &mut [f32]) {
        out.copy_from_slice(x);
    }
}

impl Cached for half::f16 {
    /// Eight lanes at a time with F16C where the CPU has it (the `half`
    /// crate asks the CPU on every call, and calls a function for every
    /// eight values).
    #[inline(always)]
    fn as_f32<'a>(x: &'a [half::f16], scratch: &'a mut [f32]) -> &'a [f32] {
        use half::slice::HalfFloatSliceExt;
        x.convert_to_f32_slice(scratch);
        scratch
    }

    /// With F16C beside AVX2 and FMA, the conversions are F16C's
    /// instructions inlined into the AVX2 loops ([`F16c`]): as the `half`
    /// crate's calls they took a quarter of a long decode step's time.
    fn attend_best(
        d: &Dims,
        at: &Heads,
        queries: &[Query<'_>],
        keys: &[half::f16],
        values: &[half::f16],
        outs: &mut [&mut [f32]],
    ) {
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            let as_f16c = |x: &[half::f16]| {
                // SAFETY: `F16c` is a `repr(transparent)` `half::f16`.
                unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<F16c>(), x.len()) }
            };
            // SAFETY: the CPU has AVX2, FMA and F16C, checked just above.
            return unsafe { attend_avx2(d, at, queries, as_f16c(keys), as_f16c(values), outs) };
        }
        attend_best_of(d, at, queries, keys, values, outs)
    }
}

impl Cached for BlockQ8_0 {
    const VALUES: usize = 32;

    /// `d · q` per value, as `radix_quant::dequantize` decodes Q8_0 (the
    /// product is exact in f32): the portable copy.
    #[inline(always)]
    fn as_f32<'a>(x: &'a [BlockQ8_0], scratch: &'a mut [f32]) -> &'a [f32] {
        for (b, o) in x.iter().zip(scratch.chunks_exact_mut(32)) {
            let d = b.d.to_f32();
            for (o, &q) in o.iter_mut().zip(&b.qs) {
                *o = f32::from(q as i8) * d;
            }
        }
        scratch
    }

    /// With AVX2, FMA and F16C, the blocks decoded by their instructions
    /// inlined into the AVX2 loops ([`Q8Avx2`]).
    fn attend_best(
        d: &Dims,
        at: &Heads,
        queries: &[Query<'_>],
        keys: &[BlockQ8_0],
        values: &[BlockQ8_0],
        outs: &mut [&mut [f32]],
    ) {
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            let as_avx2 = |x: &[BlockQ8_0]| {
                // SAFETY: `Q8Avx2` is a `repr(transparent)` `BlockQ8_0`.
                unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<Q8Avx2>(), x.len()) }
            };
            // SAFETY: the CPU has AVX2, FMA and F16C, checked just above.
            return unsafe { attend_avx2(d, at, queries, as_avx2(keys), as_avx2(values), outs) };
        }
        attend_best_of(d, at, queries, keys, values, outs)
    }
}

/// A cache's Q8_0 block, decoded by AVX2's instructions: made only where
/// the CPU has them (`<BlockQ8_0 as Cached>::attend_best`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Q8Avx2(BlockQ8_0);

#[cfg(target_arch = "x86_64")]
impl Cached for Q8Avx2 {
    const VALUES: usize = 32;

    /// Eight codes an instruction widened to f32 and multiplied by the
    /// scale: the same values as the portable copy. The
    /// intrinsics are called here so that they inline into [`attend_avx2`].
    #[inline(always)]
    fn as_f32<'a>(x: &'a [Q8Avx2], scratch: &'a mut [f32]) -> &'a [f32] {
        use std::arch::x86_64::{
            _mm_loadl_epi64, _mm256_cvtepi8_epi32, _mm256_cvtepi32_ps, _mm256_mul_ps,
            _mm256_set1_ps, _mm256_storeu_ps,
        };
        for (b, o) in x.iter().zip(scratch.chunks_exact_mut(32)) {
            // SAFETY: `Q8Avx2` values exist only where the CPU has AVX2;
            // each load reads 8 of the block's 32 code bytes, each
            // store writes 8 of `o`'s 32 floats.
            unsafe {
                let d = _mm256_set1_ps(b.0.d.to_f32());
                for i in 0..4 {
                    let q = _mm_loadl_epi64(b.0.qs.as_ptr().add(8 * i).cast());
                    let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                    _mm256_storeu_ps(o.as_mut_ptr().add(8 * i), _mm256_mul_ps(v, d));
                }
            }
        }
        scratch
    }
}

/// A cache's f16, converted by F16C's instructions: made only where the
/// CPU has them (`<half::f16 as Cached>::attend_best`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(transparent)]
struct F16c(half::f16);

#[cfg(target_arch = "x86_64")]
impl Cached for F16c {
    /// Eight values an instruction. The intrinsics are called here, not in
    /// a function of their own, so that they inline into [`attend_avx2`]
    /// (which has F16C) once this does.
    #[inline(always)]
    fn as_f32<'a>(x: &'a [F16c], scratch: &'a mut [f32]) -> &'a [f32] {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
        let full = x.len() / 8 * 8;
        for (x, o) in x.chunks_exact(8).zip(scratch.chunks_exact_mut(8)) {
            // SAFETY: `F16c` values exist only where the CPU has F16C; `x`
            // holds 8 f16 (16 bytes) and `o` room for 8 f32.
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().cast::<__m128i>()));
                _mm256_storeu_ps(o.as_mut_ptr(), v);
            }
        }
        for (x, o) in x[full..].iter().zip(&mut scratch[full..]) {
            *o = x.0.to_f32();
        }
        scratch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of [`attend`]'s paths over an f32 cache.
    type Path = fn(&Dims, &Heads, &[Query<'_>], &[f32], &[f32], &mut [&mut [f32]]);

    /// The attention of `queries` (their positions seen and their heads'
    /// vectors) over one key/value head of an f32 cache row, by `path`.
    fn attend_by(
        path: Path,
        d: &Dims,
        queries: &[(std::ops::Range<usize>, &[f32])],
        keys: &[f32],
        values: &[f32],
    ) -> Vec<Vec<f32>> {
        let group = d.heads / d.kv_heads;
        let qs: Vec<Query> = (queries.iter())
            .map(|(seen, q)| Query {
                seen: seen.clone(),
                q,
            })
            .collect();
        let mut outs = vec![vec![0.0f32; group * d.hd]; queries.len()];
        let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        let at = Heads { row: 1, kv_head: 1 };
        path(d, &at, &qs, keys, values, &mut refs);
        outs
    }

    /// Every query gets the same bits through AVX2's scores as through the
    /// portable loops, and the same among other queries as alone (what
    /// makes a sequence's logits in a batch its logits alone); the result
    /// is softmax attention, checked in f64. Head widths with and without
    /// a tail after 64 or 8 lanes, and positions that end inside a block of
    /// 8 and of 64.
    #[test]
    fn a_query_gets_the_same_bits_on_every_path_alone_or_among_others() {
        let mut rng = radix_quant::testing::Rng(0x2545_F491_4F6C_DD1D);
        for hd in [64, 72, 20] {
            let d = Dims {
                n_q: 6,
                heads: 6,
                kv_heads: 2,
                hd,
                capacity: 150,
            };
            let group = d.heads / d.kv_heads;
            let mut uniform = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.unit()).collect() };
            let keys = uniform(2 * d.capacity * d.kv_heads * hd);
            let values = uniform(2 * d.capacity * d.kv_heads * hd);
            let q = uniform(6 * group * hd);
            let seen = [0..1, 0..137, 40..140, 5..6, 0..0, 17..150];
            let queries: Vec<(std::ops::Range<usize>, &[f32])> = (seen.iter().cloned())
                .zip(q.chunks_exact(group * hd))
                .collect();
            let together = attend_by(attend::<f32, Portable>, &d, &queries, &keys, &values);
            for (j, query) in queries.iter().enumerate() {
                let alone = attend_by(
                    attend::<f32, Portable>,
                    &d,
                    std::slice::from_ref(query),
                    &keys,
                    &values,
                );
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&alone[0]), bits(&together[j]), "hd {hd}, query {j}");
            }
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                // SAFETY: the CPU has AVX2, FMA and F16C, checked just above.
                let path: Path = |d, at, qs, k, v, o| unsafe { attend_avx2(d, at, qs, k, v, o) };
                let avx2 = attend_by(path, &d, &queries, &keys, &values);
                for (j, (a, p)) in avx2.iter().zip(&together).enumerate() {
                    for (i, (x, y)) in a.iter().zip(p).enumerate() {
                        assert_eq!(x.to_bits(), y.to_bits(), "hd {hd}, query {j}, value {i}");
                    }
                }
            } else {
                eprintln!("this CPU has no AVX2: its scores are not run here");
            }
            // Softmax attention in f64 (no position seen: every position).
            for (j, (seen, q)) in queries.iter().enumerate() {
                let seen = if seen.is_empty() {
                    0..d.capacity
                } else {
                    seen.clone()
                };
                let at = |p: usize| ((d.capacity + p) * d.kv_heads + 1) * hd;
                for (h, qh) in q.chunks_exact(hd).enumerate() {
                    let s: Vec<f64> = (seen.clone())
                        .map(|p| {
                            let k = &keys[at(p)..][..hd];
                            let dot: f64 = qh.iter().zip(k).map(|(a, b)| f64::from(a * b)).sum();
                            dot / (hd as f64).sqrt()
                        })
                        .collect();
                    let e = crate::testing::softmax_f64(&s);
                    for i in 0..hd {
                        let want: f64 = (seen.clone())
                            .zip(&e)
                            .map(|(p, w)| w * f64::from(values[at(p) + i]))
                            .sum();
                        let got = f64::from(together[j][h * hd + i]);
                        // Scores of |q·k| <= hd summed in f32 (relative
                        // error ~ hd·eps), then a weighted mean of values
                        // in [-1, 1): within a few hd·eps absolutely.
                        let tol = 4.0 * hd as f64 * f64::from(f32::EPSILON);
                        assert!(
                            (got - want).abs() <= tol,
                            "hd {hd}, query {j}, head {h}, value {i}: {got} against {want}"
                        );
                    }
                }
            }
        }
    }

    /// `exp_nonpositive` within 2 ulp of `e^x` over every 97th f32 from 0
    /// down to -87.3, flat below it, NaN for NaN.
    #[test]
    fn exp_nonpositive_is_within_two_ulp() {
        // From -0 down: a negative f32's bits grow with its magnitude.
        let mut x = -0.0f32;
        while x > -87.3 {
            let (got, want) = (exp_nonpositive(x), f64::from(x).exp());
            let ulp = f64::from(f32::EPSILON) * want;
            assert!(
                (f64::from(got) - want).abs() <= 2.0 * ulp,
                "e^{x}: {got} against {want}"
            );
            x = f32::from_bits(x.to_bits() + 97);
        }
        assert_eq!(exp_nonpositive(-1e4), exp_nonpositive(-87.3));
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    /// The AVX2 decoding of Q8_0 blocks gives the portable copy's values,
    /// bit for bit: random codes (all 256 bytes among them) under scales
    /// across f16's range, subnormals, zeros and negatives included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q8_avx2_decodes_as_the_portable_copy() {
        if !has_avx2() {
            eprintln!("this CPU has no AVX2: its decoding is not run here");
            return;
        }
        let mut rng = radix_quant::testing::Rng(0x9E37_79B9_7F4A_7C15);
        let blocks: Vec<BlockQ8_0> = (0..2048u32)
            .map(|i| {
                let mut b = BlockQ8_0 {
                    d: radix_quant::blocks::F16((rng.next() as u16 & 0xFBFF).to_le_bytes()),
                    qs: [0; 32],
                };
                b.qs.iter_mut().enumerate().for_each(|(j, q)| {
                    *q = if i < 8 {
                        (32 * i as usize + j) as u8
                    } else {
                        rng.next() as u8
                    }
                });
                b
            })
            .collect();
        let avx2: Vec<Q8Avx2> = blocks.iter().map(|&b| Q8Avx2(b)).collect();
        let (mut want, mut got) = (vec![0f32; 32 * 2048], vec![0f32; 32 * 2048]);
        let want = BlockQ8_0::as_f32(&blocks, &mut want).to_vec();
        let got = Q8Avx2::as_f32(&avx2, &mut got);
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "value {j}: {g} against {w}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn f16c_converts_every_f16_as_half_does() {
        if !is_x86_feature_detected!("f16c") {
            eprintln!("this CPU has no F16C: its conversion is not run here");
            return;
        }
        // Every bit pattern, and a tail of 3 after the 8-wide chunks.
        let all: Vec<F16c> = (0..=u16::MAX)
            .map(|b| F16c(half::f16::from_bits(b)))
            .collect();
        let mut got = vec![0.0f32; all.len()];
        let n = all.len() - 3;
        let (head, tail) = got.split_at_mut(n);
        let head = F16c::as_f32(&all[..n], head).to_vec();
        let tail = F16c::as_f32(&all[n..], tail).to_vec();
        for (x, g) in all.iter().zip(head.iter().chain(&tail)) {
            let want = x.0.to_f32();
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{:#06x}: {g} against {want}",
                x.0.to_bits()
            );
        }
    }
}
