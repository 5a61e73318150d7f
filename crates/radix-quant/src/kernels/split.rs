//! Q8_0, Q4_0, Q4_1 and Q5_0 rows split at load ([`RowLayout::Split`]):
//! each row's codes first, then its scales (and Q4_1's minimums), so that a
//! decode dot reads two Q8_0 blocks' or four 4- or 5-bit blocks' codes in
//! one 64-byte load and sixteen blocks' scales in one 32-byte load. A
//! Q5_0 row's fifth bits (4 bytes a block) sit between its nibbles and its
//! scales: a quad's are one 16-byte load and a byte shuffle, where blocks
//! take a load per block.
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
//! (`benches/matvec.rs`, `token Q8_0`): 8.87–9.33 → 6.70–8.25 ms on one
//! thread, 6.06–7.36 → 5.85–6.64 ms on the spinning pool, with equal
//! results bit for bit (the integer sums and the f32 operations are the
//! same, in the same order).
//!
//! A Q4_1 block is 20 bytes: its f16 scale `d`, its f16 minimum `m`, then
//! 16 bytes of nibbles. Read as they are, a quad of blocks' codes is four
//! 16-byte loads and three inserts, and their scales and minimums two
//! masked loads and a word permute per window of six blocks. Split, a row
//! of `n` blocks is `n × 16` bytes of nibbles, then the `n` scales, then
//! the `n` minimums: a quad's codes are one 64-byte load, 16 blocks'
//! scales and minimums two 32-byte loads. One SmolLM2 Q4_1 token's
//! matrices (its Q8_0 head split too): 8.33 → 5.25–5.32 ms on one thread,
//! 4.76–5.63 → 3.94–4.61 ms on the spinning pool (two runs each).
//!
//! Only the VNNI dot reads split rows in place; every other reader (the
//! other instruction sets' dots, a prompt's tiles, dequantization) joins
//! the rows it needs back into blocks first ([`join_rows`]).

use std::ops::Range;

use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ8_0, field_range};
use crate::{Error, Format};

/// The order of the bytes inside each row of a blocks matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowLayout {
    /// Block after block, as files store them.
    #[default]
    Blocks,
    /// Q8_0, Q4_0, Q4_1 and Q5_0 only ([`split_rows`]): a Q8_0 row's
    /// codes as unsigned bytes (`w ^ 0x80`), then its f16 scales; a Q4_0
    /// row's packed nibbles (16 bytes a block, as in the block), then its
    /// f16 scales; a Q4_1 row's nibbles, then its f16 scales `d`, then its
    /// f16 minimums `m`; a Q5_0 row's nibbles, then its fifth bits (4 bytes
    /// a block), then its scales.
    Split,
}

impl RowLayout {
    /// `Err` unless rows of `format` can have this layout.
    pub fn check(self, format: Format) -> Result<(), Error> {
        match self {
            RowLayout::Split if !SPLITS.contains(&format) => Err(Error::NoSplit(format)),
            _ => Ok(()),
        }
    }
}

/// The formats whose rows split ([`RowLayout::Split`]).
const SPLITS: [Format; 4] = [Format::Q8_0, Format::Q4_0, Format::Q4_1, Format::Q5_0];

/// Rows of `format` `blocks` (Q8_0, Q4_0, Q4_1 or Q5_0, whole rows of `cols`
/// elements) in the split layout, into `out` (as long as `blocks`). `Err`
/// for another format or lengths that are not whole rows.
pub fn split_rows(format: Format, cols: usize, blocks: &[u8], out: &mut [u8]) -> Result<(), Error> {
    let row_bytes = check(format, cols, blocks, out)?;
    each_row(format, row_bytes, (blocks, out), split_row);
    Ok(())
}

/// The inverse of [`split_rows`]: split rows back into blocks.
pub fn join_rows(format: Format, cols: usize, split: &[u8], out: &mut [u8]) -> Result<(), Error> {
    let row_bytes = check(format, cols, split, out)?;
    each_row(format, row_bytes, (split, out), join_row);
    Ok(())
}

/// Whole split rows of `format`, joined into blocks (the format and the
/// lengths checked by the caller).
pub(super) fn joined(format: Format, split: &[u8], row_bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; split.len()];
    each_row(format, row_bytes, (split, &mut out), join_row);
    out
}

/// A row of `format` rearranged from `from` into `to` (split or joined),
/// given the format's [`parts`].
type RowFn = fn(Format, &[Range<usize>], &[u8], &mut [u8]);

/// `row` on each row of `row_bytes` of `from` and of `to` (lengths
/// checked by the caller; rows of no bytes have nothing to move), with
/// the format's parts found once.
fn each_row(format: Format, row_bytes: usize, (from, to): (&[u8], &mut [u8]), row: RowFn) {
    if row_bytes == 0 {
        return;
    }
    let parts = parts(format);
    for (from, to) in from
        .chunks_exact(row_bytes)
        .zip(to.chunks_exact_mut(row_bytes))
    {
        row(format, &parts, from, to);
    }
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

/// A split row's parts, in order: each the same field of every block,
/// as the block's byte range (`blocks.rs`'s types say where). Q8_0's
/// first part, its codes, is stored flipped (`w ^ 0x80`). Empty for a
/// format whose rows do not split.
pub fn split_parts(format: Format) -> Vec<Range<usize>> {
    if RowLayout::Split.check(format).is_err() {
        return vec![];
    }
    parts(format)
}

fn parts(format: Format) -> Vec<Range<usize>> {
    match format {
        Format::Q8_0 => vec![
            field_range(|b: &BlockQ8_0| &b.qs),
            field_range(|b: &BlockQ8_0| &b.d),
        ],
        Format::Q4_0 => vec![
            field_range(|b: &BlockQ4_0| &b.qs),
            field_range(|b: &BlockQ4_0| &b.d),
        ],
        Format::Q4_1 => vec![
            field_range(|b: &BlockQ4_1| &b.qs),
            field_range(|b: &BlockQ4_1| &b.d),
            field_range(|b: &BlockQ4_1| &b.m),
        ],
        _ => vec![
            field_range(|b: &BlockQ5_0| &b.qs),
            field_range(|b: &BlockQ5_0| &b.qh),
            field_range(|b: &BlockQ5_0| &b.d),
        ],
    }
}

/// Q8_0's codes as the unsigned bytes the VNNI dot multiplies (`w ^ 0x80`)
/// and back.
fn flip(codes: &mut [u8]) {
    codes.iter_mut().for_each(|c| *c ^= 0x80);
}

/// For each of `parts` of each block of a row of `row_bytes` in `format`,
/// `f(in blocks, in the split row)`: the two byte ranges of the row that
/// hold that field of that block.
fn each_part(
    format: Format,
    parts: &[Range<usize>],
    row_bytes: usize,
    mut f: impl FnMut(Range<usize>, Range<usize>),
) {
    let bb = format.block_bytes();
    let n = row_bytes / bb;
    let mut at = 0;
    for field in parts {
        let len = field.len();
        for b in 0..n {
            let split = at + b * len;
            f(b * bb + field.start..b * bb + field.end, split..split + len);
        }
        at += n * len;
    }
}

/// One row of `format` blocks, split into `out`.
fn split_row(format: Format, parts: &[Range<usize>], row: &[u8], out: &mut [u8]) {
    each_part(format, parts, row.len(), |block, split| {
        out[split].copy_from_slice(&row[block]);
    });
    if format == Format::Q8_0 {
        let n_blocks = row.len() / format.block_bytes();
        flip(&mut out[..n_blocks * parts[0].len()]);
    }
}

/// One split row of `format`, joined into blocks in `out`.
fn join_row(format: Format, parts: &[Range<usize>], row: &[u8], out: &mut [u8]) {
    each_part(format, parts, row.len(), |block, split| {
        out[block].copy_from_slice(&row[split]);
    });
    if format == Format::Q8_0 {
        // The codes, the first part, back to signed.
        each_part(format, &parts[..1], row.len(), |block, _| {
            flip(&mut out[block])
        });
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
        assert_eq!(joined(Format::Q8_0, &split, row_bytes), blocks);
        // Q4_1: nibbles, then the d's, then the m's.
        let row_bytes = Format::Q4_1.row_bytes(cols).unwrap();
        let blocks: Vec<u8> = (0..rows * row_bytes).map(|_| rng.next() as u8).collect();
        let mut split = vec![0u8; blocks.len()];
        split_rows(Format::Q4_1, cols, &blocks, &mut split).unwrap();
        assert_eq!(split[..16], blocks[4..20]);
        assert_eq!(split[48..50], blocks[0..2]);
        assert_eq!(split[54..56], blocks[2..4]);
        assert_eq!(split[58..60], blocks[42..44]);
        let mut back = vec![0u8; blocks.len()];
        join_rows(Format::Q4_1, cols, &split, &mut back).unwrap();
        assert_eq!(back, blocks);
    }

    /// Rows of no elements split and join to nothing.
    #[test]
    fn empty_rows_move_nothing() {
        for format in SPLITS {
            split_rows(format, 0, &[], &mut []).unwrap();
            join_rows(format, 0, &[], &mut []).unwrap();
            assert!(joined(format, &[], 0).is_empty());
        }
    }

    #[test]
    fn other_formats_and_lengths_are_refused() {
        let mut out = vec![0u8; 40];
        let err = split_rows(Format::Q5_1, 32, &[0u8; 24], &mut out[..24]).unwrap_err();
        assert_eq!(err, Error::NoSplit(Format::Q5_1));
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
