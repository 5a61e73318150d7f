//! The AVX-512 kernels: `matmul`'s inner kernel with 16 tokens per vector
//! (twice AVX2's), the part of a prompt's products bound by multiply-adds
//! rather than memory. Everything else on an AVX-512 CPU runs the AVX2
//! kernels. Reached only through `Isa(Kind::Avx512)`, which exists only once
//! `detected()` said yes.

#[cfg(target_arch = "x86_64")]
pub(super) use imp::{detected, dot_tile_lanes};

#[cfg(not(target_arch = "x86_64"))]
pub(super) use off_x86::{detected, dot_tile_lanes};

#[cfg(not(target_arch = "x86_64"))]
mod off_x86 {
    use super::super::{Tile, TokenLanes};

    pub(in crate::kernels) fn detected() -> bool {
        false
    }
    pub(in crate::kernels) fn dot_tile_lanes(_: &Tile, _: &TokenLanes, _: &mut [f32], _: usize) {
        unreachable!("AVX-512 is never detected off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::super::{Tile, TokenLanes};

    /// AVX-512F, and the AVX2 set the other kernels of this `Isa` use.
    pub(in crate::kernels) fn detected() -> bool {
        is_x86_feature_detected!("avx512f") && super::super::avx2::detected()
    }

    crate::kernels::lanes::lanes_kernel!(
        "avx512f",
        __m512,
        16,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps
    );
}
