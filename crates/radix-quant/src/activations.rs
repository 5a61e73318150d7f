//! Activations quantized to 8 bits, for [`crate::matvec_q8_with`].
//!
//! llama.cpp multiplies Q4_x and Q8_0 weights by activations quantized to
//! 8-bit blocks, so the inner products are integer multiply-adds (AVX2
//! `vpmaddubsw`), about twice as fast per block as decoding weights to f32.
//! The activations here take the Q8_0 layout itself (an f16 scale and 32 i8
//! codes per block), so `dequantize(Format::Q8_0, ..)` shows exactly which
//! values a kernel multiplied.

use crate::blocks::{BlockQ8_0, F16, blocks_mut};
use crate::{Error, Format};

/// Quantizes `x` (whole 32-element blocks) into Q8_0 blocks in `out`: per
/// block `d = max|x| / 127` (stored as f16) and `q = round(x / d)`, as ggml's
/// `quantize_row_q8_0`. Values must be finite; an f16 scale keeps blocks
/// below about 8·10⁶ in magnitude, and blocks whose largest magnitude is
/// below about 8·10⁻⁶ lose precision to f16 subnormal scales.
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    let n_bytes = Format::Q8_0.row_bytes(x.len())?;
    if out.len() != n_bytes {
        return Err(Error::Length {
            what: "out (bytes)",
            expected: n_bytes,
            got: out.len(),
        });
    }
    quantize_blocks(x, out);
    Ok(())
}

/// [`quantize_q8_0`] on lengths already checked; inlined into callers
/// compiled for wider vectors.
#[inline(always)]
pub(crate) fn quantize_blocks(x: &[f32], out: &mut [u8]) {
    for (x, block) in x.chunks_exact(32).zip(blocks_mut::<BlockQ8_0>(out)) {
        // Eight running maxima, not one: a single chain of `max` waits on
        // each step's latency; the maximum is the same in any order.
        let mut lanes = [0.0f32; 8];
        for x in x.chunks_exact(8) {
            for (m, v) in lanes.iter_mut().zip(x) {
                *m = m.max(v.abs());
            }
        }
        let amax = lanes.into_iter().fold(0.0f32, f32::max);
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        block.d = F16::from_f32(d);
        for (q, &v) in block.qs.iter_mut().zip(x) {
            *q = round_half_away(v * id) as i8 as u8;
        }
    }
}

/// `v.round() as i32` (halves away from zero, as C's `roundf` that ggml
/// calls) for `|v| < 2³¹`, written so the compiler vectorizes it with
/// baseline x86-64 instructions instead of calling `roundf` per element: the
/// conversion truncates, and `v - trunc(v)` is exact, so the comparison with
/// one half decides exactly as `roundf` does. Codes here are at most about
/// 127 in magnitude.
#[inline(always)]
fn round_half_away(v: f32) -> i32 {
    let t = v as i32;
    let r = v - t as f32;
    t + i32::from(r >= 0.5) - i32::from(r <= -0.5)
}

#[cfg(test)]
mod tests {
    /// Floats across the range activations take (|v| ≤ 127.5, and a margin
    /// past it) round as `f32::round` does: every half and its neighbours,
    /// and a stride through all the bit patterns between.
    #[test]
    fn round_half_away_is_round() {
        let same = |v: f32| {
            assert_eq!(super::round_half_away(v), v.round() as i32, "{v}");
            assert_eq!(super::round_half_away(-v), (-v).round() as i32, "{}", -v);
        };
        for half in 0..600 {
            let v = half as f32 + 0.5;
            [v.next_down(), v, v.next_up()].into_iter().for_each(same);
        }
        for bits in (0..300.0f32.to_bits()).step_by(997) {
            same(f32::from_bits(bits));
        }
        for v in [0.5, 1.5, 0.49999997, 126.5, 127.5, 0.0] {
            same(v);
        }
    }
}
