//! The scalar reference: raw blocks to f32, exactly as ggml and the `gguf`
//! Python package decode them.
//!
//! Each value is computed with the same f32 operations in the same order as
//! `gguf.quants` (`d·q + m` is a multiply then an add, never a fused
//! multiply-add; K-quant sub-block scales are `d·sc` rounded to f32 first), so
//! the results are equal bit for bit (`tests/dequantize.rs` checks them against
//! the package's own output). The SIMD kernels decode the same way, so they differ
//! from this only in the order of their sums.

use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0, F16,
    block,
};
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

/// Decodes one block; `bytes` and `out` have the format's block sizes.
pub(crate) fn dequantize_block(format: Format, bytes: &[u8], out: &mut [f32]) {
    match format {
        Format::F32 => out[0] = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        Format::F16 => out[0] = F16([bytes[0], bytes[1]]).to_f32(),
        Format::BF16 => out[0] = f32::from_bits(u32::from_le_bytes([0, 0, bytes[0], bytes[1]])),
        Format::Q8_0 => {
            let b: &BlockQ8_0 = block(bytes);
            let d = b.d.to_f32();
            for (o, &q) in block32(out).iter_mut().zip(&b.qs) {
                *o = f32::from(q as i8) * d;
            }
        }
        Format::Q4_0 => {
            let b: &BlockQ4_0 = block(bytes);
            let d = b.d.to_f32();
            let (lo, hi) = block32(out).split_at_mut(16);
            for ((lo, hi), &q) in lo.iter_mut().zip(hi).zip(&b.qs) {
                *lo = d * (f32::from(q & 0xF) - 8.0);
                *hi = d * (f32::from(q >> 4) - 8.0);
            }
        }
        Format::Q4_1 => {
            let b: &BlockQ4_1 = block(bytes);
            let (d, m) = (b.d.to_f32(), b.m.to_f32());
            let (lo, hi) = block32(out).split_at_mut(16);
            for ((lo, hi), &q) in lo.iter_mut().zip(hi).zip(&b.qs) {
                *lo = d * f32::from(q & 0xF) + m;
                *hi = d * f32::from(q >> 4) + m;
            }
        }
        Format::Q5_0 => {
            let b: &BlockQ5_0 = block(bytes);
            let (d, qh) = (b.d.to_f32(), u32::from_le_bytes(b.qh));
            for (j, o) in block32(out).iter_mut().enumerate() {
                *o = d * (f32::from(five_bits(&b.qs, qh, j)) - 16.0);
            }
        }
        Format::Q5_1 => {
            let b: &BlockQ5_1 = block(bytes);
            let (d, m) = (b.d.to_f32(), b.m.to_f32());
            let qh = u32::from_le_bytes(b.qh);
            for (j, o) in block32(out).iter_mut().enumerate() {
                *o = d * f32::from(five_bits(&b.qs, qh, j)) + m;
            }
        }
        Format::Q4_K => {
            let b: &BlockQ4_K = block(bytes);
            let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
            for (s, out) in out.chunks_exact_mut(32).enumerate() {
                let (sc, m) = k_scale_min(&b.scales, s);
                let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
                for (l, o) in out.iter_mut().enumerate() {
                    *o = d1 * f32::from(k_nibble(&b.qs, s, l)) - m1;
                }
            }
        }
        Format::Q5_K => {
            let b: &BlockQ5_K = block(bytes);
            let (d, dmin) = (b.d.to_f32(), b.dmin.to_f32());
            for (s, out) in out.chunks_exact_mut(32).enumerate() {
                let (sc, m) = k_scale_min(&b.scales, s);
                let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
                for (l, o) in out.iter_mut().enumerate() {
                    let q = k_nibble(&b.qs, s, l) | ((b.qh[l] >> s) & 1) << 4;
                    *o = d1 * f32::from(q) - m1;
                }
            }
        }
        Format::Q6_K => {
            let b: &BlockQ6_K = block(bytes);
            let d = b.d.to_f32();
            for (e, o) in out.iter_mut().enumerate() {
                let d1 = d * f32::from(b.scales[e / 16] as i8);
                *o = d1 * f32::from(q6_code(&b.ql, &b.qh, e) as i8 - 32);
            }
        }
    }
}

/// The output of a 32-element block, as an array so the loops above need no
/// bounds checks.
fn block32(out: &mut [f32]) -> &mut [f32; 32] {
    out.try_into().expect("a 32-element block")
}

/// `f16::from_bits(h).to_f32()`, in a few integer and float operations that
/// inline and vectorize (the `half` crate's own conversion checks the CPU
/// for F16C on every call, which showed in the kernels' profiles). A
/// normal f16 moves its bits into an f32's place and rebiases the exponent
/// (integer operations); a subnormal's code times 2⁻²⁴ is exact and a
/// normal f32; infinities and NaNs get the f32's top exponent (NaNs quiet,
/// as F16C makes them). No step makes an f32 subnormal: a thread that
/// treats subnormal inputs as zero (DAZ, which XLA's CPU threads set, and
/// where custom calls run) would read it as zero, and Q6_K's and the other
/// K-quants' scales are f16 subnormals in real files.
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let magnitude = h & 0x7FFF;
    let bits = if magnitude >= 0x7C00 {
        // Infinity, or a NaN made quiet, as F16C's conversion makes it.
        let quiet = if h & 0x03FF != 0 { 0x0040_0000 } else { 0 };
        0x7F80_0000 | quiet | ((h & 0x03FF) << 13)
    } else if magnitude >= 0x0400 {
        (magnitude << 13) + ((127 - 15) << 23)
    } else {
        (magnitude as f32 * f32::from_bits(0x3380_0000)).to_bits() // 2^-24
    };
    f32::from_bits(bits | (h & 0x8000) << 16)
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
    /// [`f16_to_f32_is_halfs`] on a thread that flushes subnormal inputs
    /// and results to zero (DAZ and FTZ, as XLA's CPU threads run custom
    /// calls): no f16, subnormals included, widens through an f32
    /// subnormal.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn f16_to_f32_is_halfs_where_subnormals_flush() {
        let _flush = crate::testing::FlushSubnormals::new();
        f16_to_f32_is_halfs();
    }

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
