//! `Linear`: `y = x W^T + b` contracting one tagged axis.

use crate::nn::{broadcast_like, dot_matrix, param};
use crate::quant::blocks_format;
use crate::{Module, Tag, Tensor};

/// A dense layer: contracts `x`'s axis tagged `in` with a weight stored
/// `[out, in]` (PyTorch's layout) and adds an optional bias; the result's new
/// axis is tagged `out`. The weight may be f32 or a block-format matrix
/// ([`crate::quant`]; see [`set_matrix_formats`](crate::nn::set_matrix_formats)).
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
        y.rename(OUT, self.output.as_str())
    }

    /// [`gelu_erf`](crate::nn::gelu_erf) of [`Linear::forward`]: for a
    /// weight in blocks with a bias, one call whose kernel applies the GELU
    /// in the pass that adds the bias
    /// ([`dot_bias_gelu_erf`](crate::quant::dot_bias_gelu_erf)); the same
    /// values either way.
    #[track_caller]
    pub fn forward_gelu_erf(&self, x: Tensor) -> Tensor {
        match self.bias {
            Some(b) if blocks_format(&self.weight.shape()).is_some() => {
                crate::quant::dot_bias_gelu_erf(x, self.weight, b, self.input.as_str())
                    .rename(OUT, self.output.as_str())
            }
            _ => crate::nn::gelu_erf(self.forward(x)),
        }
    }
}
