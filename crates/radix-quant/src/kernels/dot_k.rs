//! A decode step's dot of K-quant rows (Q4_K, Q5_K, Q6_K) with 8-bit
//! activations, on AVX2 (and on the AVX-512 instruction sets, which have it).
//!
//! A K-quant super-block of 256 weights holds sub-blocks of 32 (Q4_K, Q5_K)
//! or 16 (Q6_K) codes with an integer scale each, and one f16 scale `d`
//! (and Q4_K's and Q5_K's `dmin`, which the sub-blocks' integer minimums
//! multiply). The activations are Q8_0 blocks of 32, as for the other
//! formats (`q8.rs`), so each activation block meets one Q4_K or Q5_K
//! sub-block, or two of Q6_K's: per activation block the code products
//! times the sub-blocks' integer scales are one exact integer sum
//! (`vpmaddubsw`, then `vpmaddwd` by the scales), added times `d·dx` to
//! eight f32 lanes. Q4_K's and Q5_K's minimums times the activations'
//! block sums are summed apart and subtracted at the end, as in the scalar
//! reference (`scalar::dot_row_q8_k`); only the f32 sums' order differs.
//!
//! Measured on a 2-core AMD EPYC (Zen 4), the K-quant products of a Gemma 3
//! 270M Q4_K_M token (23 MB, `benches/matvec.rs`'s `token Q4_K_M
//! K-quants`) took 4.1 ms on one thread and 2.1 ms on the spinning pool
//! with the exact f32 dot they took before, 2.3 and 1.4 ms with these.

#[cfg(target_arch = "x86_64")]
pub(super) use imp::dot_rows_q8;

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn dot_rows_q8<const R: usize>(
    _: crate::Format,
    _: [&[u8]; R],
    _: &super::Q8Activations,
) -> [f32; R] {
    unreachable!("AVX2 is never detected off x86-64")
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::super::Q8Activations;
    use super::super::avx2::{f16_widen, hsum, load_u8x32};
    use crate::blocks::{BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_0, block};
    use crate::dequantize::k_scale_min;
    use crate::{Format, QK_K};

    /// Activation blocks per super-block.
    const PER_BLOCK: usize = QK_K / 32;

    /// Each of `R` rows (of one length) of K-quant super-blocks times the
    /// token `x`: each row's result the same bits as alone. Reached only
    /// through an instruction set with AVX2, FMA and F16C.
    pub(in crate::kernels) fn dot_rows_q8<const R: usize>(
        format: Format,
        rows: [&[u8]; R],
        x: &Q8Activations,
    ) -> [f32; R] {
        // SAFETY: `Isa::best` chose a kernel with AVX2, FMA and F16C only
        // where the CPU has them.
        unsafe {
            match format {
                Format::Q4_K => dot_4_5::<R, false>(rows, x),
                Format::Q5_K => dot_4_5::<R, true>(rows, x),
                Format::Q6_K => dot_6::<R>(rows, x),
                _ => unreachable!("only K-quant rows come here"),
            }
        }
    }

    /// Q4_K (`FIVE` false) or Q5_K rows: sub-block `s` of a super-block
    /// meets activation block `s`; its codes are the low nibbles of `qs`'s
    /// bytes `32·(s/2)..` for even `s`, the high nibbles for odd, and for
    /// Q5_K bit `s` of `qh`'s byte `l` on top.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_4_5<const R: usize, const FIVE: bool>(rows: [&[u8]; R], x: &Q8Activations) -> [f32; R] {
        let bytes = if FIVE {
            size_of::<BlockQ5_K>()
        } else {
            size_of::<BlockQ4_K>()
        };
        let nibble = _mm256_set1_epi8(0x0F);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut mins = [0.0f32; R];
        let xs = x
            .blocks
            .chunks_exact(PER_BLOCK)
            .zip(x.scales.chunks_exact(PER_BLOCK));
        for (b, (xb, xs)) in xs.enumerate() {
            let mut rows_at = [(0.0f32, [0i16; PER_BLOCK], &[0u8; 128], &[0u8; 32]); R];
            for r in 0..R {
                let w = &rows[r][b * bytes..][..bytes];
                let (d, dmin, scales, qs, qh) = if FIVE {
                    let w: &BlockQ5_K = block(w);
                    (w.d, w.dmin, &w.scales, &w.qs, &w.qh)
                } else {
                    let w: &BlockQ4_K = block(w);
                    (w.d, w.dmin, &w.scales, &w.qs, &[0u8; 32])
                };
                let dmin = f16_widen(dmin);
                let mut sc = [0i16; PER_BLOCK];
                for (s, (sc, &[_, sum])) in sc.iter_mut().zip(xs).enumerate() {
                    let (scale, m) = k_scale_min(scales, s);
                    *sc = i16::from(scale);
                    mins[r] += dmin * f32::from(m) * sum;
                }
                rows_at[r] = (f16_widen(d), sc, qs, qh);
            }
            for j in 0..PER_BLOCK / 2 {
                let (lo_x, hi_x) = (load_codes(&xb[2 * j]), load_codes(&xb[2 * j + 1]));
                let (lo_dx, hi_dx) = (xs[2 * j][0], xs[2 * j + 1][0]);
                for r in 0..R {
                    let (d, sc, qs, qh) = rows_at[r];
                    let q = load_u8x32(qs[32 * j..][..32].try_into().expect("32 bytes"));
                    let mut lo = _mm256_and_si256(q, nibble);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), nibble);
                    if FIVE {
                        let h = load_u8x32(qh);
                        lo = _mm256_or_si256(lo, fifth_bit(h, 2 * j));
                        hi = _mm256_or_si256(hi, fifth_bit(h, 2 * j + 1));
                    }
                    let scaled = |codes: __m256i, xq: __m256i, sc: i16| {
                        let pairs = _mm256_maddubs_epi16(codes, xq);
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(sc)))
                    };
                    let lo_i = scaled(lo, lo_x, sc[2 * j]);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * lo_dx), lo_i, acc[r]);
                    let hi_i = scaled(hi, hi_x, sc[2 * j + 1]);
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * hi_dx), hi_i, acc[r]);
                }
            }
        }
        std::array::from_fn(|r| hsum(acc[r]) - mins[r])
    }

    /// 16 in each byte whose bit `s` is set, else 0: Q5_K's fifth bits of
    /// sub-block `s`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn fifth_bit(qh: __m256i, s: usize) -> __m256i {
        let bit = _mm256_set1_epi8((1u8 << s) as i8);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        _mm256_and_si256(set, _mm256_set1_epi8(16))
    }

    /// Q6_K rows: activation block `s` (elements `32·s..`) meets sub-blocks
    /// `2s` and `2s + 1`. In half `h = s / 4` of the super-block, its low
    /// four bits are the low (`s % 4` < 2) or high nibbles of `ql`'s bytes
    /// `64·h + 32·(s % 2)..`, its top two bits bits `2·(s % 4)..` of `qh`'s
    /// bytes `32·h..`; the code is that minus 32.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_6<const R: usize>(rows: [&[u8]; R], x: &Q8Activations) -> [f32; R] {
        let bytes = size_of::<BlockQ6_K>();
        let (nibble, two) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
        let mut acc = [_mm256_setzero_ps(); R];
        let xs = x
            .blocks
            .chunks_exact(PER_BLOCK)
            .zip(x.scales.chunks_exact(PER_BLOCK));
        for (b, (xb, xs)) in xs.enumerate() {
            let w: [&BlockQ6_K; R] = std::array::from_fn(|r| block(&rows[r][b * bytes..][..bytes]));
            let d: [f32; R] = std::array::from_fn(|r| f16_widen(w[r].d));
            for s in 0..PER_BLOCK {
                let xq = load_codes(&xb[s]);
                // The codes are taken as unsigned `q` (0..64); 32 times the
                // activations' pair sums, the same for every row, takes the
                // offset back in the 16-bit sums.
                let offset = _mm256_maddubs_epi16(_mm256_set1_epi8(32), xq);
                let dx = xs[s][0];
                let (h, quarter) = (s / 4, s % 4);
                for r in 0..R {
                    let ql = load_u8x32(
                        w[r].ql[64 * h + 32 * (quarter % 2)..][..32]
                            .try_into()
                            .expect("32 bytes"),
                    );
                    let qh = load_u8x32(w[r].qh[32 * h..][..32].try_into().expect("32 bytes"));
                    let low = match quarter / 2 {
                        0 => _mm256_and_si256(ql, nibble),
                        _ => _mm256_and_si256(_mm256_srli_epi16::<4>(ql), nibble),
                    };
                    let top = _mm256_and_si256(shift_right(qh, 2 * quarter), two);
                    let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(top));
                    let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xq), offset);
                    // The first 16 codes' pair sums are the low 128 bits.
                    let scales = _mm256_set_m128i(
                        _mm_set1_epi16(i16::from(w[r].scales[2 * s + 1] as i8)),
                        _mm_set1_epi16(i16::from(w[r].scales[2 * s] as i8)),
                    );
                    let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, scales));
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d[r] * dx), sum, acc[r]);
                }
            }
        }
        std::array::from_fn(|r| hsum(acc[r]))
    }

    /// Each 16-bit lane of `v` shifted right by `n` (0, 2, 4 or 6): what
    /// is left above a byte's two bits the caller keeps does not matter.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn shift_right(v: __m256i, n: usize) -> __m256i {
        _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32))
    }

    /// The 32 codes of an activation block.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn load_codes(b: &BlockQ8_0) -> __m256i {
        load_u8x32(&b.qs)
    }
}
