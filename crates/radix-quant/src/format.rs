//! The GGUF block formats: sizes and GGML type ids.
//!
//! A quantized tensor is a sequence of blocks, each `block_len` consecutive
//! elements of a row packed into `block_bytes` bytes (scales first or last, then
//! codes; `blocks.rs` declares each layout). The sizes and ids are those of
//! ggml's `ggml-common.h` and the `gguf` Python package's `GGML_QUANT_SIZES`.

use crate::{Error, blocks};

/// Elements in a K-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// A GGUF element format. F32, F16 and BF16 are "blocks" of one element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's own names, as GGUF tools print them
pub enum Format {
    F32,
    F16,
    BF16,
    /// 32 × i8 codes and one f16 scale `d`: `d·q`.
    Q8_0,
    /// 32 × 4-bit codes and `d`: `d·(q − 8)`.
    Q4_0,
    /// 32 × 4-bit codes, `d` and a minimum `m`: `d·q + m`.
    Q4_1,
    /// 32 × 5-bit codes (4 low bits packed in nibbles, the fifth in a u32) and
    /// `d`: `d·(q − 16)`.
    Q5_0,
    /// 32 × 5-bit codes, `d` and `m`: `d·q + m`.
    Q5_1,
    /// 256 elements in 8 sub-blocks of 32 with 6-bit scales and minimums:
    /// `d·sc·q − dmin·m`, 4-bit codes.
    Q4_K,
    /// As `Q4_K` with 5-bit codes.
    Q5_K,
    /// 256 elements in 16 sub-blocks of 16 with i8 scales: `d·sc·(q − 32)`,
    /// 6-bit codes.
    Q6_K,
}

impl Format {
    /// Every format this crate decodes, in GGML type id order.
    pub const ALL: [Format; 11] = [
        Format::F32,
        Format::F16,
        Format::Q4_0,
        Format::Q4_1,
        Format::Q5_0,
        Format::Q5_1,
        Format::Q8_0,
        Format::Q4_K,
        Format::Q5_K,
        Format::Q6_K,
        Format::BF16,
    ];

    /// The format of a GGML type id as GGUF tensor infos store it.
    pub fn from_ggml_type(id: u32) -> Result<Format, Error> {
        Format::ALL
            .into_iter()
            .find(|f| f.ggml_type() == id)
            .ok_or(Error::UnsupportedType(id))
    }

    /// The GGML type id (`enum ggml_type`).
    pub fn ggml_type(self) -> u32 {
        match self {
            Format::F32 => 0,
            Format::F16 => 1,
            Format::Q4_0 => 2,
            Format::Q4_1 => 3,
            Format::Q5_0 => 6,
            Format::Q5_1 => 7,
            Format::Q8_0 => 8,
            Format::Q4_K => 12,
            Format::Q5_K => 13,
            Format::Q6_K => 14,
            Format::BF16 => 30,
        }
    }

    /// ggml's name of the format (`"Q4_K"`), as GGUF tools print it.
    pub fn name(self) -> &'static str {
        match self {
            Format::F32 => "F32",
            Format::F16 => "F16",
            Format::BF16 => "BF16",
            Format::Q8_0 => "Q8_0",
            Format::Q4_0 => "Q4_0",
            Format::Q4_1 => "Q4_1",
            Format::Q5_0 => "Q5_0",
            Format::Q5_1 => "Q5_1",
            Format::Q4_K => "Q4_K",
            Format::Q5_K => "Q5_K",
            Format::Q6_K => "Q6_K",
        }
    }

    /// The format named `name` ([`Format::name`], any case).
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block.
    pub fn block_len(self) -> usize {
        match self {
            Format::F32 | Format::F16 | Format::BF16 => 1,
            Format::Q8_0 | Format::Q4_0 | Format::Q4_1 | Format::Q5_0 | Format::Q5_1 => 32,
            Format::Q4_K | Format::Q5_K | Format::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Format::F32 => 4,
            Format::F16 | Format::BF16 => 2,
            Format::Q8_0 => size_of::<blocks::BlockQ8_0>(),
            Format::Q4_0 => size_of::<blocks::BlockQ4_0>(),
            Format::Q4_1 => size_of::<blocks::BlockQ4_1>(),
            Format::Q5_0 => size_of::<blocks::BlockQ5_0>(),
            Format::Q5_1 => size_of::<blocks::BlockQ5_1>(),
            Format::Q4_K => size_of::<blocks::BlockQ4_K>(),
            Format::Q5_K => size_of::<blocks::BlockQ5_K>(),
            Format::Q6_K => size_of::<blocks::BlockQ6_K>(),
        }
    }

    /// The elements of a row of `row_bytes` bytes ([`Format::row_bytes`]
    /// inverted), or `None` if they are not whole blocks.
    pub fn row_cols(self, row_bytes: usize) -> Option<usize> {
        row_bytes
            .is_multiple_of(self.block_bytes())
            .then(|| row_bytes / self.block_bytes() * self.block_len())
    }

    /// The bytes of a row of `cols` elements, or `Err` if `cols` is not a
    /// whole number of blocks.
    pub fn row_bytes(self, cols: usize) -> Result<usize, Error> {
        let block_len = self.block_len();
        if !cols.is_multiple_of(block_len) {
            return Err(Error::PartialBlock {
                format: self,
                cols,
                block_len,
            });
        }
        Ok(cols / block_len * self.block_bytes())
    }
}
