//! The crate's one error enum.

use crate::Format;

/// Why a dequantization or a kernel call was refused. Every length is
/// checked before any work starts, so an `Err` leaves the output untouched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A GGML type id this crate does not decode.
    #[error("GGML type {0} is not supported")]
    UnsupportedType(u32),
    /// A row length that does not split into whole blocks of the format.
    #[error(
        "{format:?}: a row of {cols} elements is not a whole number of {block_len}-element blocks"
    )]
    PartialBlock {
        format: Format,
        cols: usize,
        block_len: usize,
    },
    /// A matrix packed in panels whose rows are not whole panels.
    #[error(
        "{rows} rows are not a whole number of {}-row panels",
        crate::PANEL_ROWS
    )]
    PartialPanel { rows: usize },
    /// A layout of split rows ([`crate::RowLayout::Split`]) asked of a
    /// format that has none.
    #[error("{0:?} rows have no split layout (only Q8_0's, Q4_0's, Q4_1's and Q5_0's)")]
    NoSplit(Format),
    /// A shape whose element or byte count overflows `usize`.
    #[error("{what}: the shape's size overflows usize")]
    TooLarge { what: &'static str },
    /// A slice of the wrong length; `what` names the argument.
    #[error("{what}: expected {expected} elements, got {got}")]
    Length {
        what: &'static str,
        expected: usize,
        got: usize,
    },
}
