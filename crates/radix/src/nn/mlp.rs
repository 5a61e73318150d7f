//! Feed-forward blocks: a GELU MLP (BERT) and a gated SiLU MLP (llama).

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

/// `down(silu(gate(x)) * up(x))` without biases (llama's SwiGLU).
#[derive(Module, Clone, Debug)]
pub struct GatedMlp {
    /// `d -> ff`.
    pub gate: Linear,
    /// `d -> ff`.
    pub up: Linear,
    /// `ff -> d`.
    pub down: Linear,
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
        self.down.forward(self.up.forward(x).gelu_erf())
    }
}

impl GatedMlp {
    /// A gated MLP from axis `dim` through a hidden axis `ff` of size `hidden`.
    pub fn new(dim: (&str, i64), hidden: i64) -> GatedMlp {
        GatedMlp {
            gate: Linear::new(dim, (FF, hidden)),
            up: Linear::new(dim, (FF, hidden)),
            down: Linear::new((FF, hidden), dim),
        }
    }

    /// Applies the block (`x` keeps its axes; the `dim` axis moves last).
    #[track_caller]
    pub fn forward(&self, x: Tensor) -> Tensor {
        let h = self.gate.forward(x).silu() * self.up.forward(x);
        self.down.forward(h)
    }
}
