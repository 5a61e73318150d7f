//! One `#[repr(C)]` type per block format, laid out as ggml's
//! `ggml-common.h` declares its `block_q4_1`, `block_q4_K`, ...: the one
//! place a layout is written. The reference decoder, the kernels and radix's
//! in-graph fallback read the fields by name, and [`Format::block_bytes`] is
//! the types' size, asserted at compile time against ggml's.
//!
//! Every field is made of bytes (an f16 scale is [`F16`], two little-endian
//! bytes), so a block has alignment 1 and any slice of whole blocks is a
//! slice of these types, wherever a file or a device buffer placed it.

use bytemuck::{Pod, Zeroable};

use crate::{Format, QK_K};

/// An IEEE half-precision number as a block stores it: two little-endian
/// bytes.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct F16(pub [u8; 2]);

impl F16 {
    /// The bits.
    #[inline(always)]
    pub fn bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }

    /// The value, widened (exactly) to f32.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        crate::dequantize::f16_to_f32(self.bits())
    }

    /// The f16 nearest to `x` (ties to even).
    pub fn from_f32(x: f32) -> F16 {
        F16(half::f16::from_f32(x).to_le_bytes())
    }
}

/// A block of a quantized format: a plain-bytes type of its format's size.
pub trait Block: Pod {
    /// The format whose blocks these are.
    const FORMAT: Format;
}

/// `bytes` as the blocks it holds.
///
/// # Panics
/// If `bytes` is not a whole number of blocks (callers check lengths first).
#[inline(always)]
pub fn blocks<B: Block>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}

/// `bytes`, exactly one block, as that block.
///
/// # Panics
/// If `bytes` is not one block long.
#[inline(always)]
pub fn block<B: Block>(bytes: &[u8]) -> &B {
    bytemuck::from_bytes(bytes)
}

/// `bytes` as the blocks it holds, writable.
///
/// # Panics
/// If `bytes` is not a whole number of blocks.
#[inline(always)]
pub fn blocks_mut<B: Block>(bytes: &mut [u8]) -> &mut [B] {
    bytemuck::cast_slice_mut(bytes)
}

/// The byte range a field takes in its block, given as an accessor:
/// `field_range(|b: &BlockQ4_1| &b.qs)` is `4..20`. For code that reads
/// blocks as bytes (radix slices them in traced programs).
pub fn field_range<B: Block, F>(field: impl Fn(&B) -> &F) -> std::ops::Range<usize> {
    let b = B::zeroed();
    let start = field(&b) as *const F as usize - &b as *const B as usize;
    start..start + size_of::<F>()
}

/// The byte offsets of the f16 fields (scales and minimums) in a block of
/// `format`, none for the float formats: where tests put extreme or zero
/// scales.
pub fn f16_offsets(format: Format) -> Vec<usize> {
    fn at<B: Block>(f: impl Fn(&B) -> &F16) -> usize {
        field_range(f).start
    }
    match format {
        Format::F32 | Format::F16 | Format::BF16 => vec![],
        Format::Q8_0 => vec![at(|b: &BlockQ8_0| &b.d)],
        Format::Q4_0 => vec![at(|b: &BlockQ4_0| &b.d)],
        Format::Q4_1 => vec![at(|b: &BlockQ4_1| &b.d), at(|b: &BlockQ4_1| &b.m)],
        Format::Q5_0 => vec![at(|b: &BlockQ5_0| &b.d)],
        Format::Q5_1 => vec![at(|b: &BlockQ5_1| &b.d), at(|b: &BlockQ5_1| &b.m)],
        Format::Q4_K => vec![at(|b: &BlockQ4_K| &b.d), at(|b: &BlockQ4_K| &b.dmin)],
        Format::Q5_K => vec![at(|b: &BlockQ5_K| &b.d), at(|b: &BlockQ5_K| &b.dmin)],
        Format::Q6_K => vec![at(|b: &BlockQ6_K| &b.d)],
    }
}

macro_rules! block_types {
    ($($(#[$doc:meta])* $name:ident: $format:ident, $size:expr,
       { $($(#[$fdoc:meta])* $field:ident: $ty:ty,)* })*) => {$(
        $(#[$doc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Pod, Zeroable)]
        #[allow(non_camel_case_types)] // ggml's own names
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        const _: () = assert!(size_of::<$name>() == $size, "ggml's block size");

        impl Block for $name {
            const FORMAT: Format = Format::$format;
        }
    )*};
}

block_types! {
    /// 32 signed 8-bit codes and a scale: `d·q`.
    BlockQ8_0: Q8_0, 34, {
        /// The scale.
        d: F16,
        /// The codes, each an `i8` stored as its byte.
        qs: [u8; 32],
    }
    /// 32 4-bit codes and a scale: `d·(q − 8)`.
    BlockQ4_0: Q4_0, 18, {
        /// The scale.
        d: F16,
        /// Elements 0..16 in the low nibbles, 16..32 in the high ones.
        qs: [u8; 16],
    }
    /// 32 4-bit codes, a scale and a minimum: `d·q + m`.
    BlockQ4_1: Q4_1, 20, {
        /// The scale.
        d: F16,
        /// The minimum.
        m: F16,
        /// Elements 0..16 in the low nibbles, 16..32 in the high ones.
        qs: [u8; 16],
    }
    /// 32 5-bit codes and a scale: `d·(q − 16)`.
    BlockQ5_0: Q5_0, 22, {
        /// The scale.
        d: F16,
        /// Bit `j` of this little-endian u32 is bit 4 of element `j`.
        qh: [u8; 4],
        /// The low 4 bits, as `BlockQ4_0::qs` holds them.
        qs: [u8; 16],
    }
    /// 32 5-bit codes, a scale and a minimum: `d·q + m`.
    BlockQ5_1: Q5_1, 24, {
        /// The scale.
        d: F16,
        /// The minimum.
        m: F16,
        /// Bit `j` of this little-endian u32 is bit 4 of element `j`.
        qh: [u8; 4],
        /// The low 4 bits, as `BlockQ4_0::qs` holds them.
        qs: [u8; 16],
    }
    /// 256 elements in 8 sub-blocks of 32, 4-bit codes with 6-bit scales
    /// and minimums: `d·sc·q − dmin·m`.
    BlockQ4_K: Q4_K, 144, {
        /// The super-block's scale of the sub-block scales.
        d: F16,
        /// The super-block's scale of the sub-block minimums.
        dmin: F16,
        /// 8 scales and 8 minimums of 6 bits (`k_scale_min` unpacks them).
        scales: [u8; 12],
        /// Per 32 bytes, sub-block `2i` in the low nibbles, `2i + 1` in the high.
        qs: [u8; QK_K / 2],
    }
    /// As `BlockQ4_K` with a fifth bit per code.
    BlockQ5_K: Q5_K, 176, {
        /// The super-block's scale of the sub-block scales.
        d: F16,
        /// The super-block's scale of the sub-block minimums.
        dmin: F16,
        /// 8 scales and 8 minimums of 6 bits.
        scales: [u8; 12],
        /// Bit `s` of byte `l` is bit 4 of element `l` of sub-block `s`.
        qh: [u8; QK_K / 8],
        /// The low 4 bits, as `BlockQ4_K::qs` holds them.
        qs: [u8; QK_K / 2],
    }
    /// 256 elements in 16 sub-blocks of 16, 6-bit codes with 8-bit scales:
    /// `d·sc·(q − 32)`.
    BlockQ6_K: Q6_K, 210, {
        /// The low 4 bits of the codes.
        ql: [u8; QK_K / 2],
        /// The top 2 bits of the codes.
        qh: [u8; QK_K / 4],
        /// The sub-block scales, each an `i8` stored as its byte.
        scales: [u8; QK_K / 16],
        /// The super-block's scale.
        d: F16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_where_ggml_puts_them() {
        assert_eq!(field_range(|b: &BlockQ4_1| &b.qs), 4..20);
        assert_eq!(field_range(|b: &BlockQ5_0| &b.qs), 6..22);
        assert_eq!(field_range(|b: &BlockQ5_K| &b.qh), 16..48);
        assert_eq!(field_range(|b: &BlockQ6_K| &b.d), 208..210);
        assert_eq!(f16_offsets(Format::Q5_1), [0, 2]);
        assert_eq!(f16_offsets(Format::Q6_K), [208]);
    }

    #[test]
    fn a_row_is_a_slice_of_blocks_at_any_address() {
        let bytes: Vec<u8> = (0..=40).collect();
        // One byte in: an odd address, still whole blocks.
        let row: &[BlockQ4_1] = blocks(&bytes[1..41]);
        assert_eq!(row.len(), 2);
        assert_eq!(row[1].d.0, [21, 22]);
        assert_eq!(row[1].qs[0], 25);
    }
}
