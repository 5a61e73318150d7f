//! The kernel's loops: one key/value head of one cache row for a block
//! of queries ([`attend`]), compiled for AVX2 where the CPU has it.

use super::cached::Cached;
use super::{Dims, Heads, Query};

/// [`attend`] compiled for AVX2, FMA and F16C where the CPU has them (its
/// loops then run eight lanes at a time), else as portable code.
pub(super) fn attend_best_of<T: Cached>(
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
pub(super) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn attend_avx2<T: Cached>(
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
pub(super) fn attend<T: Cached, D: Dots>(
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
    for p0 in (0..n).step_by(BLOCK) {
        let m = BLOCK.min(n - p0);
        widen_block(keys, p0..p0 + m, layout, hd, &mut block);
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
    for p0 in (0..n).step_by(BLOCK) {
        let m = BLOCK.min(n - p0);
        widen_block(values, p0..p0 + m, layout, hd, &mut block);
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
pub(super) fn softmax(s: &mut [f32]) {
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
pub(super) fn exp_nonpositive(x: f32) -> f32 {
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
pub(super) const BLOCK: usize = 64;

/// The heads `head..head + width` of the positions `positions` of `cache`
/// (`position` elements each) as f32, `hd` values each, one after another
/// in `block`. The prefetch reaches past the block's end into the next.
#[inline(always)]
pub(super) fn widen_block<T: Cached>(
    cache: &[T],
    positions: std::ops::Range<usize>,
    (position, head, width): (usize, usize, usize),
    hd: usize,
    block: &mut [f32],
) {
    for (i, p) in positions.enumerate() {
        prefetch(cache, (p + AHEAD) * position + head, width);
        T::widen_into(
            &cache[p * position + head..][..width],
            &mut block[i * hd..][..hd],
        );
    }
}

/// `y += Σ_p w[p] · x[p]` (`x` holds `w.len()` vectors of `y.len()`), each
/// element summed as `y = w[p]·x[p] + y` over `p` in order; 64 elements at
/// a time, held in registers over every position.
#[inline(always)]
pub(super) fn weighted_sum(w: &[f32], x: &[f32], y: &mut [f32]) {
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
pub(super) const AHEAD: usize = 16;

/// Asks the CPU to bring `x[at..at + n]` into its caches (a hint: nothing
/// is read, and nothing past `x`'s end is asked for).
#[inline(always)]
pub(super) fn prefetch<T>(x: &[T], at: usize, n: usize) {
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
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
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
pub(super) fn axpy(w: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = w.mul_add(*x, *y);
    }
}

/// How [`attend`] computes a query head's scores over a block of keys.
pub(super) trait Dots {
    /// `out[p] = dot(q, keys[p]) · scale` for the `out.len()` keys of
    /// `keys` (each `q.len()` wide), with [`dot`]'s bits.
    fn scores(q: &[f32], keys: &[f32], scale: f32, out: &mut [f32]);
}

/// [`dot`] key by key.
pub(super) struct Portable;

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
pub(super) struct Avx2;

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
}
