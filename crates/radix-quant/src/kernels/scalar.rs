//! The portable kernels: decode a block with the reference dequantizer, then
//! an f32 dot with eight partial sums (which the compiler may vectorize).

use super::{Q8Activations, Tile};
use crate::Format;
use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0, block,
};
use crate::dequantize::{dequantize_block, five_bits, k_nibble, k_scale_min, q6_code};
use crate::format::QK_K;

/// Partial sums per dot, as an 8-lane vector would keep them.
const LANES: usize = 8;

pub(super) fn dot_row(format: Format, row: &[u8], x: &[f32]) -> f32 {
    let (block_len, block_bytes) = (format.block_len(), format.block_bytes());
    let mut w = [0.0f32; QK_K];
    let mut acc = [0.0f32; LANES];
    let mut tail = 0.0f32;
    for (block, x) in row.chunks_exact(block_bytes).zip(x.chunks_exact(block_len)) {
        let w = &mut w[..block_len];
        dequantize_block(format, block, w);
        if block_len < LANES {
            // One-element "blocks" (F32, F16, BF16).
            tail += w[0] * x[0];
            continue;
        }
        for (w, x) in w.chunks_exact(LANES).zip(x.chunks_exact(LANES)) {
            for l in 0..LANES {
                acc[l] += w[l] * x[l];
            }
        }
    }
    acc.iter().sum::<f32>() + tail
}

pub(super) fn dequantize_row(format: Format, row: &[u8], out: &mut [f32]) {
    let (block_len, block_bytes) = (format.block_len(), format.block_bytes());
    for (block, out) in row
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(block_len))
    {
        dequantize_block(format, block, out);
    }
}

pub(super) fn dot_tile(tile: &Tile, x: &[f32], out: &mut [f32], stride: usize) {
    for (t, x) in x.chunks_exact(tile.cols).enumerate() {
        for (r, w) in tile.rows.chunks_exact(tile.cols).enumerate() {
            out[t * stride + tile.first + r] = dot(w, x);
        }
    }
}

fn dot(w: &[f32], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (w8, x8) = (w.chunks_exact(LANES), x.chunks_exact(LANES));
    let tail: f32 = w8
        .remainder()
        .iter()
        .zip(x8.remainder())
        .map(|(w, x)| w * x)
        .sum();
    for (w, x) in w8.zip(x8) {
        for l in 0..LANES {
            acc[l] += w[l] * x[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// A row of Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 blocks times Q8_0 activations:
/// per block an exact integer sum of code products, scaled by both blocks'
/// scales, plus Q4_1's or Q5_1's minimum times the activations' block sum.
/// K-quant rows go to [`dot_row_q8_k`].
pub(super) fn dot_row_q8(format: Format, row: &[u8], x: &Q8Activations) -> f32 {
    if super::q8::is_k_quant(format) {
        return dot_row_q8_k(format, row, x);
    }
    let mut acc = 0.0f32;
    let bytes = row.chunks_exact(format.block_bytes());
    for ((w, xb), &[dx, sum]) in bytes.zip(x.blocks).zip(x.scales) {
        let qx = xb.qs.iter().map(|&q| i32::from(q as i8));
        acc += match format {
            Format::Q8_0 => {
                let w: &BlockQ8_0 = block(w);
                let dot = w.qs.iter().zip(qx).map(|(&q, x)| i32::from(q as i8) * x);
                w.d.to_f32() * dx * dot.sum::<i32>() as f32
            }
            Format::Q4_0 => {
                let w: &BlockQ4_0 = block(w);
                let dot = codes4(&w.qs).zip(qx).map(|(q, x)| (q - 8) * x);
                w.d.to_f32() * dx * dot.sum::<i32>() as f32
            }
            Format::Q4_1 => {
                let w: &BlockQ4_1 = block(w);
                let dot = codes4(&w.qs).zip(qx).map(|(q, x)| q * x).sum::<i32>();
                w.d.to_f32() * dx * dot as f32 + w.m.to_f32() * sum
            }
            Format::Q5_0 => {
                let w: &BlockQ5_0 = block(w);
                let codes = codes5(&w.qs, w.qh);
                let dot = codes.zip(qx).map(|(q, x)| (q - 16) * x);
                w.d.to_f32() * dx * dot.sum::<i32>() as f32
            }
            Format::Q5_1 => {
                let w: &BlockQ5_1 = block(w);
                let dot = codes5(&w.qs, w.qh).zip(qx).map(|(q, x)| q * x).sum::<i32>();
                w.d.to_f32() * dx * dot as f32 + w.m.to_f32() * sum
            }
            _ => unreachable!("matvec_q8_with sends only its Q8_FORMATS here"),
        };
    }
    acc
}

/// A row of Q4_K, Q5_K or Q6_K super-blocks times Q8_0 activations, the
/// reference of `dot_k.rs`'s kernels. Each activation block (32 elements,
/// one Q4_K or Q5_K sub-block, two of Q6_K's) gives one exact integer sum,
/// each sub-block's code products times its integer scale (Q6_K's codes
/// taken as `q - 32`), and adds it times `d·dx`; Q4_K's and Q5_K's
/// minimums `dmin·m` times the activations' block sums are summed apart and
/// subtracted at the end.
pub(super) fn dot_row_q8_k(format: Format, row: &[u8], x: &Q8Activations) -> f32 {
    let (mut acc, mut mins) = (0.0f32, 0.0f32);
    let per_block = QK_K / 32;
    let xs = x
        .blocks
        .chunks_exact(per_block)
        .zip(x.scales.chunks_exact(per_block));
    for (w, (xb, xs)) in row.chunks_exact(format.block_bytes()).zip(xs) {
        for (s, (xb, &[dx, sum])) in xb.iter().zip(xs).enumerate() {
            let qx = |l: usize| i32::from(xb.qs[l] as i8);
            let (d, sum) = match format {
                Format::Q4_K | Format::Q5_K => {
                    let (d, dmin, scales, qs, qh) = match format {
                        Format::Q4_K => {
                            let w: &BlockQ4_K = block(w);
                            (w.d, w.dmin, &w.scales, &w.qs, None)
                        }
                        _ => {
                            let w: &BlockQ5_K = block(w);
                            (w.d, w.dmin, &w.scales, &w.qs, Some(&w.qh))
                        }
                    };
                    let code = |l: usize| {
                        let high = qh.map_or(0, |qh| (qh[l] >> s) & 1);
                        i32::from(k_nibble(qs, s, l) | high << 4)
                    };
                    let (sc, m) = k_scale_min(scales, s);
                    mins += dmin.to_f32() * f32::from(m) * sum;
                    (
                        d,
                        i32::from(sc) * (0..32).map(|l| code(l) * qx(l)).sum::<i32>(),
                    )
                }
                Format::Q6_K => {
                    let w: &BlockQ6_K = block(w);
                    let code = |l: usize| i32::from(q6_code(&w.ql, &w.qh, 32 * s + l)) - 32;
                    let half = |h: usize| {
                        let sc = i32::from(w.scales[2 * s + h] as i8);
                        sc * (16 * h..16 * h + 16).map(|l| code(l) * qx(l)).sum::<i32>()
                    };
                    (w.d, half(0) + half(1))
                }
                _ => unreachable!("only K-quant rows come here"),
            };
            acc += d.to_f32() * dx * sum as f32;
        }
    }
    acc - mins
}

/// The 32 codes of a 5-bit block in element order.
fn codes5(qs: &[u8; 16], qh: [u8; 4]) -> impl Iterator<Item = i32> + '_ {
    let qh = u32::from_le_bytes(qh);
    (0..32).map(move |j| i32::from(five_bits(qs, qh, j)))
}

/// The 32 codes of a 4-bit block in element order: low nibbles, then high.
fn codes4(qs: &[u8]) -> impl Iterator<Item = i32> + '_ {
    let lo = qs.iter().map(|&b| i32::from(b & 0xF));
    lo.chain(qs.iter().map(|&b| i32::from(b >> 4)))
}
