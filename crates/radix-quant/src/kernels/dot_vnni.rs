//! A decode step's dot with AVX-512 VNNI: one row of Q8_0, Q4_0, Q4_1,
//! Q5_0 or Q5_1 blocks times 8-bit activations, two Q8_0 blocks or four
//! 4- or 5-bit blocks at a time.
//!
//! The AVX2 dot (`avx2.rs`) spends most of a block on its scales: an f16
//! converted, multiplied and broadcast, one block at a time. Here the scales
//! of 16 blocks come at once (`block_scales`) with one conversion,
//! a pair of Q8_0 blocks' codes meet the activations in one `vpdpbusd`
//! (a quad of 4-bit blocks' in two), and a permute hands each its scales.
//! Measured on a 2-core Xeon (family 6 model 167), a
//! SmolLM2 decode spent 40 % of its samples in the AVX2 Q4_1 dot; on one
//! thread (`cargo bench -p radix-quant --bench matvec`) a 1536×576 Q4_1
//! product took 72.8 µs with it and 50.0 µs here, Q8_0 63.5 and 56.0 µs,
//! and all of one SmolLM2 token's matrices 14.4 and 11.5 ms.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones. The activations are
//! the signed side. Q4_1's and Q5_1's codes are unsigned already; Q4_0's and
//! Q5_0's (`q - 8`, `q - 16`) are taken as the unsigned `q`, and the offset
//! times the activations' block sum is subtracted with the scales, as
//! Q4_1's minimum is added. Q8_0's signed codes `w` go in as the unsigned
//! `w + 128` (one `xor`), and each lane's sum starts from `-128` times its
//! four activations ([`pair_offsets`], once per token), so the integer
//! sums are exactly `Σ w·x` without the sign trick of the AVX2 dot (an
//! `abs`, a mask and a masked negation per pair). On a 2-core Zen 4 (which
//! runs 512-bit operations as two 256-bit halves) the Q8_0 products on one
//! thread went from 23.7 to 21.0 µs at 576×576 and from 1.96 to 1.79 ms for
//! SmolLM2's 49152×576 head with this and the plain order below.
//!
//! The activations' codes are rearranged once per token ([`pair_codes`]) to
//! the order the weights' blocks decode into: for Q8_0, each block's 32
//! codes as they are, so that a pair's codes are two plain 32-byte loads
//! (four 16-byte loads and three inserts in the nibbles' order made the
//! VNNI Q8_0 dot slower than AVX2's on Zen 4); for 4- and 5-bit blocks,
//! four blocks' low nibbles' elements in one 64-byte vector and their high
//! nibbles' in another, so that a quad's codes are one vector of bytes
//! masked for the low nibbles and shifted for the high (two blocks a
//! vector wasted half of each 16-byte load's insert and shift).
//!
//! Rows split at load (`split.rs`) take the same path with their codes
//! side by side (a Q8_0 pair's or a 4- or 5-bit quad's in one 64-byte
//! load; Q8_0's already unsigned, no `xor`; a Q5_0 quad's fifth bits in
//! one 16-byte load) and their scales side by side (one masked load
//! instead of the gather or the windows).

use super::Q8Activations;
use super::q8::ROW_GROUP;
use crate::Format;
use crate::blocks::BlockQ8_0;

/// Whether rows of `format` (one of `q8.rs`'s `Q8_FORMATS`) take this dot:
/// the blocks of 32 (the K-quants' super-blocks take `dot_k.rs`'s).
pub(super) fn takes(format: Format) -> bool {
    !super::q8::is_k_quant(format)
}

/// The bytes [`pair_codes`] writes for `n_blocks` blocks of activations
/// for `format`'s rows: 64 a pair of blocks for Q8_0, 128 a quad of
/// blocks for the 4- and 5-bit formats, a last pair or quad filled with
/// zeros.
pub(super) fn pair_codes_len(format: Format, n_blocks: usize) -> usize {
    match format {
        Format::Q8_0 => n_blocks.div_ceil(2) * 64,
        _ => n_blocks.div_ceil(4) * 128,
    }
}

/// The codes of Q8_0 `blocks` in the order `format`'s weights decode
/// into. Q8_0 weights take a pair of blocks at a time: `x[2k]`, `x[2k+1]`
/// as they are. The 4- and 5-bit formats take a quad: for blocks `4k` to
/// `4k + 3`, 128 bytes `x[4k][0..16]` … `x[4k+3][0..16]` (the low
/// nibbles' elements), then `x[4k][16..32]` … `x[4k+3][16..32]` (the
/// high nibbles'). Zeros stand in for missing blocks. `out` has
/// [`pair_codes_len`] bytes.
pub(super) fn pair_codes(format: Format, blocks: &[BlockQ8_0], out: &mut [u8]) {
    out.fill(0);
    for (b, block) in blocks.iter().enumerate() {
        if format == Format::Q8_0 {
            out[b * 32..][..32].copy_from_slice(&block.qs);
            continue;
        }
        let quad = &mut out[b / 4 * 128..][..128];
        let at = (b % 4) * 16;
        quad[at..at + 16].copy_from_slice(&block.qs[..16]);
        quad[64 + at..64 + at + 16].copy_from_slice(&block.qs[16..]);
    }
}

/// For each 4-byte lane of `pairs` ([`pair_codes`] of Q8_0 weights), `-128`
/// times the sum of its four codes: where a Q8_0 dot's lane starts, so that
/// adding `(w + 128)·x` leaves `Σ w·x`. Empty for other formats, whose codes
/// are unsigned already.
pub(super) fn pair_offsets(format: Format, pairs: &[u8]) -> Vec<i32> {
    if format != Format::Q8_0 {
        return vec![];
    }
    let lane = |l: &[u8]| -128 * l.iter().map(|&q| i32::from(q as i8)).sum::<i32>();
    pairs.chunks_exact(4).map(lane).collect()
}

#[cfg(target_arch = "x86_64")]
pub(super) use imp::{dot_laid_out, dot_row_group_q8, dot_row_q8};

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn dot_row_q8(_: crate::Format, _: &[u8], _: &Q8Activations) -> f32 {
    unreachable!("AVX-512 is never detected off x86-64")
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn dot_row_group_q8(
    _: crate::Format,
    _: [&[u8]; ROW_GROUP],
    _: &Q8Activations,
) -> [f32; ROW_GROUP] {
    unreachable!("AVX-512 is never detected off x86-64")
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn dot_laid_out<const R: usize, const T: usize>(
    _: (crate::Format, super::RowLayout),
    _: [&[u8]; R],
    _: [&Q8Activations; T],
) -> [[f32; T]; R] {
    unreachable!("AVX-512 is never detected off x86-64")
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use std::mem::offset_of;

    use super::{Q8Activations, ROW_GROUP};
    use crate::Format;
    use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
    use crate::kernels::RowLayout;

    // `dot` gathers each block's first four bytes as its scale `d` and, for
    // Q4_1 and Q5_1, its minimum `m` right after.
    const _: () = assert!(offset_of!(BlockQ8_0, d) == 0 && offset_of!(BlockQ4_0, d) == 0);
    const _: () = assert!(offset_of!(BlockQ5_0, d) == 0);
    const _: () = assert!(offset_of!(BlockQ4_1, d) == 0 && offset_of!(BlockQ4_1, m) == 2);
    const _: () = assert!(offset_of!(BlockQ5_1, d) == 0 && offset_of!(BlockQ5_1, m) == 2);

    // The formats as const parameters of `dot`.
    const Q8_0: u8 = 0;
    const Q4_0: u8 = 1;
    const Q4_1: u8 = 2;
    const Q5_0: u8 = 3;
    const Q5_1: u8 = 4;
    /// Q8_0 rows split at load (`split.rs`): codes, then scales.
    const Q8_0_SPLIT: u8 = 5;
    /// Q4_1 rows split at load: nibbles, then scales, then minimums.
    const Q4_1_SPLIT: u8 = 6;
    /// Q5_0 rows split at load: nibbles, then fifth bits, then scales.
    const Q5_0_SPLIT: u8 = 7;
    /// Q4_0 rows split at load: nibbles, then scales.
    const Q4_0_SPLIT: u8 = 8;

    /// Whether `F` is Q8_0, as files store it or split.
    const fn is_q8(f: u8) -> bool {
        f == Q8_0 || f == Q8_0_SPLIT
    }

    /// A row of `format` blocks times `x`, whose `pairs` hold its codes in
    /// pair order. Reached only through `Isa(Kind::Avx512Vnni)`.
    pub(in crate::kernels) fn dot_row_q8(format: Format, row: &[u8], x: &Q8Activations) -> f32 {
        dot_laid_out::<1, 1>((format, RowLayout::Blocks), [row], [x])[0][0]
    }

    /// Each of [`ROW_GROUP`] rows (of one length) times
    /// one token `x`: for each row the same sums, in the same order, as
    /// [`dot_row_q8`] computes for it.
    pub(in crate::kernels) fn dot_row_group_q8(
        format: Format,
        rows: [&[u8]; ROW_GROUP],
        x: &Q8Activations,
    ) -> [f32; ROW_GROUP] {
        dot_laid_out::<{ ROW_GROUP }, 1>((format, RowLayout::Blocks), rows, [x]).map(|[y]| y)
    }

    /// Each of `rows` of `format` in `layout` times each token of `xs`:
    /// split rows (Q8_0, Q4_0, Q4_1 or Q5_0, `split.rs`) get the same sums, in
    /// the same order, as their blocks.
    pub(in crate::kernels) fn dot_laid_out<const R: usize, const T: usize>(
        (format, layout): (Format, RowLayout),
        rows: [&[u8]; R],
        xs: [&Q8Activations; T],
    ) -> [[f32; T]; R] {
        // SAFETY: `Isa::best` chose this kernel only where the CPU has
        // AVX-512 F/BW/VL and VNNI (and AVX2, FMA and F16C).
        unsafe {
            if layout == RowLayout::Split {
                return match format {
                    Format::Q8_0 => dot::<Q8_0_SPLIT, R, T>(rows, xs),
                    Format::Q4_0 => dot::<Q4_0_SPLIT, R, T>(rows, xs),
                    Format::Q4_1 => dot::<Q4_1_SPLIT, R, T>(rows, xs),
                    Format::Q5_0 => dot::<Q5_0_SPLIT, R, T>(rows, xs),
                    _ => unreachable!(
                        "RowLayout::check lets only Q8_0, Q4_0, Q4_1 and Q5_0 rows split"
                    ),
                };
            }
            match format {
                Format::Q8_0 => dot::<Q8_0, R, T>(rows, xs),
                Format::Q4_0 => dot::<Q4_0, R, T>(rows, xs),
                Format::Q4_1 => dot::<Q4_1, R, T>(rows, xs),
                Format::Q5_0 => dot::<Q5_0, R, T>(rows, xs),
                Format::Q5_1 => dot::<Q5_1, R, T>(rows, xs),
                _ => unreachable!("matvec_q8_with sends only its Q8_FORMATS here"),
            }
        }
    }

    const fn block_bytes(f: u8) -> usize {
        match f {
            Q8_0 | Q8_0_SPLIT => size_of::<BlockQ8_0>(),
            Q4_0 | Q4_0_SPLIT => size_of::<BlockQ4_0>(),
            Q4_1 | Q4_1_SPLIT => size_of::<BlockQ4_1>(),
            Q5_0 | Q5_0_SPLIT => size_of::<BlockQ5_0>(),
            _ => size_of::<BlockQ5_1>(),
        }
    }

    /// For each row of `rows` (all of one length) and each token `x` of
    /// `xs`: Σ over blocks of `d·dx·Σ codes·x̃ + c·dx·Σ x̃`, where `c` is the
    /// minimum (Q4_1, Q5_1), minus the offset times `d` (Q4_0, Q5_0), or
    /// nothing (Q8_0). Each row's scales and codes are read and decoded once
    /// for all `T` tokens, and each token's activations once for all `R`
    /// rows; each (row, token) pair's floating-point operations are the
    /// same, in the same order, whatever `R` and `T` are, so a token gets
    /// the same bits in a group as alone, and so does a row.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn dot<const F: u8, const R: usize, const T: usize>(
        rows: [&[u8]; R],
        xs: [&Q8Activations; T],
    ) -> [[f32; T]; R] {
        // SAFETY: every pointer stays inside its row (whole blocks: the
        // scales' loads are masked to the `n` blocks left, and the missing
        // blocks of a last pair or quad are never read), each
        // `x.scales` (`n` pairs of f32 from `g`, masked), `x.pairs` (64
        // bytes a pair, 128 a quad) and, for Q8_0, `x.offsets` (16 lanes a
        // pair).
        unsafe {
            let bb = block_bytes(F);
            let n_blocks = rows[0].len() / bb;
            for row in rows {
                debug_assert_eq!(row.len(), rows[0].len());
            }
            for x in xs {
                debug_assert_eq!(x.scales.len(), n_blocks);
                // Q4_0 stands for the formats read in quads.
                let order = if is_q8(F) { Format::Q8_0 } else { Format::Q4_0 };
                debug_assert!(x.pairs.len() >= super::pair_codes_len(order, n_blocks));
                debug_assert!(!is_q8(F) || x.offsets.len() * 4 >= x.pairs.len());
            }
            let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
            // A pair of Q8_0 blocks' products come out as 8 lanes of the
            // first and 8 of the second.
            let pair_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
            let zeros = || [[_mm512_setzero_ps(); T]; R];
            let (mut acc, mut acc_c) = (zeros(), zeros());
            for g in (0..n_blocks).step_by(16) {
                let n = (n_blocks - g).min(16);
                let (lo_n, hi_n) = ((2 * n).min(16), (2 * n).saturating_sub(16));
                // The activations' [dx, sum] pairs of these blocks, split
                // into the dx of each and the sum of each.
                let mut dx = [_mm512_setzero_ps(); T];
                let mut sum = [_mm512_setzero_ps(); T];
                for t in 0..T {
                    let at = xs[t].scales.as_ptr().add(g).cast::<f32>();
                    let a = _mm512_maskz_loadu_ps(((1u32 << lo_n) - 1) as u16, at);
                    let b = _mm512_maskz_loadu_ps(((1u32 << hi_n) - 1) as u16, at.add(16));
                    dx[t] = _mm512_permutex2var_ps(a, even, b);
                    sum[t] = _mm512_permutex2var_ps(a, odd, b);
                }
                let mut scale = zeros();
                for r in 0..R {
                    let (d, m) = match F {
                        // Split rows: the scales after all the codes (and
                        // Q4_1's minimums after the scales).
                        Q8_0_SPLIT => (
                            split_scales(rows[r].as_ptr().add(n_blocks * 32 + g * 2), n),
                            _mm512_setzero_ps(),
                        ),
                        Q4_1_SPLIT => {
                            let scales = rows[r].as_ptr().add(n_blocks * 16);
                            (
                                split_scales(scales.add(g * 2), n),
                                split_scales(scales.add(n_blocks * 2 + g * 2), n),
                            )
                        }
                        Q5_0_SPLIT => (
                            split_scales(rows[r].as_ptr().add(n_blocks * 20 + g * 2), n),
                            _mm512_setzero_ps(),
                        ),
                        Q4_0_SPLIT => (
                            split_scales(rows[r].as_ptr().add(n_blocks * 16 + g * 2), n),
                            _mm512_setzero_ps(),
                        ),
                        _ => block_scales::<F>(rows[r].as_ptr().add(g * bb), n),
                    };
                    // What multiplies each block's activation sum: the
                    // minimum, or the offset times d.
                    let c = match F {
                        Q4_1 | Q4_1_SPLIT | Q5_1 => Some(m),
                        Q4_0 | Q4_0_SPLIT => Some(_mm512_mul_ps(d, _mm512_set1_ps(-8.0))),
                        Q5_0 | Q5_0_SPLIT => Some(_mm512_mul_ps(d, _mm512_set1_ps(-16.0))),
                        _ => None,
                    };
                    for t in 0..T {
                        scale[r][t] = _mm512_mul_ps(d, dx[t]);
                        if let Some(c) = c {
                            acc_c[r][t] = _mm512_fmadd_ps(c, sum[t], acc_c[r][t]);
                        }
                    }
                }
                if is_q8(F) {
                    let mut lanes = pair_lanes;
                    for k in (0..n).step_by(2) {
                        let xv: [__m512i; T] = std::array::from_fn(|t| {
                            _mm512_loadu_si512(xs[t].pairs.as_ptr().add((g + k) * 32).cast())
                        });
                        // Where each lane's sum starts: Q8_0's offsets.
                        let start: [__m512i; T] = std::array::from_fn(|t| {
                            _mm512_loadu_si512(xs[t].offsets.as_ptr().add((g + k) * 8).cast())
                        });
                        for r in 0..R {
                            let w = if F == Q8_0_SPLIT {
                                split_codes(rows[r].as_ptr().add((g + k) * 32), k + 1 < n)
                            } else {
                                let first = rows[r].as_ptr().add((g + k) * bb);
                                q8_codes(first, (k + 1 < n).then(|| first.add(bb)))
                            };
                            for t in 0..T {
                                let dot = q8_products(start[t], w, xv[t]);
                                let s = _mm512_permutexvar_ps(lanes, scale[r][t]);
                                acc[r][t] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot), acc[r][t]);
                            }
                        }
                        lanes = _mm512_add_epi32(lanes, _mm512_set1_epi32(2));
                    }
                } else {
                    // A quad's products come out as 4 lanes of each of its
                    // blocks in turn.
                    let mut lanes =
                        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
                    for k in (0..n).step_by(4) {
                        let at =
                            |t: usize, half: usize| xs[t].pairs.as_ptr().add((g + k) * 32 + half);
                        let xlo: [__m512i; T] =
                            std::array::from_fn(|t| _mm512_loadu_si512(at(t, 0).cast()));
                        let xhi: [__m512i; T] =
                            std::array::from_fn(|t| _mm512_loadu_si512(at(t, 64).cast()));
                        for r in 0..R {
                            let count = (n - k).min(4);
                            let (lo, hi) = match F {
                                Q4_0_SPLIT | Q4_1_SPLIT => {
                                    split_nibbles(rows[r].as_ptr().add((g + k) * 16), count)
                                }
                                Q5_0_SPLIT => {
                                    let row = rows[r].as_ptr();
                                    let (lo, hi) = split_nibbles(row.add((g + k) * 16), count);
                                    let qh = row.add(n_blocks * 16 + (g + k) * 4);
                                    split_fifth_bits((lo, hi), qh, count)
                                }
                                _ => quad_codes::<F>(rows[r].as_ptr().add((g + k) * bb), count),
                            };
                            for t in 0..T {
                                let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo[t]);
                                let dot = _mm512_dpbusd_epi32(dot, hi, xhi[t]);
                                let s = _mm512_permutexvar_ps(lanes, scale[r][t]);
                                acc[r][t] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot), acc[r][t]);
                            }
                        }
                        lanes = _mm512_add_epi32(lanes, _mm512_set1_epi32(4));
                    }
                }
            }
            let mut out = [[0.0; T]; R];
            for r in 0..R {
                for t in 0..T {
                    out[r][t] = _mm512_reduce_add_ps(acc[r][t]) + _mm512_reduce_add_ps(acc_c[r][t]);
                }
            }
            out
        }
    }

    /// The scales `d` and, for Q4_1 and Q5_1, the minimums `m` of the `n`
    /// (at most 16) blocks of format `F` from `at`, as f32; zeros past `n`.
    ///
    /// Each block's `d` (and `m`) are its first 2 (4) bytes. A gather of
    /// those 16 words was where a third of the dot's samples fell on Zen 4
    /// (576×576 Q4_1 in L2); here, but for Q8_0, a few blocks at a time
    /// come from two masked 64-byte loads and one word permute (576×576
    /// Q4_1: 8.7 → 9.4 GiB/s).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn block_scales<const F: u8>(at: *const u8, n: usize) -> (__m512, __m512) {
        // SAFETY: `n` whole blocks of format `F` start at `at`; the loads
        // read none of the bytes past them.
        unsafe {
            let bb = block_bytes(F);
            if F == Q8_0 {
                // 34-byte blocks: four windows of 128 bytes for 16 blocks,
                // slower than one gather (576×1536: 17.4 against 19.0
                // GiB/s on Zen 4).
                let offsets = _mm512_mullo_epi32(
                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                    _mm512_set1_epi32(bb as i32),
                );
                let mask = ((1u32 << n) - 1) as u16;
                let raw = _mm512_mask_i32gather_epi32::<1>(
                    _mm512_setzero_si512(),
                    mask,
                    offsets,
                    at.cast(),
                );
                return (
                    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw)),
                    _mm512_setzero_ps(),
                );
            }
            let head = if matches!(F, Q4_1 | Q5_1) { 4 } else { 2 };
            // Blocks whose scales lie in 128 bytes from the first's start.
            let per = (128 - head) / bb + 1;
            // Word i of the result is block i's d, word 16 + i its m: as
            // word indices from block 0's start.
            let lane = _mm512_set_epi16(
                31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11,
                10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
            );
            let block = _mm512_and_si512(lane, _mm512_set1_epi16(15));
            let is_m = _mm512_srli_epi16::<4>(lane);
            let words = _mm512_add_epi16(
                _mm512_mullo_epi16(block, _mm512_set1_epi16((bb / 2) as i16)),
                is_m,
            );
            let mut res = _mm512_setzero_si512();
            let mut first = 0;
            while first < n {
                let last = (first + per).min(n);
                let words_left = (n - first) * bb / 2;
                let mask = |w: usize| if w >= 32 { u32::MAX } else { (1u32 << w) - 1 };
                let p = at.add(first * bb).cast::<i16>();
                let lo = _mm512_maskz_loadu_epi16(mask(words_left), p);
                let hi = _mm512_maskz_loadu_epi16(mask(words_left.saturating_sub(32)), p.add(32));
                let idx = _mm512_sub_epi16(words, _mm512_set1_epi16((first * bb / 2) as i16));
                let these = (mask(last) & !mask(first)) & 0xFFFF;
                let these = these | these << 16;
                res = _mm512_mask_mov_epi16(res, these, _mm512_permutex2var_epi16(lo, idx, hi));
                first = last;
            }
            let d = _mm512_cvtph_ps(_mm512_castsi512_si256(res));
            let m = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(res));
            (d, m)
        }
    }

    /// The codes `w` of a pair of Q8_0 blocks (`second` absent: zeros), the
    /// first block's 32 then the second's, as the unsigned `w + 128` that
    /// `vpdpbusd` takes (one `xor`), whose extra `128·x` the lanes' start
    /// takes away ([`q8_products`]).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q8_codes(first: *const u8, second: Option<*const u8>) -> __m512i {
        // SAFETY: `first` and `second` are whole Q8_0 blocks.
        unsafe {
            let qs = offset_of!(BlockQ8_0, qs);
            let lo = _mm512_castsi256_si512(_mm256_loadu_si256(first.add(qs).cast()));
            let w = match second {
                Some(s) => _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(s.add(qs).cast())),
                None => _mm512_zextsi256_si512(_mm256_loadu_si256(first.add(qs).cast())),
            };
            _mm512_xor_si512(w, _mm512_set1_epi8(i8::MIN))
        }
    }

    /// The unsigned codes of a pair of split Q8_0 blocks from `at` (their
    /// first code), stored as `w + 128` already: one 64-byte load, or 32
    /// bytes and zeros where the pair is only its first block (`both`
    /// false). The zeros meet zero activations, as [`q8_codes`]'s do.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn split_codes(at: *const u8, both: bool) -> __m512i {
        // SAFETY: `at` starts the codes of one block (`both`: two) of a
        // split row; the masked load reads only the first block's.
        unsafe {
            match both {
                true => _mm512_loadu_si512(at.cast()),
                false => _mm512_maskz_loadu_epi8(u64::from(u32::MAX), at.cast()),
            }
        }
    }

    /// The codes of `count` (1 to 4) blocks of a split Q4_1 row from `at`
    /// (their first nibbles' byte), as [`quad_codes`] gives a quad's: one
    /// 64-byte load, masked to the blocks there are.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn split_nibbles(at: *const u8, count: usize) -> (__m512i, __m512i) {
        // SAFETY: `count` blocks' 16 bytes of nibbles start at `at`; the
        // load is masked to them.
        unsafe {
            let q = match count {
                4 => _mm512_loadu_si512(at.cast()),
                _ => _mm512_maskz_loadu_epi8((1u64 << (16 * count)) - 1, at.cast()),
            };
            nibbles(q)
        }
    }

    /// A split Q5_0 quad's codes: its nibbles `lo` and `hi`
    /// ([`split_nibbles`]) with the fifth bits of `count` blocks from `qh`
    /// (4 bytes a block, side by side) added, as [`quad_codes`] adds them:
    /// one 16-byte load and a byte shuffle instead of a load per block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn split_fifth_bits(
        (lo, hi): (__m512i, __m512i),
        qh: *const u8,
        count: usize,
    ) -> (__m512i, __m512i) {
        // SAFETY: `count` blocks' 4 bytes of fifth bits start at `qh`; the
        // load is masked to them.
        unsafe {
            let h = _mm_maskz_loadu_epi8(((1u32 << (4 * count)) - 1) as u16, qh.cast());
            // Bits 0..16 of each block's u32 (its low nibbles' codes) in
            // the low 8 bytes, bits 16..32 (its high nibbles') in the high.
            let order = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
            let h = _mm_shuffle_epi8(h, order);
            let bits = (
                _mm_cvtsi128_si64(h) as u64,
                _mm_extract_epi64::<1>(h) as u64,
            );
            with_fifth_bits((lo, hi), bits)
        }
    }

    /// The `n` (at most 16) f16 scales (or minimums) of a split row from
    /// `at`, as f32; zeros past `n`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn split_scales(at: *const u8, n: usize) -> __m512 {
        // SAFETY: `n` scales of 2 bytes start at `at`; the load is masked
        // to them.
        unsafe {
            let mask = ((1u32 << n) - 1) as u16;
            _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, at.cast()))
        }
    }

    /// The codes of `count` (1 to 4) consecutive blocks of 4- or 5-bit
    /// format `F` from `first`, as unsigned bytes in quad order
    /// ([`super::pair_codes`]): the low nibbles' codes of each block in
    /// turn, then the high nibbles'. Zeros stand in for missing blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn quad_codes<const F: u8>(first: *const u8, count: usize) -> (__m512i, __m512i) {
        // SAFETY: `count` whole blocks of format `F` start at `first`.
        unsafe {
            let bb = block_bytes(F);
            // The 16 bytes of packed nibbles, and the 32 high bits of Q5_*.
            let (qs_at, qh_at) = match F {
                Q4_0 => (offset_of!(BlockQ4_0, qs), None),
                Q4_1 => (offset_of!(BlockQ4_1, qs), None),
                Q5_0 => (offset_of!(BlockQ5_0, qs), Some(offset_of!(BlockQ5_0, qh))),
                _ => (offset_of!(BlockQ5_1, qs), Some(offset_of!(BlockQ5_1, qh))),
            };
            let qs = |j: usize| _mm_loadu_si128(first.add(j * bb + qs_at).cast());
            let q = if count == 4 {
                let q = _mm512_castsi128_si512(qs(0));
                let q = _mm512_inserti32x4::<1>(q, qs(1));
                let q = _mm512_inserti32x4::<2>(q, qs(2));
                _mm512_inserti32x4::<3>(q, qs(3))
            } else {
                let mut q = [_mm_setzero_si128(); 4];
                for (j, q) in q.iter_mut().enumerate().take(count) {
                    *q = qs(j);
                }
                let q01 = _mm256_set_m128i(q[1], q[0]);
                let q23 = _mm256_set_m128i(q[3], q[2]);
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q01), q23)
            };
            let codes = nibbles(q);
            let Some(at) = qh_at else {
                return codes;
            };
            // Bit i of a block's qh is the fifth bit of its code i: the
            // low nibbles take bits 0..16, the high 16..32.
            let (mut lo_bits, mut hi_bits) = (0u64, 0u64);
            for j in 0..count {
                let h = u64::from(first.add(j * bb + at).cast::<u32>().read_unaligned());
                lo_bits |= (h & 0xFFFF) << (16 * j);
                hi_bits |= (h >> 16) << (16 * j);
            }
            with_fifth_bits(codes, (lo_bits, hi_bits))
        }
    }

    /// A quad's 64 bytes of packed nibbles `q` as its codes in quad order:
    /// the low nibbles, then the high ones.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn nibbles(q: __m512i) -> (__m512i, __m512i) {
        let nibble = _mm512_set1_epi8(0x0F);
        let lo = _mm512_and_si512(q, nibble);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), nibble);
        (lo, hi)
    }

    /// A quad's 4-bit codes `lo` and `hi` ([`nibbles`]) with 16 added to
    /// the codes whose bit is set in `lo_bits` and `hi_bits` (bit `16j +
    /// i`: block `j`'s code `i`, or `16 + i` for `hi`): Q5_0's and Q5_1's
    /// fifth bits.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn with_fifth_bits(
        (lo, hi): (__m512i, __m512i),
        (lo_bits, hi_bits): (u64, u64),
    ) -> (__m512i, __m512i) {
        let five = _mm512_set1_epi8(0x10);
        (
            _mm512_mask_add_epi8(lo, lo_bits, lo, five),
            _mm512_mask_add_epi8(hi, hi_bits, hi, five),
        )
    }

    /// The integer products of a pair of Q8_0 blocks' unsigned codes `u =
    /// w + 128` ([`q8_codes`], [`split_codes`]) with their activations
    /// `xv`, 16 lanes of i32 added to `start` (the lanes'
    /// [`super::pair_offsets`], `-128·x`): `Σ w·x` in each lane.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn q8_products(start: __m512i, u: __m512i, xv: __m512i) -> __m512i {
        _mm512_dpbusd_epi32(start, u, xv)
    }
}
