//! The scalar reference: raw blocks to f32, exactly as ggml and the `gguf`
//! Python package decode them.
//!
//! Each value is computed with the same f32 operations in the same order as
//! `gguf.quants` (`d·q + m` is a multiply then an add, never a fused
//! multiply-add; K-quant sub-block scales are `d·sc` rounded to f32 first), so
//! the results are equal bit for bit (`tests/dequantize.rs` checks them against
//! the package's own output). The SIMD kernels decode the same way, so they differ
//! from this only in the order of their sums.

use crate::{Error, Format};

/// Decodes whole blocks of `format` from `bytes` into `out`, which must hold
/// exactly the blocks' elements.
pub fn dequantize(format: Format, bytes: &[u8], out: &mut [f32]) -> Result<(), Error> {
    let (block_len, block_bytes) = (format.block_len(), format.block_bytes());
    let n_blocks = out.len() / block_len;
    if !out.len().is_multiple_of(block_len) {
        return Err(Error::PartialBlock {
            format,
            cols: out.len(),
            block_len,
        });
    }
    if bytes.len() != n_blocks * block_bytes {
        return Err(Error::Length {
            what: "bytes",
            expected: n_blocks * block_bytes,
            got: bytes.len(),
        });
    }
    for (block, out) in bytes
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(block_len))
    {
        dequantize_block(format, block, out);
    }
    Ok(())
}

/// Decodes one block; `block` and `out` have the format's block sizes.
pub(crate) fn dequantize_block(format: Format, block: &[u8], out: &mut [f32]) {
    match format {
        Format::F32 => out[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]),
        Format::F16 => out[0] = f16_at(block, 0),
        Format::BF16 => out[0] = f32::from_bits(u32::from(u16_at(block, 0)) << 16),
        Format::Q8_0 => {
            let d = f16_at(block, 0);
            for (o, &q) in block32(out).iter_mut().zip(&block[2..34]) {
                *o = f32::from(q as i8) * d;
            }
        }
        Format::Q4_0 => {
            let d = f16_at(block, 0);
            let (lo, hi) = block32(out).split_at_mut(16);
            for ((lo, hi), &q) in lo.iter_mut().zip(hi).zip(&block[2..18]) {
                *lo = d * (f32::from(q & 0xF) - 8.0);
                *hi = d * (f32::from(q >> 4) - 8.0);
            }
        }
        Format::Q4_1 => {
            let (d, m) = (f16_at(block, 0), f16_at(block, 2));
            let (lo, hi) = block32(out).split_at_mut(16);
            for ((lo, hi), &q) in lo.iter_mut().zip(hi).zip(&block[4..20]) {
                *lo = d * f32::from(q & 0xF) + m;
                *hi = d * f32::from(q >> 4) + m;
            }
        }
        Format::Q5_0 => {
            let d = f16_at(block, 0);
            let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            for (j, o) in block32(out).iter_mut().enumerate() {
                *o = d * (f32::from(five_bits(&block[6..22], qh, j)) - 16.0);
            }
        }
        Format::Q5_1 => {
            let (d, m) = (f16_at(block, 0), f16_at(block, 2));
            let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
            for (j, o) in block32(out).iter_mut().enumerate() {
                *o = d * f32::from(five_bits(&block[8..24], qh, j)) + m;
            }
        }
        Format::Q4_K => {
            let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
            let (scales, qs) = (&block[4..16], &block[16..144]);
            for (s, out) in out.chunks_exact_mut(32).enumerate() {
                let (sc, m) = k_scale_min(scales, s);
                let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
                for (l, o) in out.iter_mut().enumerate() {
                    *o = d1 * f32::from(k_nibble(qs, s, l)) - m1;
                }
            }
        }
        Format::Q5_K => {
            let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
            let (scales, qh, qs) = (&block[4..16], &block[16..48], &block[48..176]);
            for (s, out) in out.chunks_exact_mut(32).enumerate() {
                let (sc, m) = k_scale_min(scales, s);
                let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
                for (l, o) in out.iter_mut().enumerate() {
                    let q = k_nibble(qs, s, l) | ((qh[l] >> s) & 1) << 4;
                    *o = d1 * f32::from(q) - m1;
                }
            }
        }
        Format::Q6_K => {
            let (ql, qh, scales) = (&block[0..128], &block[128..192], &block[192..208]);
            let d = f16_at(block, 208);
            for (e, o) in out.iter_mut().enumerate() {
                let d1 = d * f32::from(scales[e / 16] as i8);
                *o = d1 * f32::from(q6_code(ql, qh, e) as i8 - 32);
            }
        }
    }
}

/// The output of a 32-element block, as an array so the loops above need no
/// bounds checks.
fn block32(out: &mut [f32]) -> &mut [f32; 32] {
    out.try_into().expect("a 32-element block")
}

/// The little-endian u16 at byte `at`.
pub(crate) fn u16_at(block: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([block[at], block[at + 1]])
}

/// The f16 at byte `at`, widened (exactly) to f32.
#[inline(always)]
pub(crate) fn f16_at(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16_at(block, at))
}

/// `f16::from_bits(h).to_f32()`, in a few integer and float operations that
/// inline and vectorize (the `half` crate's own conversion checks the CPU
/// for F16C on every call, which showed in the kernels' profiles). The
/// magnitude's bits moved into an f32's place are the value times 2⁻¹¹²
/// (f16 subnormals becoming f32 subnormals, exactly), and the multiplication
/// by 2¹¹² is exact; infinities and NaNs get the f32's top exponent (NaNs
/// quiet, as F16C makes them).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let magnitude = f32::from_bits((h & 0x7FFF) << 13) * f32::from_bits(0x7780_0000); // 2^112
    let special = if h & 0x7C00 == 0x7C00 {
        // Infinity, or a NaN made quiet, as F16C's conversion makes it.
        let quiet = if h & 0x03FF != 0 { 0x0040_0000 } else { 0 };
        0x7F80_0000 | quiet | ((h & 0x03FF) << 13)
    } else {
        magnitude.to_bits()
    };
    f32::from_bits(special | (h & 0x8000) << 16)
}

/// Code `j` of a 5-bit block: its nibble (the 16 bytes hold elements `0..16`
/// in their low nibbles and `16..32` in their high nibbles) plus bit `j` of
/// `qh` as bit 4.
pub(crate) fn five_bits(qs: &[u8], qh: u32, j: usize) -> u8 {
    let nibble = if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 };
    nibble | (((qh >> j) & 1) as u8) << 4
}

/// The 4 low bits of element `l` of sub-block `s` in a Q4_K/Q5_K super-block:
/// each 32 bytes of `qs` hold sub-block `2i` in low nibbles, `2i + 1` in high.
pub(crate) fn k_nibble(qs: &[u8], s: usize, l: usize) -> u8 {
    let byte = qs[32 * (s / 2) + l];
    if s.is_multiple_of(2) {
        byte & 0xF
    } else {
        byte >> 4
    }
}

/// The 6-bit scale and minimum of sub-block `s` (0..8), packed in 12 bytes:
/// sub-blocks 0..4 in the low 6 bits of bytes 0..4 (scales) and 4..8 (mins);
/// sub-blocks 4..8 in the nibbles of bytes 8..12, with their top two bits in
/// the top bits of bytes 0..8 (ggml's `get_scale_min_k4`).
pub(crate) fn k_scale_min(scales: &[u8], s: usize) -> (u8, u8) {
    if s < 4 {
        (scales[s] & 63, scales[s + 4] & 63)
    } else {
        let sc = (scales[s + 4] & 0xF) | (scales[s - 4] >> 6) << 4;
        let m = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4;
        (sc, m)
    }
}

/// The 6-bit code of element `e` (0..256) of a Q6_K super-block: each half of
/// 128 elements takes 64 bytes of `ql` (elements `0..64` in low nibbles,
/// `64..128` in high) and 32 bytes of `qh` (bits `2k..2k + 2` of byte `l` are
/// the top bits of element `32k + l`).
pub(crate) fn q6_code(ql: &[u8], qh: &[u8], e: usize) -> u8 {
    let (h, r) = (e / 128, e % 128);
    let low = ql[64 * h + r % 64] >> (4 * (r / 64)) & 0xF;
    let high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    low | high << 4
}

#[cfg(test)]
mod tests {
    /// Every f16 widens as the `half` crate widens it, bit for bit (NaNs
    /// keep their payload and come out quiet).
    #[test]
    fn f16_to_f32_is_halfs() {
        for h in 0..=u16::MAX {
            let expected = half::f16::from_bits(h).to_f32();
            assert_eq!(
                super::f16_to_f32(h).to_bits(),
                expected.to_bits(),
                "{h:#06x}"
            );
        }
    }
}
