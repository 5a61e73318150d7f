//! `Embedding`: a table of vectors looked up by integer ids.

use crate::nn::tags::VOC;
use crate::nn::{dot_matrix, param};
use crate::quant::{self, blocks_format};
use crate::{Module, Tag, Tensor};

/// A `[voc, d]` table: `forward(ids)` gathers a `d`-vector per id (the result
/// has `ids`' axes, then `d`); `unembed(x)` contracts `x`'s `d` with the table
/// (tied output projection) giving a `voc` axis. The table may be f32 or a
/// block-format matrix ([`crate::quant`]): then only the rows looked up are
/// decoded.
#[derive(Module, Clone, Debug)]
pub struct Embedding {
    weight: Tensor,
    #[module(skip)]
    dim: Tag,
}

impl Embedding {
    /// A table of `n_vocab` vectors of axis `dim` `(tag, size)`.
    pub fn new(n_vocab: i64, dim: (&str, i64)) -> Embedding {
        Embedding {
            weight: param(&[(VOC, n_vocab), dim]),
            dim: Tag::new(dim.0),
        }
    }

    /// The table as stored, tagged `(voc, d)` (in blocks: `(voc, blocks:..)`).
    pub fn weight(&self) -> Tensor {
        self.weight
    }

    /// The table in f32, tagged `(voc, d)` (decoded in the graph when it is
    /// kept in blocks).
    #[track_caller]
    pub fn table(&self) -> Tensor {
        match blocks_format(&self.weight.shape()) {
            Some(_) => quant::dequantize(self.weight, self.dim.as_str()),
            None => self.weight,
        }
    }

    /// The vectors of integer `ids` (`stablehlo.gather`; out-of-range ids clamp).
    #[track_caller]
    pub fn forward(&self, ids: Tensor) -> Tensor {
        match blocks_format(&self.weight.shape()) {
            Some(_) => quant::rows(self.weight, ids, self.dim.as_str()),
            None => self.weight.gather(VOC, ids),
        }
    }

    /// Scores against every table row: `x`'s axis `dim` contracted, `voc` appended.
    #[track_caller]
    pub fn unembed(&self, x: Tensor, dim: &str) -> Tensor {
        dot_matrix(x, self.weight, dim)
    }
}
