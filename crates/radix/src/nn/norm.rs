//! Normalisations over one tagged axis: `LayerNorm` and `RmsNorm`.

use crate::nn::param;
use crate::{Module, Tag, Tensor};

/// `(x - mean) / sqrt(var + eps) * weight + bias` over axis `dim`
/// (biased variance, as PyTorch).
#[derive(Module, Clone, Debug)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    #[module(skip)]
    dim: Tag,
    #[module(skip)]
    eps: f64,
}

/// `x / sqrt(mean(x^2) + eps) * (offset + weight)` over axis `dim`
/// (`offset` is 0 but for checkpoints that store `weight - 1`, as Gemma's).
#[derive(Module, Clone, Debug)]
pub struct RmsNorm {
    weight: Tensor,
    #[module(skip)]
    dim: Tag,
    #[module(skip)]
    eps: f64,
    #[module(skip)]
    offset: f64,
}

impl LayerNorm {
    /// A layer norm over axis `dim` `(tag, size)`.
    pub fn new(dim: (&str, i64), eps: f64) -> LayerNorm {
        LayerNorm {
            weight: param(&[dim]),
            bias: param(&[dim]),
            dim: Tag::new(dim.0),
            eps,
        }
    }

    /// Normalises `x` over the axis: on the CPU plugin one kernel
    /// (`radix.layer_norm`), elsewhere the formula in ops.
    #[track_caller]
    pub fn forward(&self, x: Tensor) -> Tensor {
        let params = (self.weight, self.bias);
        super::layer_norm::layer_norm(x, None, params, self.dim.as_str(), self.eps)
    }

    /// Normalises `x + residual` (a residual connection and the norm after
    /// it, post-norm as BERT): the same as `forward(x + residual)`, with
    /// the sum taken in the norm's kernel on the CPU plugin.
    #[track_caller]
    pub fn forward_residual(&self, x: Tensor, residual: Tensor) -> Tensor {
        let params = (self.weight, self.bias);
        super::layer_norm::layer_norm(x, Some(residual), params, self.dim.as_str(), self.eps)
    }
}

impl RmsNorm {
    /// An RMS norm over axis `dim` `(tag, size)`.
    pub fn new(dim: (&str, i64), eps: f64) -> RmsNorm {
        RmsNorm {
            weight: param(&[dim]),
            dim: Tag::new(dim.0),
            eps,
            offset: 0.0,
        }
    }

    /// The same norm scaling by `offset + weight`.
    pub fn with_offset(self, offset: f64) -> RmsNorm {
        RmsNorm { offset, ..self }
    }

    /// Normalises `x` over the axis: on the CPU plugin one kernel
    /// (`radix.rms_norm`), each row's bits independent of the rows beside
    /// it; elsewhere the formula in ops.
    #[track_caller]
    pub fn forward(&self, x: Tensor) -> Tensor {
        let w = match self.offset {
            0.0 => self.weight,
            offset => self.weight + offset,
        };
        super::rms_norm::rms_norm(x, w, self.dim.as_str(), self.eps)
    }
}
