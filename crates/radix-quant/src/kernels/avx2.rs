//! The AVX2 kernels (with FMA and F16C, as every AVX2 CPU since Haswell has).
//!
//! Each format has a decoder that turns 32 consecutive elements of a block
//! into four 8-lane f32 vectors with the reference's own operations (`d·q +
//! m` as a multiply then an add, K-quant scales `d·sc` rounded first), so a
//! decoded weight equals [`crate::dequantize`]'s bit for bit. Decoders feed
//! either a dot with `x` (decode: each weight byte read once, x from L1) or
//! a store (a tile of rows for `matmul`). These functions are only reached
//! through `Isa(Kind::Avx2)`, which exists only once `detected()` said yes.

#[cfg(target_arch = "x86_64")]
pub(super) use imp::{
    LANE_ROWS, dequantize_row, detected, dot_row, dot_row_group_q8, dot_row_q8, dot_tile,
    dot_tile_lanes, f16_widen, hsum, load_u8x32,
};

#[cfg(not(target_arch = "x86_64"))]
pub(super) use off_x86::{
    LANE_ROWS, dequantize_row, detected, dot_row, dot_row_group_q8, dot_row_q8, dot_tile,
    dot_tile_lanes,
};

#[cfg(not(target_arch = "x86_64"))]
mod off_x86 {
    use super::super::q8::ROW_GROUP;
    use super::super::{Q8Activations, Tile, TokenLanes};
    use crate::Format;

    /// Unused: the kernel it sizes never runs off x86-64.
    pub(in crate::kernels) const LANE_ROWS: usize = 1;

    pub(in crate::kernels) fn detected() -> bool {
        false
    }
    pub(in crate::kernels) fn dot_tile_lanes(_: &Tile, _: &TokenLanes, _: &mut [f32], _: usize) {
        unreachable!("AVX2 is never detected off x86-64")
    }
    pub(in crate::kernels) fn dot_row_q8(_: Format, _: &[u8], _: &Q8Activations) -> f32 {
        unreachable!("AVX2 is never detected off x86-64")
    }
    pub(in crate::kernels) fn dot_row_group_q8(
        _: Format,
        _: [&[u8]; ROW_GROUP],
        _: &Q8Activations,
    ) -> [f32; ROW_GROUP] {
        unreachable!("AVX2 is never detected off x86-64")
    }
    pub(in crate::kernels) fn dot_row(_: Format, _: &[u8], _: &[f32]) -> f32 {
        unreachable!("AVX2 is never detected off x86-64")
    }
    pub(in crate::kernels) fn dequantize_row(_: Format, _: &[u8], _: &mut [f32]) {
        unreachable!("AVX2 is never detected off x86-64")
    }
    pub(in crate::kernels) fn dot_tile(_: &Tile, _: &[f32], _: &mut [f32], _: usize) {
        unreachable!("AVX2 is never detected off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::*;

    use super::super::q8::ROW_GROUP;
    use super::super::{Q8Activations, Tile, TokenLanes};
    use crate::Format;
    use crate::blocks::{
        BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0, F16,
    };
    use crate::dequantize::{dequantize_block, k_scale_min};

    pub(in crate::kernels) fn detected() -> bool {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    }

    /// Thirty-two decoded weights.
    type W32 = [__m256; 4];

    pub(in crate::kernels) fn dot_row(format: Format, row: &[u8], x: &[f32]) -> f32 {
        // SAFETY: only called for `Isa(Kind::Avx2)`, made only when
        // `detected()` found AVX2, FMA and F16C on this CPU.
        unsafe {
            match format {
                Format::F32 => dot_f32(row, x),
                Format::F16 => dot_f16(row, x),
                Format::BF16 => dot_bf16(row, x),
                Format::Q8_0 => dot_q8_0(row, x),
                Format::Q4_0 => dot_q4_0(row, x),
                Format::Q4_1 => dot_q4_1(row, x),
                Format::Q5_0 => dot_q5_0(row, x),
                Format::Q5_1 => dot_q5_1(row, x),
                Format::Q4_K => dot_q4_k(row, x),
                Format::Q5_K => dot_q5_k(row, x),
                Format::Q6_K => dot_q6_k(row, x),
            }
        }
    }

    pub(in crate::kernels) fn dequantize_row(format: Format, row: &[u8], out: &mut [f32]) {
        // SAFETY: as in `dot_row`.
        unsafe {
            match format {
                Format::F32 => deq_f32(row, out),
                Format::F16 => deq_f16(row, out),
                Format::BF16 => deq_bf16(row, out),
                Format::Q8_0 => deq_q8_0(row, out),
                Format::Q4_0 => deq_q4_0(row, out),
                Format::Q4_1 => deq_q4_1(row, out),
                Format::Q5_0 => deq_q5_0(row, out),
                Format::Q5_1 => deq_q5_1(row, out),
                Format::Q4_K => deq_q4_k(row, out),
                Format::Q5_K => deq_q5_k(row, out),
                Format::Q6_K => deq_q6_k(row, out),
            }
        }
    }

    pub(in crate::kernels) fn dot_row_q8(format: Format, row: &[u8], x: &Q8Activations) -> f32 {
        dot_rows_any(format, [row], x)[0]
    }

    /// Each of [`ROW_GROUP`] rows (of one length) times the token `x`: for
    /// each row the same sums, in the same order, as [`dot_row_q8`]'s.
    pub(in crate::kernels) fn dot_row_group_q8(
        format: Format,
        rows: [&[u8]; ROW_GROUP],
        x: &Q8Activations,
    ) -> [f32; ROW_GROUP] {
        dot_rows_any(format, rows, x)
    }

    fn dot_rows_any<const R: usize>(
        format: Format,
        rows: [&[u8]; R],
        x: &Q8Activations,
    ) -> [f32; R] {
        // SAFETY: as in `dot_row`.
        unsafe {
            match format {
                Format::Q8_0 => dot_q8_q8_0(rows, x),
                Format::Q4_0 => dot_q8_q4_0(rows, x),
                Format::Q4_1 => dot_q8_q4_1(rows, x),
                Format::Q5_0 => dot_q8_q5_0(rows, x),
                Format::Q5_1 => dot_q8_q5_1(rows, x),
                _ => unreachable!("matvec_q8_with sends only its Q8_FORMATS here"),
            }
        }
    }

    /// Per format, a dot with 8-bit activations: `$codes` gives a block's 32
    /// codes as bytes and whether they are signed; per block the integer
    /// products are summed in i32 lanes (`vpmaddubsw` takes unsigned × signed
    /// bytes, so signed weights lend their sign to the activations), scaled
    /// by both scales, and Q4_1's or Q5_1's minimum (`$min`, its byte offset) multiplies
    /// the activations' block sum. Blocks go in pairs into two named
    /// accumulators: indexing an array of them by block parity put them in
    /// memory, a store-to-load chain per block. `R` rows (of one length)
    /// share each block of activations, each row with its own sums, the
    /// same operations in the same order as alone.
    macro_rules! q8_kernel {
        ($dot:ident, $block:ty, $codes:ident, $min:expr) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn $dot<const R: usize>(rows: [&[u8]; R], x: &Q8Activations) -> [f32; R] {
                // A closure inherits the function's target features.
                let block =
                    |w: &[u8], xb: &BlockQ8_0, [dx, sum]: [f32; 2], acc: __m256, min_acc: f32| {
                        let w: &$block = bytemuck::from_bytes(w);
                        let qx = load_u8x32(&xb.qs);
                        let (qw, signed) = $codes(w);
                        let (qw, qx) = if signed {
                            (_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw))
                        } else {
                            (qw, qx)
                        };
                        let ones = _mm256_set1_epi16(1);
                        let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(qw, qx), ones);
                        let dd = _mm256_set1_ps(f16_widen(w.d) * dx);
                        let acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(dot), acc);
                        let min: Option<F16> = ($min)(w);
                        match min {
                            Some(m) => (acc, min_acc + f16_widen(m) * sum),
                            None => (acc, min_acc),
                        }
                    };
                let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
                let (mut min0, mut min1) = ([0.0f32; R], [0.0f32; R]);
                let bytes = size_of::<$block>();
                let n_pairs = rows[0].len() / (2 * bytes);
                let xs = x.blocks.chunks_exact(2).zip(x.scales.chunks_exact(2));
                for (p, (xb, s)) in xs.enumerate().take(n_pairs) {
                    for r in 0..R {
                        let w = &rows[r][2 * p * bytes..][..2 * bytes];
                        (acc0[r], min0[r]) = block(&w[..bytes], &xb[0], s[0], acc0[r], min0[r]);
                        (acc1[r], min1[r]) = block(&w[bytes..], &xb[1], s[1], acc1[r], min1[r]);
                    }
                }
                if rows[0].len() % (2 * bytes) != 0 {
                    let last = x.blocks.len() - 1;
                    for r in 0..R {
                        let w = &rows[r][2 * n_pairs * bytes..];
                        (acc0[r], min0[r]) =
                            block(w, &x.blocks[last], x.scales[last], acc0[r], min0[r]);
                    }
                }
                std::array::from_fn(|r| hsum(_mm256_add_ps(acc0[r], acc1[r])) + (min0[r] + min1[r]))
            }
        };
    }

    q8_kernel!(dot_q8_q8_0, BlockQ8_0, codes_q8_0, |_| None);
    q8_kernel!(dot_q8_q4_0, BlockQ4_0, codes_q4_0, |_| None);
    q8_kernel!(dot_q8_q4_1, BlockQ4_1, codes_q4_1, |b: &BlockQ4_1| Some(
        b.m
    ));
    q8_kernel!(dot_q8_q5_0, BlockQ5_0, codes_q5_0, |_| None);
    q8_kernel!(dot_q8_q5_1, BlockQ5_1, codes_q5_1, |b: &BlockQ5_1| Some(
        b.m
    ));

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_q8_0(b: &BlockQ8_0) -> (__m256i, bool) {
        (load_u8x32(&b.qs), true)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_q4_0(b: &BlockQ4_0) -> (__m256i, bool) {
        let (lo, hi) = nibbles(load_u8x16(&b.qs));
        let q = _mm256_set_m128i(hi, lo);
        (_mm256_sub_epi8(q, _mm256_set1_epi8(8)), true)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_q4_1(b: &BlockQ4_1) -> (__m256i, bool) {
        let (lo, hi) = nibbles(load_u8x16(&b.qs));
        (_mm256_set_m128i(hi, lo), false)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_q5_0(b: &BlockQ5_0) -> (__m256i, bool) {
        let (lo, hi) = five_bits(load_u8x16(&b.qs), &b.qh);
        let q = _mm256_set_m128i(hi, lo);
        (_mm256_sub_epi8(q, _mm256_set1_epi8(16)), true)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_q5_1(b: &BlockQ5_1) -> (__m256i, bool) {
        let (lo, hi) = five_bits(load_u8x16(&b.qs), &b.qh);
        (_mm256_set_m128i(hi, lo), false)
    }

    /// Per format, a dot over a row of whole blocks of `$bytes` bytes and
    /// `$len` elements, decoded 32 at a time by `$decode`. The trivial
    /// formats come as 32-element "blocks" too, and their last `cols % 32`
    /// elements go through the scalar reference.
    macro_rules! row_dot {
        ($dot:ident, $decode:ident, $format:expr, $block:ty, $len:literal) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn $dot(row: &[u8], x: &[f32]) -> f32 {
                let mut acc = [_mm256_setzero_ps(); 4];
                let blocks = row.chunks_exact(size_of::<$block>());
                let xs = x.chunks_exact($len);
                let tail = tail_dot($format, blocks.remainder(), xs.remainder());
                for (block, x) in blocks.zip(xs) {
                    let block: &$block = bytemuck::from_bytes(block);
                    for (g, x) in x.chunks_exact(32).enumerate() {
                        let w = $decode(block, g);
                        for k in 0..4 {
                            acc[k] = _mm256_fmadd_ps(w[k], load_ps(sub(x, 8 * k)), acc[k]);
                        }
                    }
                }
                hsum(_mm256_add_ps(
                    _mm256_add_ps(acc[0], acc[1]),
                    _mm256_add_ps(acc[2], acc[3]),
                )) + tail
            }
        };
    }

    /// Per format, a dequantizer over a row of whole blocks, as [`row_dot`]
    /// reads them.
    macro_rules! row_dequantize {
        ($deq:ident, $decode:ident, $format:expr, $block:ty, $len:literal) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn $deq(row: &[u8], out: &mut [f32]) {
                let mut blocks = row.chunks_exact(size_of::<$block>());
                let mut outs = out.chunks_exact_mut($len);
                for (block, out) in (&mut blocks).zip(&mut outs) {
                    let block: &$block = bytemuck::from_bytes(block);
                    for (g, out) in out.chunks_exact_mut(32).enumerate() {
                        let w = $decode(block, g);
                        for k in 0..4 {
                            store_ps(sub_mut(out, 8 * k), w[k]);
                        }
                    }
                }
                tail_dequantize($format, blocks.remainder(), outs.into_remainder());
            }
        };
    }

    /// Per 32-element quantized format, a dot that multiplies the block's
    /// codes as they are (`$codes`, as f32) with `x` and scales their sum
    /// once, `d·Σq·x`, plus, for formats with a minimum (`$min`, its byte
    /// offset), `m·Σx`: two multiply-adds a block instead of scaling and
    /// shifting all 32 weights. A block's four products go into two partial
    /// sums, and blocks alternate between two pairs of accumulators, so no
    /// chain of dependent multiply-adds is longer than two per block.
    macro_rules! scaled_dot {
        ($dot:ident, $block:ty, $codes:ident, $min:expr) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn $dot(row: &[u8], x: &[f32]) -> f32 {
                // A closure inherits the function's target features.
                let block = |w: &[u8], x: &[f32], [acc, min_acc]: [__m256; 2]| {
                    let (w, x): (&$block, &[f32; 32]) = (bytemuck::from_bytes(w), sub(x, 0));
                    let q = $codes(w);
                    let x = [0, 1, 2, 3].map(|k| load_ps(sub(x, 8 * k)));
                    let qx = _mm256_add_ps(
                        _mm256_fmadd_ps(q[1], x[1], _mm256_mul_ps(q[0], x[0])),
                        _mm256_fmadd_ps(q[3], x[3], _mm256_mul_ps(q[2], x[2])),
                    );
                    let acc = _mm256_fmadd_ps(f16_splat(w.d), qx, acc);
                    let min: Option<F16> = ($min)(w);
                    match min {
                        Some(m) => {
                            let sx =
                                _mm256_add_ps(_mm256_add_ps(x[0], x[1]), _mm256_add_ps(x[2], x[3]));
                            [acc, _mm256_fmadd_ps(f16_splat(m), sx, min_acc)]
                        }
                        None => [acc, min_acc],
                    }
                };
                let zero = [_mm256_setzero_ps(); 2];
                let (mut even, mut odd) = (zero, zero);
                let bytes = size_of::<$block>();
                let pairs = row.chunks_exact(2 * bytes);
                let xs = x.chunks_exact(64);
                let (w_rest, x_rest) = (pairs.remainder(), xs.remainder());
                for (w, x) in pairs.zip(xs) {
                    even = block(&w[..bytes], &x[..32], even);
                    odd = block(&w[bytes..], &x[32..], odd);
                }
                if !w_rest.is_empty() {
                    even = block(w_rest, x_rest, even);
                }
                let sum = |[a, b]: [__m256; 2]| _mm256_add_ps(a, b);
                hsum(_mm256_add_ps(sum(even), sum(odd)))
            }
        };
    }

    row_dot!(dot_f32, decode_f32, Format::F32, [u8; 128], 32);
    row_dot!(dot_f16, decode_f16, Format::F16, [u8; 64], 32);
    row_dot!(dot_bf16, decode_bf16, Format::BF16, [u8; 64], 32);
    scaled_dot!(dot_q8_0, BlockQ8_0, codes_ps_q8_0, |_| None);
    scaled_dot!(dot_q4_0, BlockQ4_0, codes_ps_q4_0, |_| None);
    scaled_dot!(dot_q4_1, BlockQ4_1, codes_ps_q4_1, |b: &BlockQ4_1| Some(
        b.m
    ));
    scaled_dot!(dot_q5_0, BlockQ5_0, codes_ps_q5_0, |_| None);
    scaled_dot!(dot_q5_1, BlockQ5_1, codes_ps_q5_1, |b: &BlockQ5_1| Some(
        b.m
    ));
    row_dot!(dot_q4_k, decode_q4_k, Format::Q4_K, BlockQ4_K, 256);
    row_dot!(dot_q5_k, decode_q5_k, Format::Q5_K, BlockQ5_K, 256);
    row_dot!(dot_q6_k, decode_q6_k, Format::Q6_K, BlockQ6_K, 256);

    row_dequantize!(deq_f32, decode_f32, Format::F32, [u8; 128], 32);
    row_dequantize!(deq_f16, decode_f16, Format::F16, [u8; 64], 32);
    row_dequantize!(deq_bf16, decode_bf16, Format::BF16, [u8; 64], 32);
    row_dequantize!(deq_q8_0, decode_q8_0, Format::Q8_0, BlockQ8_0, 32);
    row_dequantize!(deq_q4_0, decode_q4_0, Format::Q4_0, BlockQ4_0, 32);
    row_dequantize!(deq_q4_1, decode_q4_1, Format::Q4_1, BlockQ4_1, 32);
    row_dequantize!(deq_q5_0, decode_q5_0, Format::Q5_0, BlockQ5_0, 32);
    row_dequantize!(deq_q5_1, decode_q5_1, Format::Q5_1, BlockQ5_1, 32);
    row_dequantize!(deq_q4_k, decode_q4_k, Format::Q4_K, BlockQ4_K, 256);
    row_dequantize!(deq_q5_k, decode_q5_k, Format::Q5_K, BlockQ5_K, 256);
    row_dequantize!(deq_q6_k, decode_q6_k, Format::Q6_K, BlockQ6_K, 256);

    // The codes of a 32-element block as f32, before its scale (and
    // minimum): what `scaled_dot` multiplies.

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_ps_q8_0(b: &BlockQ8_0) -> W32 {
        i8x32_to_ps(load_u8x16(sub(&b.qs, 0)), load_u8x16(sub(&b.qs, 16)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_ps_q4_0(b: &BlockQ4_0) -> W32 {
        let (lo, hi) = nibbles(load_u8x16(&b.qs));
        let eight = _mm_set1_epi8(8);
        i8x32_to_ps(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_ps_q4_1(b: &BlockQ4_1) -> W32 {
        let (lo, hi) = nibbles(load_u8x16(&b.qs));
        u8x32_to_ps(lo, hi)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_ps_q5_0(b: &BlockQ5_0) -> W32 {
        let (lo, hi) = five_bits(load_u8x16(&b.qs), &b.qh);
        let sixteen = _mm_set1_epi8(16);
        i8x32_to_ps(_mm_sub_epi8(lo, sixteen), _mm_sub_epi8(hi, sixteen))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes_ps_q5_1(b: &BlockQ5_1) -> W32 {
        let (lo, hi) = five_bits(load_u8x16(&b.qs), &b.qh);
        u8x32_to_ps(lo, hi)
    }

    /// The elements of a trivial format's row past its last 32: the scalar
    /// reference, one at a time (a quantized row has none).
    fn tail_dot(format: Format, bytes: &[u8], x: &[f32]) -> f32 {
        let mut w = [0.0f32];
        let mut sum = 0.0f32;
        for (b, x) in bytes.chunks_exact(format.block_bytes()).zip(x) {
            dequantize_block(format, b, &mut w);
            sum += w[0] * x;
        }
        sum
    }

    fn tail_dequantize(format: Format, bytes: &[u8], out: &mut [f32]) {
        for (b, o) in bytes
            .chunks_exact(format.block_bytes())
            .zip(out.chunks_exact_mut(1))
        {
            dequantize_block(format, b, o);
        }
    }

    // Decoders: block bytes and the index `g` of a 32-element group in the
    // block (always 0 for 32-element blocks) to the group's weights.

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_f32(b: &[u8; 128], _: usize) -> W32 {
        [0, 1, 2, 3].map(|k| load_ps_bytes(sub(b, 32 * k)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_f16(b: &[u8; 64], _: usize) -> W32 {
        let h = |k: usize| _mm256_cvtph_ps(load_u8x16(sub(b, 16 * k)));
        [h(0), h(1), h(2), h(3)]
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_bf16(b: &[u8; 64], _: usize) -> W32 {
        let h = |k: usize| {
            let wide = _mm256_cvtepu16_epi32(load_u8x16(sub(b, 16 * k)));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        };
        [h(0), h(1), h(2), h(3)]
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q8_0(b: &BlockQ8_0, _: usize) -> W32 {
        let d = f16_splat(b.d);
        let q = |k: usize| {
            let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load_u8x8(sub(&b.qs, 8 * k))));
            _mm256_mul_ps(q, d)
        };
        [q(0), q(1), q(2), q(3)]
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q4_0(b: &BlockQ4_0, _: usize) -> W32 {
        let d = f16_splat(b.d);
        let (lo, hi) = nibbles(load_u8x16(&b.qs));
        let eight = _mm_set1_epi8(8);
        let q = i8x32_to_ps(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight));
        q.map(|q| _mm256_mul_ps(d, q))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q4_1(b: &BlockQ4_1, _: usize) -> W32 {
        let (d, m) = (f16_splat(b.d), f16_splat(b.m));
        let (lo, hi) = nibbles(load_u8x16(&b.qs));
        u8x32_to_ps(lo, hi).map(|q| _mm256_add_ps(_mm256_mul_ps(d, q), m))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q5_0(b: &BlockQ5_0, _: usize) -> W32 {
        let d = f16_splat(b.d);
        let (lo, hi) = five_bits(load_u8x16(&b.qs), &b.qh);
        let sixteen = _mm_set1_epi8(16);
        let q = i8x32_to_ps(_mm_sub_epi8(lo, sixteen), _mm_sub_epi8(hi, sixteen));
        q.map(|q| _mm256_mul_ps(d, q))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q5_1(b: &BlockQ5_1, _: usize) -> W32 {
        let (d, m) = (f16_splat(b.d), f16_splat(b.m));
        let (lo, hi) = five_bits(load_u8x16(&b.qs), &b.qh);
        u8x32_to_ps(lo, hi).map(|q| _mm256_add_ps(_mm256_mul_ps(d, q), m))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q4_k(b: &BlockQ4_K, g: usize) -> W32 {
        let (d1, m1) = k_scales(b.d, b.dmin, &b.scales, g);
        let q = k_low_bits(sub(&b.qs, 32 * (g / 2)), g);
        split_u8x32_to_ps(q).map(|q| _mm256_sub_ps(_mm256_mul_ps(d1, q), m1))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q5_k(b: &BlockQ5_K, g: usize) -> W32 {
        let (d1, m1) = k_scales(b.d, b.dmin, &b.scales, g);
        let low = k_low_bits(sub(&b.qs, 32 * (g / 2)), g);
        // Bit `g` of each qh byte is bit 4 of that element's code. Shifting
        // 16-bit lanes moves no wanted bit across a byte once masked to bit 0.
        let qh = load_u8x32(&b.qh);
        let high = _mm256_and_si256(_mm256_srl_epi16(qh, shift(g)), _mm256_set1_epi8(1));
        let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
        split_u8x32_to_ps(q).map(|q| _mm256_sub_ps(_mm256_mul_ps(d1, q), m1))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn decode_q6_k(b: &BlockQ6_K, g: usize) -> W32 {
        // Group g is elements 128h + 32k + l (l < 32) of the super-block: low
        // nibbles of ql[64h + 32(k % 2) + l] shifted by 4(k / 2), top bits
        // 2k..2k + 2 of qh[32h + l]; scales 8h + 2k (l < 16) and the next.
        let (h, k) = (g / 4, g % 4);
        let ql = load_u8x32(sub(&b.ql, 64 * h + 32 * (k % 2)));
        let low = _mm256_and_si256(
            _mm256_srl_epi16(ql, shift(4 * (k / 2))),
            _mm256_set1_epi8(0xF),
        );
        let qh = load_u8x32(sub(&b.qh, 32 * h));
        let high = _mm256_and_si256(_mm256_srl_epi16(qh, shift(2 * k)), _mm256_set1_epi8(3));
        let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
        let q = _mm256_sub_epi8(q, _mm256_set1_epi8(32));
        let q = i8x32_to_ps(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
        let d = f16_widen(b.d);
        let sc = 8 * h + 2 * k;
        let d1 = _mm256_set1_ps(d * f32::from(b.scales[sc] as i8));
        let d2 = _mm256_set1_ps(d * f32::from(b.scales[sc + 1] as i8));
        [
            _mm256_mul_ps(d1, q[0]),
            _mm256_mul_ps(d1, q[1]),
            _mm256_mul_ps(d2, q[2]),
            _mm256_mul_ps(d2, q[3]),
        ]
    }

    /// The scale `d·sc` and minimum `dmin·m` of sub-block `g` of a Q4_K or
    /// Q5_K super-block, rounded to f32 as the reference rounds them.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn k_scales(d: F16, dmin: F16, scales: &[u8; 12], g: usize) -> (__m256, __m256) {
        let (sc, m) = k_scale_min(scales, g);
        let d1 = f16_widen(d) * f32::from(sc);
        let m1 = f16_widen(dmin) * f32::from(m);
        (_mm256_set1_ps(d1), _mm256_set1_ps(m1))
    }

    /// The 4-bit codes of sub-block `g` from its 32 bytes of `qs`: low nibbles
    /// for even `g`, high for odd.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn k_low_bits(qs: &[u8; 32], g: usize) -> __m256i {
        let q = _mm256_srl_epi16(load_u8x32(qs), shift(4 * (g % 2)));
        _mm256_and_si256(q, _mm256_set1_epi8(0xF))
    }

    /// A shift count for `_mm256_srl_epi16`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn shift(n: usize) -> __m128i {
        _mm_cvtsi32_si128(n as i32)
    }

    /// The low nibbles (elements 0..16) and high nibbles (16..32) of 16 bytes.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn nibbles(qs: __m128i) -> (__m128i, __m128i) {
        let mask = _mm_set1_epi8(0xF);
        (
            _mm_and_si128(qs, mask),
            _mm_and_si128(_mm_srli_epi16::<4>(qs), mask),
        )
    }

    /// The 5-bit codes of a Q5 block: nibbles plus bit `j` of the little-endian
    /// u32 `qh` as bit 4 of element `j`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn five_bits(qs: __m128i, qh: &[u8; 4]) -> (__m128i, __m128i) {
        let (lo, hi) = nibbles(qs);
        let qh = _mm_set1_epi32(i32::from_le_bytes(*qh));
        // Element j's bit is bit j % 8 of qh byte j / 8: spread the bytes,
        // test each lane's bit, and turn a set bit into 0x10.
        let bit = _mm_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let high = |bytes: __m128i| {
            let spread = _mm_and_si128(_mm_shuffle_epi8(qh, bytes), bit);
            _mm_and_si128(_mm_cmpeq_epi8(spread, bit), _mm_set1_epi8(0x10))
        };
        let lo_bytes = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        let hi_bytes = _mm_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        (
            _mm_or_si128(lo, high(lo_bytes)),
            _mm_or_si128(hi, high(hi_bytes)),
        )
    }

    /// 32 unsigned byte codes (elements 0..16, then 16..32) as f32.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn u8x32_to_ps(lo: __m128i, hi: __m128i) -> W32 {
        let f = |q: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
        [
            f(lo),
            f(_mm_srli_si128::<8>(lo)),
            f(hi),
            f(_mm_srli_si128::<8>(hi)),
        ]
    }

    /// 32 signed byte codes as f32.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn i8x32_to_ps(lo: __m128i, hi: __m128i) -> W32 {
        let f = |q: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
        [
            f(lo),
            f(_mm_srli_si128::<8>(lo)),
            f(hi),
            f(_mm_srli_si128::<8>(hi)),
        ]
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn split_u8x32_to_ps(q: __m256i) -> W32 {
        u8x32_to_ps(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q))
    }

    /// `h` widened by F16C (exact, like `half`'s software path, which would
    /// branch on every block) and copied to all 8 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_splat(h: F16) -> __m256 {
        _mm256_cvtph_ps(_mm_set1_epi16(h.bits() as i16))
    }

    /// `h` widened by F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::kernels) fn f16_widen(h: F16) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h.bits()))))
    }

    /// The sum of the 8 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::kernels) fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// `N` elements of `s` from `at`, as an array reference: the loads below
    /// take arrays, so their bounds are in the types. With constant offsets
    /// into fixed-size blocks the check compiles away.
    #[inline]
    fn sub<T, const N: usize>(s: &[T], at: usize) -> &[T; N] {
        s[at..at + N].try_into().expect("a slice of N elements")
    }

    #[inline]
    fn sub_mut<T, const N: usize>(s: &mut [T], at: usize) -> &mut [T; N] {
        (&mut s[at..at + N])
            .try_into()
            .expect("a slice of N elements")
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn load_ps(x: &[f32; 8]) -> __m256 {
        // SAFETY: `x` is 8 readable f32; the load has no alignment need.
        unsafe { _mm256_loadu_ps(x.as_ptr()) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn load_ps_bytes(b: &[u8; 32]) -> __m256 {
        // SAFETY: `b` is 32 readable bytes, 8 f32 in little-endian order; the
        // load has no alignment need.
        unsafe { _mm256_loadu_ps(b.as_ptr().cast()) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn store_ps(out: &mut [f32; 8], v: __m256) {
        // SAFETY: `out` is 8 writable f32; the store has no alignment need.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn load_u8x8(b: &[u8; 8]) -> __m128i {
        // SAFETY: `b` is 8 readable bytes, all `_mm_loadl_epi64` reads.
        unsafe { _mm_loadl_epi64(b.as_ptr().cast()) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn load_u8x16(b: &[u8; 16]) -> __m128i {
        // SAFETY: `b` is 16 readable bytes; no alignment need.
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::kernels) fn load_u8x32(b: &[u8; 32]) -> __m256i {
        // SAFETY: `b` is 32 readable bytes; no alignment need.
        unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
    }

    /// Rows of the tile at once, and tokens at once, in `dot_tile`'s inner
    /// kernel: 8 accumulators, 4 row vectors and one token vector fit AVX2's 16
    /// registers, and each loaded row vector serves two tokens.
    const R: usize = 4;
    const T: usize = 2;

    pub(in crate::kernels) fn dot_tile(tile: &Tile, x: &[f32], out: &mut [f32], stride: usize) {
        let cols = tile.cols;
        let (n_rows, n_tokens) = (tile.rows.len() / cols, x.len() / cols);
        assert!(tile.rows.len() == n_rows * cols && x.len() == n_tokens * cols);
        assert!(n_tokens == 0 || out.len() >= (n_tokens - 1) * stride + tile.first + n_rows);
        let mut t = 0;
        while t < n_tokens {
            let mut r = 0;
            while r < n_rows {
                let at = Block { cols, r, t };
                // SAFETY: AVX2, FMA and F16C were detected (see `dot_row`); `Block`
                // stays inside `tile.rows` and `x`, as `micro` asserts.
                unsafe {
                    match (n_rows - r >= R, n_tokens - t >= T) {
                        (true, true) => put(micro::<R, T>(tile.rows, x, at), tile, out, stride, at),
                        (true, false) => {
                            put(micro::<R, 1>(tile.rows, x, at), tile, out, stride, at)
                        }
                        (false, true) => {
                            put(micro::<1, T>(tile.rows, x, at), tile, out, stride, at)
                        }
                        (false, false) => {
                            put(micro::<1, 1>(tile.rows, x, at), tile, out, stride, at)
                        }
                    }
                }
                r += if n_rows - r >= R { R } else { 1 };
            }
            t += if n_tokens - t >= T { T } else { 1 };
        }
    }

    /// Where `micro` starts: row `r` of the tile, token `t` of `x`.
    #[derive(Clone, Copy)]
    struct Block {
        cols: usize,
        r: usize,
        t: usize,
    }

    fn put<const NR: usize, const NT: usize>(
        res: [[f32; NT]; NR],
        tile: &Tile,
        out: &mut [f32],
        stride: usize,
        at: Block,
    ) {
        for (i, res) in res.iter().enumerate() {
            for (j, &v) in res.iter().enumerate() {
                out[(at.t + j) * stride + tile.first + at.r + i] = v;
            }
        }
    }

    /// Dots of `NR` rows with `NT` tokens. Each (row, token) pair has its own
    /// accumulator whose sequence of operations does not depend on `NR` or
    /// `NT`, so a row's result is the same whichever kernel computed it, and
    /// so whatever the split into tasks.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::needless_range_loop)] // (i, j) index rows, tokens and accumulators at once
    fn micro<const NR: usize, const NT: usize>(w: &[f32], x: &[f32], at: Block) -> [[f32; NT]; NR] {
        let cols = at.cols;
        assert!((at.r + NR) * cols <= w.len() && (at.t + NT) * cols <= x.len());
        let w = &w[at.r * cols..(at.r + NR) * cols];
        let x = &x[at.t * cols..(at.t + NT) * cols];
        let n8 = cols / 8 * 8;
        let mut acc = [[_mm256_setzero_ps(); NT]; NR];
        let mut k = 0;
        while k < n8 {
            let mut wv = [_mm256_setzero_ps(); NR];
            for (i, wv) in wv.iter_mut().enumerate() {
                // SAFETY: i * cols + k + 8 <= NR * cols = w.len(), as k + 8 <= n8 <= cols.
                *wv = unsafe { _mm256_loadu_ps(w.as_ptr().add(i * cols + k)) };
            }
            for j in 0..NT {
                // SAFETY: j * cols + k + 8 <= NT * cols = x.len(), as above.
                let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(j * cols + k)) };
                for i in 0..NR {
                    acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
                }
            }
            k += 8;
        }
        let mut res = [[0.0f32; NT]; NR];
        for i in 0..NR {
            for j in 0..NT {
                let w = &w[i * cols + n8..(i + 1) * cols];
                let x = &x[j * cols + n8..(j + 1) * cols];
                let tail: f32 = w.iter().zip(x).map(|(w, x)| w * x).sum();
                res[i][j] = hsum(acc[i][j]) + tail;
            }
        }
        res
    }

    // `dot_tile_lanes` with the tokens in 8-lane AVX2 vectors; 6 × 2
    // accumulators, 2 token vectors and a broadcast weight fit AVX2's 16
    // registers (one more spills an accumulator to the stack, a store-to-load
    // chain per step), and each step does 12 multiply-adds for 8 loads.
    crate::kernels::lanes::lanes_kernel!(
        "avx2,fma,f16c",
        __m256,
        8,
        6,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_storeu_ps
    );
}
