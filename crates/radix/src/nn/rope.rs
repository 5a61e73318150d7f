//! Rotary position embeddings (RoFormer, <https://arxiv.org/abs/2104.09864>),
//! in both layouts found in checkpoints.

use crate::nn::broadcast_like;
use crate::nn::tags::HD;
use crate::{DType, Module, Size, Tensor};

/// Half the head width: one rotation angle each.
const HD2: &str = "hd2";
/// The two elements a rotation mixes.
const ROT: &str = "rot";

/// Which components of a head vector rotate together.
#[derive(Module, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// `(i, i + hd/2)` pairs: the Hugging Face llama layout (`rotate_half`).
    HalfSplit,
    /// `(2i, 2i + 1)` pairs: the original and llama.cpp (GGUF) layout.
    AdjacentPair,
}

/// Rotary embeddings over a head axis `hd` of even size: pair `j` turns by
/// `pos * theta^(-2j/hd)`. Angles, cosines and sines are computed in `f64`
/// from integer positions, then rounded to the input's dtype.
#[derive(Module, Debug, Clone, Copy)]
pub struct Rotary {
    head_dim: i64,
    theta: f64,
    layout: RopeLayout,
}

impl Rotary {
    /// Rotary embeddings for heads of `head_dim` with base `theta`.
    pub fn new(head_dim: i64, theta: f64, layout: RopeLayout) -> Rotary {
        Rotary {
            head_dim,
            theta,
            layout,
        }
    }

    /// `x` (with axes `hd` and the tags of `pos`) rotated by the integer
    /// positions `pos` (e.g. tagged `(b, s)`); the result has `x`'s shape.
    #[track_caller]
    pub fn forward(&self, x: Tensor, pos: Tensor) -> Tensor {
        let half = self.head_dim / 2;
        let inv: Vec<f64> = (0..half)
            .map(|j| self.theta.powf(-2.0 * j as f64 / self.head_dim as f64))
            .collect();
        let inv = Tensor::from_slice(&inv, &[half]).with_tags(&[HD2]);
        let pos = pos.convert(DType::F64);
        let mut axes: Vec<(&str, i64)> = vec![];
        for (t, d) in pos.shape().tags().iter().zip(pos.shape().dims()) {
            axes.push((t.map_or("", |t| t.as_str()), *d));
        }
        axes.push((HD2, half));
        let grid = crate::Shape::tagged(DType::F64, &axes);
        let angle = pos.broadcast(grid) * inv.broadcast(grid);
        let cos = angle.cos().convert(x.dtype());
        let sin = angle.sin().convert(x.dtype());

        let parts: [(&str, Size); 2] = match self.layout {
            RopeLayout::HalfSplit => [(ROT, 2.into()), (HD2, half.into())],
            RopeLayout::AdjacentPair => [(HD2, half.into()), (ROT, 2.into())],
        };
        let split = x.split_axis(HD, &parts);
        let at = split.shape().axis(ROT).unwrap_or(0);
        let x0 = split.slice(ROT, 0..1).squeeze(ROT);
        let x1 = split.slice(ROT, 1..2).squeeze(ROT);
        let (c, s) = (broadcast_like(cos, x0), broadcast_like(sin, x0));
        let y0 = x0 * c - x1 * s;
        let y1 = x1 * c + x0 * s;
        let pair = match self.layout {
            RopeLayout::HalfSplit => [ROT, HD2],
            RopeLayout::AdjacentPair => [HD2, ROT],
        };
        Tensor::stack(&[y0, y1], at, ROT).merge_axes(pair, HD)
    }
}
