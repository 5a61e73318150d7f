//! `Lora`: a low-rank adapter on a linear layer (Hu et al. 2021,
//! <https://arxiv.org/abs/2106.09685>), `y = W x + b + (alpha / r) B (A x)`,
//! as Hugging Face `peft` computes it (`peft/tuners/lora/layer.py`).

use crate::nn::linear::OUT;
use crate::nn::param;
use crate::{Module, Tensor};

/// The tag of an adapter's rank axis (the rows of `A`, the columns of `B`).
/// A tensor with an axis of this tag belongs to an adapter, which is how
/// [`Lora::is_adapter`] tells adapters from the weights they adapt.
pub const RANK: &str = "lora_r";

/// The tag of `B`'s rows inside the adapter (not [`Linear`]'s own output
/// tag, so that [`set_matrix_formats`] leaves `B` in f32).
///
/// [`Linear`]: crate::nn::Linear
/// [`set_matrix_formats`]: crate::nn::set_matrix_formats
const B_ROWS: &str = "lora_out";

/// The adapter of one [`Linear`](crate::nn::Linear) layer: `A` `[r, in]`
/// and `B` `[out, r]` in f32, stored under `peft`'s names (`lora_A.weight`,
/// `lora_B.weight`), and the scale (`peft`'s `alpha / r`, or `alpha /
/// sqrt(r)` with `use_rslora`). Held by the layer
/// ([`Linear::with_lora`](crate::nn::Linear::with_lora)), whose forward
/// adds the adapter's term to its own.
///
/// ```
/// use radix::nn::Linear;
/// let lin = Linear::new(("d", 4), ("ff", 8)).with_lora(2, 8.0);
/// let lora = lin.lora().expect("an adapter");
/// assert_eq!(lora.a().shape().dims(), &[2, 4]);
/// assert_eq!(lora.b().shape().dims(), &[8, 2]);
/// assert_eq!(lora.scale(), 8.0);
/// ```
#[derive(Module, Clone, Debug)]
pub struct Lora {
    #[module(rename = "lora_A.weight")]
    a: Tensor,
    #[module(rename = "lora_B.weight")]
    b: Tensor,
    #[module(skip)]
    scale: f64,
}

impl Lora {
    /// An adapter of rank `rank` from the axis `input` `(tag, size)` to
    /// `out` outputs, its term multiplied by `scale`.
    pub fn new(input: (&str, i64), out: i64, rank: i64, scale: f64) -> Lora {
        Lora {
            a: param(&[(RANK, rank), input]),
            b: param(&[(B_ROWS, out), (RANK, rank)]),
            scale,
        }
    }

    /// `A`, `[r, in]`.
    pub fn a(&self) -> Tensor {
        self.a
    }

    /// `B`, `[out, r]`.
    pub fn b(&self) -> Tensor {
        self.b
    }

    /// What `B (A x)` is multiplied by.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Whether `t` is an adapter's tensor (it has an axis tagged [`RANK`]).
    pub fn is_adapter(t: &Tensor) -> bool {
        t.shape().axis(RANK).is_some()
    }

    /// `scale * B (A x)`, contracting `x`'s axis `input`: `x`'s other axes,
    /// then the layer's output axis (tagged as [`Linear`](crate::nn::Linear)
    /// tags it inside its forward).
    #[track_caller]
    pub(crate) fn delta(&self, x: Tensor, input: &str) -> Tensor {
        let h = x.dot(self.a, input).dot(self.b, RANK);
        (h * self.scale).rename(B_ROWS, OUT)
    }
}
