//! Feed-forward blocks: a GELU MLP (BERT) and a gated MLP (llama's SwiGLU,
//! Gemma's GeGLU).

use crate::nn::Linear;
use crate::nn::tags::FF;
use crate::{Module, Tensor};

/// `down(gelu(up(x)))` with biases, exact (erf) GELU as BERT uses.
#[derive(Module, Clone, Debug)]
pub struct Mlp {
    /// `d -> ff`.
    pub up: Linear,
    /// `ff -> d`.
    pub down: Linear,
}

/// `down(act(gate(x)) * up(x))` without biases: `act` is SiLU (llama's
/// SwiGLU) unless [`GatedMlp::with_gelu_tanh`] (Gemma's GeGLU).
#[derive(Module, Clone, Debug)]
pub struct GatedMlp {
    /// `d -> ff`.
    pub gate: Linear,
    /// `d -> ff`.
    pub up: Linear,
    /// `ff -> d`.
    pub down: Linear,
    /// Whether the gate is GELU (tanh form) rather than SiLU.
    #[module(skip)]
    gelu_tanh: bool,
}

impl Mlp {
    /// An MLP from axis `dim` through a hidden axis `ff` of size `hidden`.
    pub fn new(dim: (&str, i64), hidden: i64) -> Mlp {
        Mlp {
            up: Linear::new(dim, (FF, hidden)).with_bias(),
            down: Linear::new((FF, hidden), dim).with_bias(),
        }
    }

    /// Applies the block (`x` keeps its axes; the `dim` axis moves last).
    #[track_caller]
    pub fn forward(&self, x: Tensor) -> Tensor {
        self.down.forward(self.up.forward_gelu_erf(x))
    }
}

impl GatedMlp {
    /// A gated MLP from axis `dim` through a hidden axis `ff` of size `hidden`.
    pub fn new(dim: (&str, i64), hidden: i64) -> GatedMlp {
        GatedMlp {
            gate: Linear::new(dim, (FF, hidden)),
            up: Linear::new(dim, (FF, hidden)),
            down: Linear::new((FF, hidden), dim),
            gelu_tanh: false,
        }
    }

    /// The same block gated by GELU's tanh form instead of SiLU.
    pub fn with_gelu_tanh(self) -> GatedMlp {
        GatedMlp {
            gelu_tanh: true,
            ..self
        }
    }

    /// Applies the block (`x` keeps its axes; the `dim` axis moves last).
    #[track_caller]
    pub fn forward(&self, x: Tensor) -> Tensor {
        let [gate, up] = Linear::forward_each(x, [&self.gate, &self.up]);
        let gate = if self.gelu_tanh {
            gate.gelu_tanh()
        } else {
            gate.silu()
        };
        self.down.forward(gate * up)
    }
}
