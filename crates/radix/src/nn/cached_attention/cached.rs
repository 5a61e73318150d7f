//! The element types a cache holds (f32, f16, Q8_0 blocks), each read as
//! f32, and the AVX2 forms of f16 and Q8_0 that the kernel's AVX2 loops
//! inline.

use radix_quant::blocks::{BlockQ8_0, blocks};

use super::loops::attend_best_of;
#[cfg(target_arch = "x86_64")]
use super::loops::{attend_avx2, has_avx2};
use super::{Dims, Heads, Query};
use crate::custom_call::Kernel;

/// An element type a cache holds: read as f32.
pub(super) trait Cached: Copy {
    /// How many values one element holds (32 for a Q8_0 block).
    const VALUES: usize = 1;

    /// `x` as f32, written into `out` (room for `x`'s values).
    fn widen_into(x: &[Self], out: &mut [f32]);

    /// [`attend`](super::loops::attend) as this CPU runs it best for a cache of `Self`.
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
pub(super) trait Operand: Cached + Sync {
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
    fn widen_into(x: &[f32], out: &mut [f32]) {
        out.copy_from_slice(x);
    }
}

impl Cached for half::f16 {
    /// Eight lanes at a time with F16C where the CPU has it (the `half`
    /// crate asks the CPU on every call, and calls a function for every
    /// eight values).
    #[inline(always)]
    fn widen_into(x: &[half::f16], out: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        x.convert_to_f32_slice(out);
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
    fn widen_into(x: &[BlockQ8_0], out: &mut [f32]) {
        for (b, o) in x.iter().zip(out.chunks_exact_mut(32)) {
            let d = b.d.to_f32();
            for (o, &q) in o.iter_mut().zip(&b.qs) {
                *o = f32::from(q as i8) * d;
            }
        }
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
pub(super) struct Q8Avx2(BlockQ8_0);

#[cfg(target_arch = "x86_64")]
impl Cached for Q8Avx2 {
    const VALUES: usize = 32;

    /// Eight codes an instruction widened to f32 and multiplied by the
    /// scale: the same values as the portable copy. The
    /// intrinsics are called here so that they inline into [`attend_avx2`].
    #[inline(always)]
    fn widen_into(x: &[Q8Avx2], out: &mut [f32]) {
        use std::arch::x86_64::{
            _mm_loadl_epi64, _mm256_cvtepi8_epi32, _mm256_cvtepi32_ps, _mm256_mul_ps,
            _mm256_set1_ps, _mm256_storeu_ps,
        };
        for (b, o) in x.iter().zip(out.chunks_exact_mut(32)) {
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
    }
}

/// A cache's f16, converted by F16C's instructions: made only where the
/// CPU has them (`<half::f16 as Cached>::attend_best`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct F16c(half::f16);

#[cfg(target_arch = "x86_64")]
impl Cached for F16c {
    /// Eight values an instruction. The intrinsics are called here, not in
    /// a function of their own, so that they inline into [`attend_avx2`]
    /// (which has F16C) once this does.
    #[inline(always)]
    fn widen_into(x: &[F16c], out: &mut [f32]) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
        let full = x.len() / 8 * 8;
        for (x, o) in x.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
            // SAFETY: `F16c` values exist only where the CPU has F16C; `x`
            // holds 8 f16 (16 bytes) and `o` room for 8 f32.
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().cast::<__m128i>()));
                _mm256_storeu_ps(o.as_mut_ptr(), v);
            }
        }
        for (x, o) in x[full..].iter().zip(&mut out[full..]) {
            *o = x.0.to_f32();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        BlockQ8_0::widen_into(&blocks, &mut want);
        Q8Avx2::widen_into(&avx2, &mut got);
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
        F16c::widen_into(&all[..n], head);
        F16c::widen_into(&all[n..], tail);
        for (x, g) in all.iter().zip(&got) {
            let want = x.0.to_f32();
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{:#06x}: {g} against {want}",
                x.0.to_bits()
            );
        }
    }
}
