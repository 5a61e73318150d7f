//! `Embedding`: a table of vectors looked up by integer ids.

use crate::nn::param;
use crate::nn::tags::VOC;
use crate::{Module, Tensor};

/// A `[voc, d]` table: `forward(ids)` gathers a `d`-vector per id (the result
/// has `ids`' axes, then `d`); `unembed(x)` contracts `x`'s `d` with the table
/// (tied output projection) giving a `voc` axis.
#[derive(Module, Clone, Debug)]
pub struct Embedding {
    weight: Tensor,
}

impl Embedding {
    /// A table of `n_vocab` vectors of axis `dim` `(tag, size)`.
    pub fn new(n_vocab: i64, dim: (&str, i64)) -> Embedding {
        Embedding {
            weight: param(&[(VOC, n_vocab), dim]),
        }
    }

    /// The table, tagged `(voc, d)`.
    pub fn weight(&self) -> Tensor {
        self.weight
    }

    /// The vectors of integer `ids` (`stablehlo.gather`; out-of-range ids clamp).
    #[track_caller]
    pub fn forward(&self, ids: Tensor) -> Tensor {
        self.weight.gather(VOC, ids)
    }

    /// Scores against every table row: `x`'s axis `dim` contracted, `voc` appended.
    #[track_caller]
    pub fn unembed(&self, x: Tensor, dim: &str) -> Tensor {
        x.dot(self.weight, dim)
    }
}
