//! The AVX-512 kernels: `matmul`'s inner kernel with 16 tokens per vector
//! (twice AVX2's), and with VNNI the integer inner kernel of a prompt's
//! 8-bit products (`prompt_q8.rs`): the parts of a prompt's products bound
//! by multiply-adds rather than memory. A decode step's 8-bit dots with
//! VNNI are `dot_vnni.rs`; everything else on an AVX-512 CPU runs the AVX2
//! kernels. Reached only through `Isa(Kind::Avx512)` and
//! `Isa(Kind::Avx512Vnni)`, which exist only once `detected()` and
//! `vnni_detected()` said yes.

#[cfg(target_arch = "x86_64")]
pub(super) use imp::{
    LANE_ROWS, detected, dot_tile_lanes, fill_tile, pack_group, tile_products, vnni_detected,
};

#[cfg(not(target_arch = "x86_64"))]
pub(super) use off_x86::{
    LANE_ROWS, detected, dot_tile_lanes, fill_tile, pack_group, tile_products, vnni_detected,
};

#[cfg(not(target_arch = "x86_64"))]
mod off_x86 {
    use super::super::prompt_q8::{ActLanes, CodeTile, Group};
    use super::super::{Tile, TokenLanes};

    /// Unused: the kernel it sizes never runs off x86-64.
    pub(in crate::kernels) const LANE_ROWS: usize = 1;

    pub(in crate::kernels) fn detected() -> bool {
        false
    }
    pub(in crate::kernels) fn vnni_detected() -> bool {
        false
    }
    pub(in crate::kernels) fn dot_tile_lanes(_: &Tile, _: &TokenLanes, _: &mut [f32], _: usize) {
        unreachable!("AVX-512 is never detected off x86-64")
    }
    pub(in crate::kernels) fn tile_products(
        _: &CodeTile,
        _: &ActLanes,
        _: &mut [f32],
        _: (usize, usize, usize),
    ) {
        unreachable!("AVX-512 is never detected off x86-64")
    }
    pub(in crate::kernels) fn fill_tile(_: &mut CodeTile, _: crate::Format, _: &[u8], _: usize) {
        unreachable!("AVX-512 is never detected off x86-64")
    }
    pub(in crate::kernels) fn pack_group(_: &mut Group, _: &[f32]) {
        unreachable!("AVX-512 is never detected off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::super::prompt_q8::{ActLanes, CodeTile, Group, LANES, TILE_ROWS};
    use super::super::{Tile, TokenLanes};
    use crate::Format;

    /// AVX-512F, and the AVX2 set the other kernels of this `Isa` use.
    pub(in crate::kernels) fn detected() -> bool {
        is_x86_feature_detected!("avx512f") && super::super::avx2::detected()
    }

    /// [`detected`], and the byte products of AVX-512 VNNI (with BW for
    /// byte vectors).
    pub(in crate::kernels) fn vnni_detected() -> bool {
        detected() && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni")
    }

    /// `CodeTile::fill` compiled for AVX-512 (with F16C), where the
    /// compiler vectorizes the decoding loops 64 bytes at a time.
    pub(in crate::kernels) fn fill_tile(
        tile: &mut CodeTile,
        format: Format,
        rows: &[u8],
        row_bytes: usize,
    ) {
        #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
        fn fill(tile: &mut CodeTile, format: Format, rows: &[u8], row_bytes: usize) {
            tile.fill(format, rows, row_bytes);
        }
        // SAFETY: reached only through `Isa(Kind::Avx512Vnni)`, made only
        // when `vnni_detected()` found these features.
        unsafe { fill(tile, format, rows, row_bytes) }
    }

    /// `Group::pack` with AVX-512 and F16C, a block of 32 activations at a
    /// time: the same maximum, scale (rounded to f16 as `half` rounds, to
    /// nearest even), quotients, rounding (halves away from zero) and sums,
    /// so the same codes and scales bit for bit.
    pub(in crate::kernels) fn pack_group(group: &mut Group, x: &[f32]) {
        let cols = group.cols();
        assert!(cols.is_multiple_of(32) && x.len().is_multiple_of(cols.max(1)));
        assert!(x.len() / cols.max(1) <= LANES);
        let (xu, dx, sx) = group.parts();
        assert!(xu.len() == cols * LANES && dx.len() == cols / 32 * LANES && sx.len() == dx.len());
        // SAFETY: reached only through `Isa(Kind::Avx512Vnni)`, made only
        // when `vnni_detected()` found AVX-512 F and BW (F16C comes with
        // the AVX2 set `detected()` requires); the asserts bound the stores.
        unsafe { pack(xu, dx, sx, x, cols) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
    fn pack(xu: &mut [u8], dx: &mut [f32], sx: &mut [f32], x: &[f32], cols: usize) {
        for (lane, x) in x.chunks_exact(cols).enumerate() {
            for (b, x) in x.chunks_exact(32).enumerate() {
                // SAFETY: `x` is 32 floats; the stores below are within the
                // lengths `pack_group` checked.
                unsafe {
                    let lo = _mm512_loadu_ps(x.as_ptr());
                    let hi = _mm512_loadu_ps(x.as_ptr().add(16));
                    let amax =
                        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
                    let d = amax / 127.0;
                    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
                    let half = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(d));
                    let d = _mm_cvtss_f32(_mm_cvtph_ps(half));
                    let idv = _mm512_set1_ps(id);
                    let (ql, qh) = (round(_mm512_mul_ps(lo, idv)), round(_mm512_mul_ps(hi, idv)));
                    let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(ql, qh));
                    *dx.get_unchecked_mut(b * LANES + lane) = d;
                    *sx.get_unchecked_mut(b * LANES + lane) = d * sum as f32;
                    // Codes as bytes (truncated, as `as i8`), plus 128.
                    let flip = _mm_set1_epi8(-128);
                    let bytes = [
                        _mm_xor_si128(_mm512_cvtepi32_epi8(ql), flip),
                        _mm_xor_si128(_mm512_cvtepi32_epi8(qh), flip),
                    ];
                    let fours: [u32; 8] = std::mem::transmute(bytes);
                    for (i, four) in fours.into_iter().enumerate() {
                        let at = (32 * b + 4 * i) * LANES + lane * 4;
                        xu.as_mut_ptr().add(at).cast::<u32>().write_unaligned(four);
                    }
                }
            }
        }
    }

    /// `round_half_away` of each lane, as i32: truncated, then one up or
    /// down where the exact remainder reaches a half.
    #[target_feature(enable = "avx512f")]
    fn round(v: __m512) -> __m512i {
        let t = _mm512_cvttps_epi32(v);
        let r = _mm512_sub_ps(v, _mm512_cvtepi32_ps(t));
        let one = _mm512_set1_epi32(1);
        let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(r, _mm512_set1_ps(0.5));
        let down = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(r, _mm512_set1_ps(-0.5));
        let t = _mm512_mask_add_epi32(t, up, t, one);
        _mm512_mask_sub_epi32(t, down, t, one)
    }

    /// `prompt_q8::tile_products` with 16 tokens per vector.
    pub(in crate::kernels) fn tile_products(
        tile: &CodeTile,
        x: &ActLanes,
        out: &mut [f32],
        (stride, first, n_rows): (usize, usize, usize),
    ) {
        let (cols, sub) = (tile.cols, tile.codes.sub);
        assert!(n_rows <= TILE_ROWS && x.cols == cols && cols.is_multiple_of(32));
        assert!(tile.q.len() == TILE_ROWS * cols && tile.d.len() == TILE_ROWS * (cols / sub));
        assert!(tile.m.len() == tile.d.len() && tile.corr.len() == tile.d.len());
        assert!(x.xu.len() == x.n_groups() * cols * LANES);
        assert!(x.dx.len() == x.n_groups() * cols / 32 * LANES && x.sx.len() == x.dx.len());
        assert!(x.n_tokens == 0 || out.len() >= (x.n_tokens - 1) * stride + first + n_rows);
        // SAFETY: `Isa(Kind::Avx512Vnni)`, the only way here, is made only
        // when `vnni_detected()` found AVX-512 F, BW and VNNI; the asserts
        // above bound every index the kernel reads or writes.
        unsafe {
            match (sub, tile.codes.min) {
                (32, false) => products::<32, false>(tile, x, out, stride, first, n_rows),
                (32, true) => products::<32, true>(tile, x, out, stride, first, n_rows),
                (16, false) => products::<16, false>(tile, x, out, stride, first, n_rows),
                _ => unreachable!("Codes::of makes no {:?}", tile.codes),
            }
        }
    }

    /// The tile's products for each group of 16 tokens: per row, 16 integer
    /// sums of a sub-block (`vpdpbusd` of 4 codes broadcast from the row by
    /// 4 codes of each token), then the f32 chain of `prompt_q8.rs`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn products<const SUB: usize, const MIN: bool>(
        tile: &CodeTile,
        x: &ActLanes,
        out: &mut [f32],
        stride: usize,
        first: usize,
        n_rows: usize,
    ) {
        let cols = tile.cols;
        let (n_sub, n_blocks) = (cols / SUB, cols / 32);
        let q = tile.q.as_ptr();
        // SAFETY: `tile_products` checked every length these offsets
        // stay within, and was reached only where the features exist.
        unsafe {
            for g in 0..x.n_groups() {
                let xu = x.xu.as_ptr().add(g * cols * LANES);
                let (dx, sx) = (
                    x.dx.as_ptr().add(g * n_blocks * LANES),
                    x.sx.as_ptr().add(g * n_blocks * LANES),
                );
                let mut acc = [_mm512_setzero_ps(); TILE_ROWS];
                for s in 0..n_sub {
                    let mut sums: [__m512i; TILE_ROWS] = std::array::from_fn(|r| {
                        _mm512_set1_epi32(*tile.corr.get_unchecked(r * n_sub + s))
                    });
                    for k in (s * SUB..(s + 1) * SUB).step_by(4) {
                        let xv = _mm512_loadu_si512(xu.add(k * LANES).cast());
                        for (r, sum) in sums.iter_mut().enumerate() {
                            let w = q.add(r * cols + k).cast::<i32>().read_unaligned();
                            *sum = _mm512_dpbusd_epi32(*sum, xv, _mm512_set1_epi32(w));
                        }
                    }
                    let b = s * SUB / 32;
                    let dxv = _mm512_loadu_ps(dx.add(b * LANES));
                    for (r, (acc, sum)) in acc.iter_mut().zip(sums).enumerate() {
                        let d = _mm512_set1_ps(*tile.d.get_unchecked(r * n_sub + s));
                        *acc =
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, dxv), *acc);
                    }
                    if MIN {
                        let sxv = _mm512_loadu_ps(sx.add(b * LANES));
                        for (r, acc) in acc.iter_mut().enumerate() {
                            let m = _mm512_set1_ps(*tile.m.get_unchecked(r * n_sub + s));
                            *acc = _mm512_fmadd_ps(m, sxv, *acc);
                        }
                    }
                }
                let lanes = (x.n_tokens - g * LANES).min(LANES);
                let mut lane_out = [0.0f32; LANES];
                for (r, acc) in acc.iter().enumerate().take(n_rows) {
                    _mm512_storeu_ps(lane_out.as_mut_ptr(), *acc);
                    for (l, &v) in lane_out.iter().enumerate().take(lanes) {
                        *out.get_unchecked_mut((g * LANES + l) * stride + first + r) = v;
                    }
                }
            }
        }
    }

    crate::kernels::lanes::lanes_kernel!(
        "avx512f",
        __m512,
        16,
        // 24 accumulators of the 32 registers: each pair of token vectors
        // loaded serves twice the rows AVX2's 6 do, halving the reads of
        // the tokens (from L2 once a prompt's pass the L1) per
        // multiply-add.
        12,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps
    );
}
