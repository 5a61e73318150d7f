//! Rotary position embeddings (RoFormer, <https://arxiv.org/abs/2104.09864>),
//! in both layouts found in checkpoints, with the frequency scalings that
//! stretch a model's context: linear (position interpolation), Llama 3's
//! and YaRN (<https://arxiv.org/abs/2309.00071>), computed as Hugging Face
//! `transformers` does (`modeling_rope_utils.py`).

use super::rotate::HD2;
use crate::{DType, Module, Tensor};

/// Which components of a head vector rotate together.
#[derive(Module, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// `(i, i + hd/2)` pairs: the Hugging Face llama layout (`rotate_half`).
    HalfSplit,
    /// `(2i, 2i + 1)` pairs: the original and llama.cpp (GGUF) layout.
    AdjacentPair,
}

/// How the rotation frequencies `theta^(-2j/hd)` are stretched.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RopeScaling {
    /// As trained.
    #[default]
    None,
    /// Every frequency divided by `factor` (position interpolation).
    Linear {
        /// The stretch.
        factor: f64,
    },
    /// Llama 3.1: wavelengths longer than `original / low_freq_factor`
    /// divided by `factor`, shorter than `original / high_freq_factor`
    /// kept, those between blended smoothly.
    Llama3 {
        /// The stretch of the long wavelengths.
        factor: f64,
        /// Bounds the long wavelengths.
        low_freq_factor: f64,
        /// Bounds the short wavelengths.
        high_freq_factor: f64,
        /// The context the model was trained on.
        original: f64,
    },
    /// YaRN: frequencies that turn fewer than `beta_slow` times over the
    /// original context are divided by `factor`, those that turn more than
    /// `beta_fast` times are kept, a linear ramp between; cosines and sines
    /// are multiplied by `attention_factor`.
    Yarn {
        /// The stretch.
        factor: f64,
        /// The context the model was trained on.
        original: f64,
        /// Rotations above which a frequency is kept.
        beta_fast: f64,
        /// Rotations below which a frequency is divided.
        beta_slow: f64,
        /// The factor on cosines and sines (`0.1 ln(factor) + 1` unless a
        /// checkpoint says otherwise).
        attention_factor: f64,
    },
    /// Frequency `j` divided by `factors[j]` (how GGUF files store Llama 3
    /// scaling: a `rope_freqs` tensor).
    Factors(Vec<f64>),
}

impl RopeScaling {
    /// YaRN's default attention factor for a stretch of `factor`.
    pub fn yarn_attention_factor(factor: f64) -> f64 {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        }
    }
}

/// Rotary embeddings over a head axis `hd` of even size: pair `j` turns by
/// `pos * theta^(-2j/hd)` (then scaled, see [`RopeScaling`]). Angles,
/// cosines and sines are computed in `f64` from integer positions, then
/// rounded to the input's dtype.
#[derive(Module, Debug, Clone)]
pub struct Rotary {
    layout: RopeLayout,
    #[module(skip)]
    inv_freq: Vec<f64>,
    #[module(skip)]
    attention_factor: f64,
}

impl Rotary {
    /// Rotary embeddings for heads of `head_dim` with base `theta`.
    pub fn new(head_dim: i64, theta: f64, layout: RopeLayout) -> Rotary {
        Rotary::scaled(head_dim, theta, layout, &RopeScaling::None)
    }

    /// Rotary embeddings for heads of `head_dim` with base `theta`, their
    /// frequencies scaled as `scaling` says.
    pub fn scaled(head_dim: i64, theta: f64, layout: RopeLayout, scaling: &RopeScaling) -> Rotary {
        let half = head_dim / 2;
        let dim = head_dim as f64;
        let base: Vec<f64> = (0..half)
            .map(|j| theta.powf(-2.0 * j as f64 / dim))
            .collect();
        let mut attention_factor = 1.0;
        let inv_freq = match scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Factors(factors) => base
                .iter()
                .enumerate()
                .map(|(j, f)| f / factors.get(j).copied().unwrap_or(1.0))
                .collect(),
            &RopeScaling::Llama3 {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original,
            } => base
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < original / high {
                        f
                    } else if wavelen > original / low {
                        f / factor
                    } else {
                        let smooth = (original / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect(),
            &RopeScaling::Yarn {
                factor,
                original,
                beta_fast,
                beta_slow,
                attention_factor: a,
            } => {
                attention_factor = a;
                // The pair index that turns `rotations` times over `original`.
                let at = |rotations: f64| {
                    dim * (original / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * theta.ln())
                };
                let low = at(beta_fast).floor().max(0.0);
                let mut high = at(beta_slow).ceil().min(dim - 1.0);
                if low == high {
                    high += 0.001;
                }
                base.iter()
                    .enumerate()
                    .map(|(j, &f)| {
                        let ramp = ((j as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        let keep = 1.0 - ramp;
                        f / factor * (1.0 - keep) + f * keep
                    })
                    .collect()
            }
        };
        Rotary {
            layout,
            inv_freq,
            attention_factor,
        }
    }

    /// `x` (with axes `hd` and the tags of `pos`) rotated by the integer
    /// positions `pos` (e.g. tagged `(b, s)`); the result has `x`'s shape.
    #[track_caller]
    pub fn forward(&self, x: Tensor, pos: Tensor) -> Tensor {
        let half = self.inv_freq.len() as i64;
        let inv = Tensor::from_slice(&self.inv_freq, &[half]).with_tags(&[HD2]);
        let pos = pos.convert(DType::F64);
        let mut axes: Vec<(&str, i64)> = vec![];
        for (t, d) in pos.shape().tags().iter().zip(pos.shape().dims()) {
            axes.push((t.map_or("", |t| t.as_str()), *d));
        }
        axes.push((HD2, half));
        let grid = crate::Shape::tagged(DType::F64, &axes);
        let angle = pos.broadcast(grid) * inv.broadcast(grid);
        let (cos, sin) = super::sin_cos::sin_cos(angle);
        let (cos, sin) = match self.attention_factor {
            1.0 => (cos, sin),
            a => (cos * a, sin * a),
        };
        let (cos, sin) = (cos.convert(x.dtype()), sin.convert(x.dtype()));
        super::rotate::rotate(x, cos, sin, self.layout)
    }
}
