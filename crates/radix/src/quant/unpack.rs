//! The in-graph dequantizer: a blocks tensor (see [`blocks_shape`]) decoded
//! to f32 with ordinary ops (slices, reshapes, bitcasts, shifts, masks,
//! converts, multiplies and adds), so any platform runs it. It is what the
//! quantized matmul falls back to where its kernel cannot run, and how the
//! embedding lookup decodes the rows it gathered.
//!
//! Each format is decoded as `radix_quant::dequantize` decodes it: the same
//! f32 operations on the same operands in the same order, so the values are
//! equal bit for bit (`tests/dequantize.rs` checks every format through the
//! interpreter and the CPU plugin). A compiler may fuse `d·q + m` into one
//! multiply-add without changing a bit: `d·q` is an f16 scale (11 significant
//! bits) times a code of at most 6 bits, or a K-quant `d·sc` (at most 17
//! bits) times a 5-bit code, so it is exact in f32 and only the add rounds.
//! Q6_K's `d·sc·(q − 32)`, which may round, has no add after it.
//!
//! [`blocks_shape`]: super::blocks_shape

use std::ops::Range;

use radix_quant::blocks::{
    Block, BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0,
    F16, field_range,
};

use crate::quant::{Format, Layout, blocks_format, blocks_layout};
use crate::tensor::fail;
use crate::{DType, Shape, Tensor};

/// The f32 values of `blocks`, a `u8 [.., row_bytes]` tensor whose last
/// axis is tagged `blocks:<format>` ([`blocks_shape`]): `f32 [.., cols]`,
/// the leading axes kept and the new last axis tagged `tag`. Equal bit for
/// bit to `radix_quant::dequantize` of each row.
///
/// Any other shape records a trace error at the caller's line.
///
/// ```
/// use radix::quant::{Format, blocks_shape, dequantize};
/// use radix::Tensor;
/// let weight = Tensor::param(blocks_shape(Format::Q4_K, ("out", 8), 512).unwrap());
/// let program = radix::trace_fn(&weight, |w| dequantize(w, "in")).unwrap();
/// assert_eq!(program.results()[0].shape.to_string(), "{out=8, in=512, f32}");
/// ```
///
/// [`blocks_shape`]: super::blocks_shape
#[track_caller]
pub fn dequantize(blocks: Tensor, tag: &str) -> Tensor {
    let s = blocks.shape();
    let Some((format, cols)) = blocks_format(&s) else {
        let msg = format!("{s} is not a blocks shape (u8, last axis tagged blocks:<format>)");
        return fail("dequantize", msg, &[blocks], s.with_dtype(DType::F32));
    };
    let last = s.rank() - 1;
    let out = s
        .with_dtype(DType::F32)
        .remove_axis(last)
        .and_then(|o| o.insert_axis(last, cols, tag))
        .expect("the last axis is replaced by one");
    // One leading axis of rows, one of blocks, one of bytes: the decoders
    // below then never need more than rank 6.
    let rows: i64 = s.dims()[..last].iter().product();
    let block_bytes = format.block_bytes() as i64;
    let n_blocks = s.dims()[last] / block_bytes;
    let b = match blocks_layout(&s) {
        Some(Layout::Split) => joined(blocks, format, rows, n_blocks),
        _ => blocks.reshape(&[rows, n_blocks, block_bytes]),
    };
    let values = match format {
        Format::F32 if blocks_layout(&s) == Some(Layout::Panels) => {
            // Panels of 16 rows, element k of each row side by side: back
            // to one row after another.
            let panel = radix_quant::PANEL_ROWS as i64;
            b.bitcast(DType::F32)
                .reshape(&[rows / panel, n_blocks, panel])
                .transpose([0, 2, 1].as_slice())
        }
        Format::F32 => b.bitcast(DType::F32),
        Format::F16 => b.bitcast(DType::F16).convert(DType::F32),
        // The bits moved into the top half of a u32, as `radix_quant`
        // does: integer ops only, so every pattern comes through as it is.
        Format::BF16 => b
            .bitcast(DType::U16)
            .convert(DType::U32)
            .shift_left(Tensor::scalar(16.0, DType::U32))
            .bitcast(DType::F32),
        Format::Q8_0 => {
            let d = f16(b, |x: &BlockQ8_0| &x.d);
            let q = field(b, |x: &BlockQ8_0| &x.qs).bitcast(DType::I8);
            let q = q.convert(DType::F32);
            q * spread(d, &q.dims())
        }
        Format::Q4_0 => {
            let d = f16(b, |x: &BlockQ4_0| &x.d);
            let q = four_bit_codes(field(b, |x: &BlockQ4_0| &x.qs)).convert(DType::F32);
            spread(d, &q.dims()) * (q - 8.0)
        }
        Format::Q4_1 => {
            let (d, m) = (f16(b, |x: &BlockQ4_1| &x.d), f16(b, |x: &BlockQ4_1| &x.m));
            let q = four_bit_codes(field(b, |x: &BlockQ4_1| &x.qs)).convert(DType::F32);
            spread(d, &q.dims()) * q + spread(m, &q.dims())
        }
        Format::Q5_0 => {
            let d = f16(b, |x: &BlockQ5_0| &x.d);
            let (qh, qs) = (
                field(b, |x: &BlockQ5_0| &x.qh),
                field(b, |x: &BlockQ5_0| &x.qs),
            );
            let q = five_bit_codes(qh, qs).convert(DType::F32);
            spread(d, &q.dims()) * (q - 16.0)
        }
        Format::Q5_1 => {
            let (d, m) = (f16(b, |x: &BlockQ5_1| &x.d), f16(b, |x: &BlockQ5_1| &x.m));
            let (qh, qs) = (
                field(b, |x: &BlockQ5_1| &x.qh),
                field(b, |x: &BlockQ5_1| &x.qs),
            );
            let q = five_bit_codes(qh, qs).convert(DType::F32);
            spread(d, &q.dims()) * q + spread(m, &q.dims())
        }
        Format::Q4_K => {
            let q = k_nibbles(field(b, |x: &BlockQ4_K| &x.qs));
            let (d, dmin) = (
                f16(b, |x: &BlockQ4_K| &x.d),
                f16(b, |x: &BlockQ4_K| &x.dmin),
            );
            k_quant((d, dmin, field(b, |x: &BlockQ4_K| &x.scales)), q)
        }
        Format::Q5_K => {
            let q = k_nibbles(field(b, |x: &BlockQ5_K| &x.qs));
            // Bit 4 of element `l` of sub-block `s` is bit `s` of qh[l].
            let dims = q.dims();
            let qh = field(b, |x: &BlockQ5_K| &x.qh);
            let qh = qh.broadcast_in_dim(Shape::new(DType::U8, &dims), &[0, 1, 3]);
            let s = Tensor::iota(Shape::new(DType::U8, &dims), 2);
            let high = qh
                .shift_right_logical(s)
                .and(Tensor::scalar(1.0, DType::U8))
                .shift_left(Tensor::scalar(4.0, DType::U8));
            let (d, dmin) = (
                f16(b, |x: &BlockQ5_K| &x.d),
                f16(b, |x: &BlockQ5_K| &x.dmin),
            );
            k_quant((d, dmin, field(b, |x: &BlockQ5_K| &x.scales)), q.or(high))
        }
        Format::Q6_K => q6_k(b, rows, n_blocks),
    };
    values.reshape_to(out)
}

/// Split rows of `format` (`u8 [.., n_blocks × block_bytes]`: each part
/// of [`radix_quant::split_parts`] for every block in turn;
/// [`Layout::Split`]) as blocks again, `u8 [rows, n_blocks, block_bytes]`.
#[track_caller]
fn joined(split: Tensor, format: Format, rows: i64, n_blocks: i64) -> Tensor {
    let block_bytes = format.block_bytes() as i64;
    let flat = split.reshape(&[rows, n_blocks * block_bytes]);
    let mut parts = vec![];
    let mut at = 0;
    for field in radix_quant::split_parts(format) {
        let len = field.len() as i64;
        let part = flat
            .slice(1, n_blocks * at..n_blocks * (at + len))
            .reshape(&[rows, n_blocks, len]);
        // Q8_0's codes are stored as `w ^ 0x80`.
        let part = match (format, at) {
            (Format::Q8_0, 0) => part.xor(Tensor::scalar(128.0, DType::U8)),
            _ => part,
        };
        parts.push((field.start, part));
        at += len;
    }
    // The fields in the order the block holds them.
    parts.sort_by_key(|&(start, _)| start);
    let parts: Vec<Tensor> = parts.into_iter().map(|(_, p)| p).collect();
    Tensor::concatenate(&parts, 2)
}

/// One field of every block `B` in `b` (`u8 [rows, n_blocks, bytes]`), at
/// the bytes its `#[repr(C)]` type puts it: `u8 [rows, n_blocks, size]`.
#[track_caller]
fn field<B: Block, F>(b: Tensor, f: impl Fn(&B) -> &F) -> Tensor {
    let Range { start, end } = field_range(f);
    b.slice(2, start as i64..end as i64)
}

/// An f16 field of every block, widened (exactly) to f32: `[rows, n_blocks]`.
#[track_caller]
fn f16<B: Block>(b: Tensor, f: impl Fn(&B) -> &F16) -> Tensor {
    field(b, f).bitcast(DType::F16).convert(DType::F32)
}

/// `x` repeated along new trailing axes up to `dims` (one value per block
/// or sub-block to one per element).
#[track_caller]
fn spread(x: Tensor, dims: &[i64]) -> Tensor {
    let axes: Vec<usize> = (0..x.rank()).collect();
    x.broadcast_in_dim(Shape::new(x.dtype(), dims), &axes)
}

/// The low and the high nibbles of the bytes `q`.
#[track_caller]
fn nibbles(q: Tensor) -> (Tensor, Tensor) {
    let lo = q.and(Tensor::scalar(15.0, DType::U8));
    let hi = q.shift_right_logical(Tensor::scalar(4.0, DType::U8));
    (lo, hi)
}

/// The 32 codes of 16 bytes `qs` (`[rows, n_blocks, 16]`): elements `0..16`
/// in the low nibbles, `16..32` in the high ones. `u8 [rows, n_blocks, 32]`.
#[track_caller]
fn four_bit_codes(qs: Tensor) -> Tensor {
    let (lo, hi) = nibbles(qs);
    Tensor::concatenate(&[lo, hi], 2)
}

/// The 32 five-bit codes of a Q5_0/Q5_1 block: the nibbles of the 16 bytes
/// `qs`, plus bit `j` of the little-endian u32 `qh` (4 bytes) as bit 4 of
/// code `j`. `u32 [rows, n_blocks, 32]`.
#[track_caller]
fn five_bit_codes(qh: Tensor, qs: Tensor) -> Tensor {
    let q = four_bit_codes(qs).convert(DType::U32);
    let dims = q.dims();
    let qh = spread(qh.bitcast(DType::U32), &dims);
    let j = Tensor::iota(Shape::new(DType::U32, &dims), 2);
    let high = qh
        .shift_right_logical(j)
        .and(Tensor::scalar(1.0, DType::U32))
        .shift_left(Tensor::scalar(4.0, DType::U32));
    q.or(high)
}

/// The 4-bit codes of a Q4_K/Q5_K super-block's 128 bytes `qs`
/// (`[rows, n_blocks, 128]`) by sub-block: each 32 bytes hold sub-block
/// `2i` in their low nibbles and `2i + 1` in their high ones.
/// `u8 [rows, n_blocks, 8, 32]`.
#[track_caller]
fn k_nibbles(qs: Tensor) -> Tensor {
    let d = qs.dims();
    let (lo, hi) = nibbles(qs.reshape(&[d[0], d[1], 4, 1, 32]));
    Tensor::concatenate(&[lo, hi], 3).reshape(&[d[0], d[1], 8, 32])
}

/// A Q4_K/Q5_K super-block from its scales `d` and `dmin` (f32 `[rows,
/// n_blocks]`), its 12 bytes of packed sub-block scales and its codes `q`
/// (`u8 [rows, n_blocks, 8, 32]`): `d·sc·q − dmin·m` per sub-block, with
/// `d·sc` and `dmin·m` rounded to f32 first. `f32 [rows, n_blocks, 8, 32]`.
#[track_caller]
fn k_quant((d, dmin, scales): (Tensor, Tensor, Tensor), q: Tensor) -> Tensor {
    let (sc, m) = k_scales_mins(scales);
    let per_sub = sc.dims();
    let d1 = spread(d, &per_sub) * sc.convert(DType::F32);
    let m1 = spread(dmin, &per_sub) * m.convert(DType::F32);
    let dims = q.dims();
    spread(d1, &dims) * q.convert(DType::F32) - spread(m1, &dims)
}

/// The 6-bit scales and minimums of the 8 sub-blocks, packed in 12 bytes
/// (`[rows, n_blocks, 12]`, ggml's `get_scale_min_k4`): sub-blocks 0..4 in
/// the low 6 bits of bytes 0..4 (scales) and 4..8 (minimums); sub-blocks
/// 4..8 in the nibbles of bytes 8..12, with their top two bits in the top
/// bits of bytes 0..8. Two `u8 [rows, n_blocks, 8]`.
#[track_caller]
fn k_scales_mins(packed: Tensor) -> (Tensor, Tensor) {
    let (a, b, c) = (
        packed.slice(2, 0..4),
        packed.slice(2, 4..8),
        packed.slice(2, 8..12),
    );
    let (c_lo, c_hi) = nibbles(c);
    let sc = Tensor::concatenate(&[low6(a), c_lo.or(top2(a))], 2);
    let m = Tensor::concatenate(&[low6(b), c_hi.or(top2(b))], 2);
    (sc, m)
}

/// The low 6 bits of the bytes `x`.
#[track_caller]
fn low6(x: Tensor) -> Tensor {
    x.and(Tensor::scalar(63.0, DType::U8))
}

/// The top 2 bits of the bytes `x`, moved to bits 4 and 5.
#[track_caller]
fn top2(x: Tensor) -> Tensor {
    x.shift_right_logical(Tensor::scalar(6.0, DType::U8))
        .shift_left(Tensor::scalar(4.0, DType::U8))
}

/// A Q6_K super-block: 128 bytes `ql` of low nibbles, 64 bytes `qh` of
/// 2-bit pairs, 16 i8 scales, the f16 `d`; element `e` is `d·sc[e / 16]·(q
/// − 32)` with `d·sc` rounded to f32 first. Each half `h` of 128 elements,
/// `e = 128h + 32k + l`, takes the nibble `k / 2` of `ql[64h + 32(k % 2) + l]`
/// and bits `2k..2k + 2` of `qh[32h + l]`. `f32 [rows, n_blocks, 16, 16]`.
#[track_caller]
fn q6_k(b: Tensor, rows: i64, n_blocks: i64) -> Tensor {
    // Low nibbles as [h, k / 2, k % 2, l]: the low halves of the bytes first.
    let ql = field(b, |x: &BlockQ6_K| &x.ql).reshape(&[rows, n_blocks, 2, 1, 2, 32]);
    let (lo, hi) = nibbles(ql);
    let low = Tensor::concatenate(&[lo, hi], 3).reshape(&[rows, n_blocks, 256]);
    // Top bits as [h, k, l]: bits 2k..2k + 2 of qh[32h + l].
    let by_k = Shape::new(DType::U8, &[rows, n_blocks, 2, 4, 32]);
    let qh = field(b, |x: &BlockQ6_K| &x.qh)
        .reshape(&[rows, n_blocks, 2, 32])
        .broadcast_in_dim(by_k, &[0, 1, 2, 4]);
    let shift = Tensor::iota(by_k, 3) * 2.0;
    let high = qh
        .shift_right_logical(shift)
        .and(Tensor::scalar(3.0, DType::U8))
        .reshape(&[rows, n_blocks, 256]);
    let code = low.or(high.shift_left(Tensor::scalar(4.0, DType::U8)));
    let q = (code.convert(DType::F32) - 32.0).reshape(&[rows, n_blocks, 16, 16]);
    let sc = field(b, |x: &BlockQ6_K| &x.scales).bitcast(DType::I8);
    let sc = sc.convert(DType::F32);
    let d1 = spread(f16(b, |x: &BlockQ6_K| &x.d), &sc.dims()) * sc;
    spread(d1, &q.dims()) * q
}
