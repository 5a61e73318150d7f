//! `matmul`'s inner kernel with the tokens in vector lanes ([`TokenLanes`]),
//! written once and instantiated per instruction set: AVX2 (8 lanes) in
//! `avx2.rs`, AVX-512 (16 lanes) in `avx512.rs`. Every output is the chain
//! `c = fma(w[k], x[k], c)` for `k` in order from zero whatever the vector
//! width, the rows per step or the split into tiles and tasks, so both
//! instances give the same results bit for bit.
//!
//! [`TokenLanes`]: super::TokenLanes

/// Token vectors at once in the inner kernel.
pub(super) const LANE_VECTORS: usize = 2;

/// Defines `dot_tile_lanes(tile, x, out, stride)` in the calling module for
/// vectors of type `$vec` holding `$width` f32 lanes, with the target
/// features `$features` and the intrinsics named after them, and
/// `LANE_ROWS`, the rows of its inner step (`$rows`: `$rows ×
/// LANE_VECTORS` accumulators, two vectors of tokens and a broadcast must
/// fit the instruction set's registers). The caller must reach it only
/// where those features were detected.
macro_rules! lanes_kernel {
    ($features:literal, $vec:ty, $width:literal, $rows:literal, $setzero:ident, $loadu:ident,
     $set1:ident, $fmadd:ident, $storeu:ident) => {
        /// Rows at once in the inner kernel; `matmul`'s tasks on this path
        /// are multiples of it.
        pub(in crate::kernels) const LANE_ROWS: usize = $rows;

        /// Where one step of the inner kernel starts: its first row and its
        /// first group of `$width` tokens.
        #[derive(Clone, Copy)]
        struct LaneBlock {
            cols: usize,
            r: usize,
            g: usize,
        }

        pub(in crate::kernels) fn dot_tile_lanes(
            tile: &Tile,
            x: &TokenLanes,
            out: &mut [f32],
            stride: usize,
        ) {
            use crate::kernels::lanes::LANE_VECTORS;
            let cols = tile.cols;
            let n_rows = tile.rows.len() / cols;
            let n_groups = x.n_tokens.div_ceil($width);
            assert!(
                x.lanes == $width,
                "tokens in groups of {}, not {}",
                x.lanes,
                $width
            );
            assert!(tile.rows.len() == n_rows * cols && x.cols == cols);
            assert!(x.data.len() == n_groups * cols * $width);
            assert!(
                x.n_tokens == 0 || out.len() >= (x.n_tokens - 1) * stride + tile.first + n_rows
            );
            let mut g = 0;
            while g < n_groups {
                let wide = n_groups - g >= LANE_VECTORS;
                let mut r = 0;
                while r < n_rows {
                    let at = LaneBlock { cols, r, g };
                    let tall = n_rows - r >= LANE_ROWS;
                    let w = tile.rows;
                    // SAFETY: the caller detected the target features;
                    // `lanes` asserts that the rows and groups it reads exist.
                    unsafe {
                        match (tall, wide) {
                            (true, true) => put_lanes(
                                lanes::<LANE_ROWS, LANE_VECTORS>(w, x, at),
                                tile,
                                x,
                                out,
                                stride,
                                at,
                            ),
                            (true, false) => {
                                put_lanes(lanes::<LANE_ROWS, 1>(w, x, at), tile, x, out, stride, at)
                            }
                            (false, true) => put_lanes(
                                lanes::<1, LANE_VECTORS>(w, x, at),
                                tile,
                                x,
                                out,
                                stride,
                                at,
                            ),
                            (false, false) => {
                                put_lanes(lanes::<1, 1>(w, x, at), tile, x, out, stride, at)
                            }
                        }
                    }
                    r += if tall { LANE_ROWS } else { 1 };
                }
                g += if wide { LANE_VECTORS } else { 1 };
            }
        }

        /// Writes `lanes`'s results (row `i`, token `(at.g + v) * $width +
        /// l`) into `out`, leaving out the padding past the last token.
        fn put_lanes<const NR: usize, const NV: usize>(
            res: [[[f32; $width]; NV]; NR],
            tile: &Tile,
            x: &TokenLanes,
            out: &mut [f32],
            stride: usize,
            at: LaneBlock,
        ) {
            // Token by token, so that each token's `NR` results land side
            // by side in one or two lines of `out` (row by row, every store
            // went to another token's line).
            for v in 0..NV {
                let first = (at.g + v) * $width;
                for l in 0..$width.min(x.n_tokens - first) {
                    let row = (first + l) * stride + tile.first + at.r;
                    for (out, res) in out[row..row + NR].iter_mut().zip(&res) {
                        *out = res[v][l];
                    }
                }
            }
        }

        /// `NR` rows from `at.r` times `NV` groups of `$width` tokens from
        /// group `at.g`: for each element `k` of the rows, one broadcast
        /// weight per row and one vector of the tokens' element `k` per
        /// group.
        #[target_feature(enable = $features)]
        #[allow(clippy::needless_range_loop)] // (i, v) index rows, groups and accumulators at once
        fn lanes<const NR: usize, const NV: usize>(
            w: &[f32],
            x: &TokenLanes,
            at: LaneBlock,
        ) -> [[[f32; $width]; NV]; NR] {
            let (cols, width) = (at.cols, $width);
            assert!((at.r + NR) * cols <= w.len());
            assert!((at.g + NV) * cols * width <= x.data.len());
            let w = &w[at.r * cols..(at.r + NR) * cols];
            let x = &x.data[at.g * cols * width..(at.g + NV) * cols * width];
            let mut acc: [[$vec; NV]; NR] = [[$setzero(); NV]; NR];
            for k in 0..cols {
                let mut xv: [$vec; NV] = [$setzero(); NV];
                for (v, xv) in xv.iter_mut().enumerate() {
                    // SAFETY: (v * cols + k + 1) * width <= NV * cols * width = x.len().
                    *xv = unsafe { $loadu(x.as_ptr().add((v * cols + k) * width)) };
                }
                for i in 0..NR {
                    // SAFETY: i * cols + k < NR * cols = w.len().
                    let wb = $set1(unsafe { *w.get_unchecked(i * cols + k) });
                    for v in 0..NV {
                        acc[i][v] = $fmadd(wb, xv[v], acc[i][v]);
                    }
                }
            }
            let mut res = [[[0.0f32; $width]; NV]; NR];
            for i in 0..NR {
                for v in 0..NV {
                    // SAFETY: `res[i][v]` is `$width` writable f32s.
                    unsafe { $storeu(res[i][v].as_mut_ptr(), acc[i][v]) };
                }
            }
            res
        }
    };
}

pub(super) use lanes_kernel;
