//! `Linear`: `y = x W^T + b` contracting one tagged axis, plus an optional
//! low-rank adapter's term ([`Lora`]).

use crate::nn::{Lora, broadcast_like, dot_matrix, param};
use crate::quant::blocks_format;
use crate::{Module, Tag, Tensor};

/// A dense layer: contracts `x`'s axis tagged `in` with a weight stored
/// `[out, in]` (PyTorch's layout) and adds an optional bias; the result's new
/// axis is tagged `out`. The weight may be f32 or a block-format matrix
/// ([`crate::quant`]; see [`set_matrix_formats`](crate::nn::set_matrix_formats)),
/// and the layer may hold a [`Lora`] adapter, whose term its forward adds.
///
/// ```
/// use radix::nn::Linear;
/// let lin = Linear::new(("d", 4), ("ff", 8));
/// assert_eq!(lin.weight().shape().dims(), &[8, 4]);
/// ```
#[derive(Module, Clone, Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    #[module(prefix = "")]
    lora: Option<Lora>,
    #[module(skip)]
    input: Tag,
    #[module(skip)]
    output: Tag,
}

/// The tag a weight's output axis carries inside the layer (so `in` and `out`
/// may have the same tag, as in `d -> d` projections).
pub(crate) const OUT: &str = "__out";

impl Linear {
    /// A linear map from axis `input` `(tag, size)` to a new axis `output`,
    /// without bias.
    pub fn new(input: (&str, i64), output: (&str, i64)) -> Linear {
        Linear {
            weight: param(&[(OUT, output.1), input]),
            bias: None,
            lora: None,
            input: Tag::new(input.0),
            output: Tag::new(output.0),
        }
    }

    /// The same layer with a bias of the output's size.
    pub fn with_bias(mut self) -> Linear {
        let n = self.weight.dim(OUT);
        self.bias = Some(param(&[(OUT, n)]));
        self
    }

    /// The same layer with a [`Lora`] adapter of rank `rank` whose term is
    /// multiplied by `scale` (`peft`'s `lora_alpha / r`), replacing any it
    /// had.
    pub fn with_lora(mut self, rank: i64, scale: f64) -> Linear {
        let (tag, size) = self.input_axis();
        let lora = Lora::new((tag, size), self.weight.dim(OUT), rank, scale);
        self.lora = Some(lora);
        self
    }

    /// The adapter, if the layer has one.
    pub fn lora(&self) -> Option<&Lora> {
        self.lora.as_ref()
    }

    /// The input axis `(tag, size)`.
    pub fn input_axis(&self) -> (&str, i64) {
        let cols = self.weight.shape().rank() - 1;
        let size = match crate::quant::blocks_format(&self.weight.shape()) {
            Some((_, cols)) => cols,
            None => self.weight.shape().dims()[cols],
        };
        (self.input.as_str(), size)
    }

    /// The weight, `[out, in]` (in blocks: `[out, row_bytes]`).
    pub fn weight(&self) -> Tensor {
        self.weight
    }

    /// `x` with its `in` axis replaced by an `out` axis (placed last).
    #[track_caller]
    pub fn forward(&self, x: Tensor) -> Tensor {
        let input = self.input.as_str();
        let blocks = blocks_format(&self.weight.shape()).is_some();
        let y = match self.bias {
            // The kernel adds the bias to the products it writes.
            Some(b) if blocks => crate::quant::dot_bias(x, self.weight, b, input),
            Some(b) => {
                let y = dot_matrix(x, self.weight, input);
                y + broadcast_like(b, y)
            }
            None => dot_matrix(x, self.weight, input),
        };
        let y = match &self.lora {
            Some(lora) => y + lora.delta(x, input),
            None => y,
        };
        y.rename(OUT, self.output.as_str())
    }

    /// [`Linear::forward`] of each of `layers` on the same `x` (a layer's
    /// query, key and value projections): where every weight is in blocks,
    /// without bias or adapter, one call ([`quant::dots`](crate::quant::dots))
    /// whose kernel quantizes a decode step's token once and multiplies
    /// all the layers' rows as one job; the same values either way.
    #[track_caller]
    pub fn forward_each<const N: usize>(x: Tensor, layers: [&Linear; N]) -> [Tensor; N] {
        let shared = layers.iter().all(|l| {
            l.bias.is_none()
                && l.lora.is_none()
                && l.input == layers[0].input
                && blocks_format(&l.weight.shape()).is_some()
        });
        // Loops, not closures, so that each node keeps the caller's line.
        let mut out = [x; N];
        if N < 2 || !shared {
            for (y, l) in out.iter_mut().zip(layers) {
                *y = l.forward(x);
            }
            return out;
        }
        let ws: Vec<Tensor> = layers.iter().map(|l| l.weight).collect();
        let ys = crate::quant::dots(x, &ws, layers[0].input.as_str());
        for ((y, l), fused) in out.iter_mut().zip(layers).zip(ys) {
            *y = fused.rename(OUT, l.output.as_str());
        }
        out
    }

    /// [`gelu_erf`](crate::nn::gelu_erf) of [`Linear::forward`]: for a
    /// weight in blocks with a bias, one call whose kernel applies the GELU
    /// in the pass that adds the bias
    /// ([`dot_bias_gelu_erf`](crate::quant::dot_bias_gelu_erf)); the same
    /// values either way.
    #[track_caller]
    pub fn forward_gelu_erf(&self, x: Tensor) -> Tensor {
        match self.bias {
            Some(b) if blocks_format(&self.weight.shape()).is_some() && self.lora.is_none() => {
                crate::quant::dot_bias_gelu_erf(x, self.weight, b, self.input.as_str())
                    .rename(OUT, self.output.as_str())
            }
            _ => crate::nn::gelu_erf(self.forward(x)),
        }
    }
}
