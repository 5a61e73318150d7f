//! The portable kernels: decode a block with the reference dequantizer, then
//! an f32 dot with eight partial sums (which the compiler may vectorize).

use super::Tile;
use crate::Format;
use crate::dequantize::dequantize_block;
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
