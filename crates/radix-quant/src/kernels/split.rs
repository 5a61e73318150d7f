//! Q8_0 rows split at load ([`RowLayout::Split`]): each row's codes first,
//! then its scales, so that a decode dot reads a pair of blocks' codes in
//! one 64-byte load and sixteen blocks' scales in one 32-byte load.
//!
//! A file's Q8_0 block is 34 bytes: an f16 scale, then 32 signed codes.
//! Read as they are, a pair of blocks' codes is two 32-byte loads and an
//! insert, each code turned unsigned for `vpdpbusd` (an `xor`), and the
//! scales one gather per sixteen blocks, which Zen 4 runs as many loads.
//! Split, a row of `n` blocks is `n × 32` codes stored as unsigned bytes
//! (`w ^ 0x80`, that is `w + 128`, what the VNNI dot multiplies anyway),
//! then the `n` f16 scales: the same bytes, a row still a row (slicing
//! rows for tensor parallelism still works). Measured on a 2-core AMD
//! EPYC (Zen 4) with one SmolLM2 Q8_0 token's matrices
//! (`benches/matvec.rs`, `token Q8_0`): 9.07 → 6.93 ms on one thread,
//! 7.09 → 5.60 ms on the spinning pool, with equal results bit for bit
//! (the integer sums and the f32 operations are the same, in the same
//! order).
//!
//! Only the VNNI dot reads split rows in place; every other reader (the
//! other instruction sets' dots, a prompt's tiles, dequantization) joins
//! the rows it needs back into blocks first ([`join_rows`]).

use crate::blocks::{BlockQ8_0, F16, blocks, blocks_mut};
use crate::{Error, Format};

/// The order of the bytes inside each row of a blocks matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowLayout {
    /// Block after block, as files store them.
    #[default]
    Blocks,
    /// Q8_0 only: the row's codes as unsigned bytes (`w ^ 0x80`), then its
    /// f16 scales ([`split_rows`]).
    Split,
}

impl RowLayout {
    /// `Err` unless rows of `format` can have this layout.
    pub fn check(self, format: Format) -> Result<(), Error> {
        match self {
            RowLayout::Split if format != Format::Q8_0 => Err(Error::NoSplit(format)),
            _ => Ok(()),
        }
    }
}

/// Rows of Q8_0 `blocks` (whole rows of `cols` elements) in the split
/// layout, into `out` (as long as `blocks`). `Err` for another format or
/// lengths that are not whole rows.
pub fn split_rows(format: Format, cols: usize, blocks: &[u8], out: &mut [u8]) -> Result<(), Error> {
    let row_bytes = check(format, cols, blocks, out)?;
    for (row, out) in blocks
        .chunks_exact(row_bytes)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        split_row(row, out);
    }
    Ok(())
}

/// The inverse of [`split_rows`]: split Q8_0 rows back into blocks.
pub fn join_rows(format: Format, cols: usize, split: &[u8], out: &mut [u8]) -> Result<(), Error> {
    let row_bytes = check(format, cols, split, out)?;
    for (row, out) in split
        .chunks_exact(row_bytes)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        join_row(row, out);
    }
    Ok(())
}

/// Whole split rows of `row_bytes` each, joined into blocks (lengths
/// checked by the caller).
pub(super) fn joined(split: &[u8], row_bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; split.len()];
    for (row, out) in split
        .chunks_exact(row_bytes.max(1))
        .zip(out.chunks_exact_mut(row_bytes.max(1)))
    {
        join_row(row, out);
    }
    out
}

/// The bytes of a row of `cols`, after checking that `format` splits and
/// that `a` and `b` are the same whole number of rows.
fn check(format: Format, cols: usize, a: &[u8], b: &[u8]) -> Result<usize, Error> {
    RowLayout::Split.check(format)?;
    let row_bytes = format.row_bytes(cols)?;
    let whole = a.len().next_multiple_of(row_bytes.max(1));
    if a.len() != whole {
        return Err(Error::Length {
            what: "blocks (bytes)",
            expected: whole,
            got: a.len(),
        });
    }
    if b.len() != a.len() {
        return Err(Error::Length {
            what: "out (bytes)",
            expected: a.len(),
            got: b.len(),
        });
    }
    Ok(row_bytes)
}

fn split_row(row: &[u8], out: &mut [u8]) {
    let row: &[BlockQ8_0] = blocks(row);
    let (codes, scales) = out.split_at_mut(row.len() * 32);
    for ((block, codes), d) in row
        .iter()
        .zip(codes.chunks_exact_mut(32))
        .zip(scales.chunks_exact_mut(2))
    {
        for (c, &q) in codes.iter_mut().zip(&block.qs) {
            *c = q ^ 0x80;
        }
        d.copy_from_slice(&block.d.0);
    }
}

fn join_row(row: &[u8], out: &mut [u8]) {
    let out: &mut [BlockQ8_0] = blocks_mut(out);
    let (codes, scales) = row.split_at(out.len() * 32);
    for ((block, codes), d) in out
        .iter_mut()
        .zip(codes.chunks_exact(32))
        .zip(scales.chunks_exact(2))
    {
        for (q, &c) in block.qs.iter_mut().zip(codes) {
            *q = c ^ 0x80;
        }
        block.d = F16([d[0], d[1]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    /// Splitting and joining give back every byte; a split row holds the
    /// codes, flipped, then the scales.
    #[test]
    fn split_then_join_is_identity() {
        let (rows, cols) = (3, 96);
        let row_bytes = Format::Q8_0.row_bytes(cols).unwrap();
        let mut rng = Rng(7);
        let blocks: Vec<u8> = (0..rows * row_bytes).map(|_| rng.next() as u8).collect();
        let mut split = vec![0u8; blocks.len()];
        split_rows(Format::Q8_0, cols, &blocks, &mut split).unwrap();
        assert_eq!(split[0], blocks[2] ^ 0x80);
        assert_eq!(split[96..98], blocks[0..2]);
        assert_eq!(split[row_bytes + 32], blocks[row_bytes + 34 + 2] ^ 0x80);
        let mut back = vec![0u8; blocks.len()];
        join_rows(Format::Q8_0, cols, &split, &mut back).unwrap();
        assert_eq!(back, blocks);
        assert_eq!(joined(&split, row_bytes), blocks);
    }

    #[test]
    fn other_formats_and_lengths_are_refused() {
        let mut out = vec![0u8; 40];
        let err = split_rows(Format::Q4_1, 32, &[0u8; 20], &mut out[..20]).unwrap_err();
        assert_eq!(err, Error::NoSplit(Format::Q4_1));
        let err = split_rows(Format::Q8_0, 32, &[0u8; 40], &mut out).unwrap_err();
        assert!(matches!(err, Error::Length { expected: 68, .. }), "{err}");
        let err = join_rows(Format::Q8_0, 32, &[0u8; 34], &mut out).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Length {
                    what: "out (bytes)",
                    ..
                }
            ),
            "{err}"
        );
    }
}
