//! Activations quantized to 8 bits, for [`crate::matvec_q8_with`].
//!
//! llama.cpp multiplies Q4_x and Q8_0 weights by activations quantized to
//! 8-bit blocks, so the inner products are integer multiply-adds (AVX2
//! `vpmaddubsw`), about twice as fast per block as decoding weights to f32.
//! The activations here take the Q8_0 layout itself (an f16 scale and 32 i8
//! codes per block), so `dequantize(Format::Q8_0, ..)` shows exactly which
//! values a kernel multiplied.

use half::f16;

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
    for (x, block) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        for (q, &v) in block[2..].iter_mut().zip(x) {
            *q = (v * id).round() as i8 as u8;
        }
    }
    Ok(())
}
