//! [`LayerNorm`](super::LayerNorm)'s arithmetic as the custom call
//! `radix.layer_norm`: one kernel per call on the CPU plugin, where XLA runs
//! five operations (two reductions, each with the operation that feeds it,
//! and the scaling), each a dispatch of its own; for the 16 tokens of a
//! sentence that dispatch costs more than the arithmetic. Elsewhere, and
//! wherever a gradient flows through it (in the forward pass too), the same
//! formula in ops ([`traced`]).

use std::sync::LazyLock;

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::nn::broadcast_like;
use crate::nn::rows::{LAST, Rows, in_row_tasks};
use crate::nn::vector_math::vectorized;
use crate::{DType, Shape, Tensor};

/// `x [n, d] f32` (plus the optional fourth operand `residual [n, d]`)
/// normalized along `d`, times `weight [d]` plus `bias [d]`; attribute
/// `eps` (f32).
static LAYER_NORM: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.layer_norm", 1, shape_rule, kernel)
        .fallback(|x, attrs| vec![traced(summed(x), x[1], x[2], LAST, eps(attrs))])
        // The kernel computes the fallback's function.
        .differentiate_fallback()
        .register()
        .expect("radix.layer_norm is declared once")
});

fn eps(attrs: &Attrs) -> f64 {
    f64::from(attrs.f32("eps").unwrap_or(0.0))
}

/// The call's `x`, plus its residual where it has one.
fn summed(x: &[Tensor]) -> Tensor {
    match x.get(3) {
        Some(&r) => x[0] + r,
        None => x[0],
    }
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` over `x`'s axis `axis`
/// (biased variance), `weight` and `bias` tagged `axis`; with a `residual`
/// (`x`'s shape), the norm of `x + residual`, summed in the same call.
#[track_caller]
pub(super) fn layer_norm(
    x: Tensor,
    residual: Option<Tensor>,
    (weight, bias): (Tensor, Tensor),
    axis: &str,
    eps: f64,
) -> Tensor {
    let same = residual.is_none_or(|r| r.shape() == x.shape());
    let rows = Rows::along(x, axis).filter(|_| x.dtype() == DType::F32 && same);
    let Some(rows) = rows else {
        let x = residual.map_or(x, |r| x + r);
        return traced(x, weight, bias, axis, eps);
    };
    let w = weight.rename(axis, LAST);
    let b = bias.rename(axis, LAST);
    let attrs = Attrs::new().with("eps", eps as f32);
    let y = match residual {
        Some(r) => LAYER_NORM.call(&[rows.flat(x), w, b, rows.flat(r)], &attrs)[0],
        None => LAYER_NORM.call(&[rows.flat(x), w, b], &attrs)[0],
    };
    rows.unflat(y)
}

/// The formula in ops.
#[track_caller]
pub(super) fn traced(x: Tensor, weight: Tensor, bias: Tensor, axis: &str, eps: f64) -> Tensor {
    let centered = x - broadcast_like(x.mean(axis), x);
    let var = (centered * centered).mean(axis);
    let inv = broadcast_like((var + eps).rsqrt(), x);
    centered * inv * broadcast_like(weight, x) + broadcast_like(bias, x)
}

fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    attrs.f32("eps")?;
    let (x, w, b) = match s {
        [x, w, b] => (x, w, b),
        [x, w, b, r] if r == x => (x, w, b),
        _ => {
            return Err(format!(
                "wants x, weight, bias and an optional residual of x's shape, got {s:?}"
            ));
        }
    };
    let f32s = [x, w, b].iter().all(|s| s.dtype() == DType::F32);
    if !f32s || x.rank() != 2 || w.rank() != 1 || w.dims() != b.dims() || w.dims()[0] != x.dims()[1]
    {
        return Err(format!(
            "wants f32 x [n, d], weight [d] and bias [d], got {x}, {w} and {b}"
        ));
    }
    Ok(vec![*x])
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let eps = k.attrs().f32("eps")?;
    let (x, w, b) = (k.input::<f32>(0)?, k.input::<f32>(1)?, k.input::<f32>(2)?);
    let y = k.output::<f32>(0)?;
    let residual = match k.input_shape(3) {
        Some(_) => Some(k.input::<f32>(3)?),
        None => None,
    };
    let d = w.len();
    in_row_tasks(y, d, &|first, y| {
        y.copy_from_slice(&x[first..][..y.len()]);
        if let Some(r) = residual {
            for (y, r) in y.iter_mut().zip(&r[first..]) {
                *y += r;
            }
        }
        for y in y.chunks_exact_mut(d) {
            normalize_best(y, w, b, eps);
        }
    })
}

vectorized! {
    /// [`normalize`] compiled for AVX-512 where the CPU has it (sixteen
    /// lanes), else for AVX2 and FMA (eight), else as portable code; the
    /// same bits every way.
    fn normalize_best, normalize_paths = normalize(y: &mut [f32], w: &[f32], b: &[f32], eps: f32);
}

/// Partial sums of [`normalize`]'s two means: one AVX-512 vector, two of AVX2.
const LANES: usize = 16;

/// One row `x`, in place: its mean, then the mean of its squared
/// deviations (in [`LANES`] partial sums, so that the loops run in vector
/// lanes), then `(x − mean) · rsqrt(var + eps) · w + b`.
#[inline(always)]
fn normalize(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = x.len() as f32;
    let (chunks, tail) = x.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    let mean = (acc.iter().sum::<f32>() + tail.iter().sum::<f32>()) / n;
    let mut acc = [0.0f32; LANES];
    for c in chunks {
        for l in 0..LANES {
            let t = c[l] - mean;
            acc[l] += t * t;
        }
    }
    let tail: f32 = tail.iter().map(|&v| (v - mean) * (v - mean)).sum();
    let var = (acc.iter().sum::<f32>() + tail) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((x, &w), &b) in x.iter_mut().zip(w).zip(b) {
        *x = (*x - mean) * inv * w + b;
    }
}

#[cfg(test)]
mod tests {
    /// Every compiled copy of a row's normalization gives the portable
    /// loop's bits, for a row of MiniLM's width and one with a tail past
    /// the lanes.
    #[test]
    fn every_normalize_path_gives_the_same_bits() {
        for d in [384, 77] {
            let x: Vec<f32> = (0..d)
                .map(|i| ((i * 37) % 101) as f32 * 0.173 - 8.0)
                .collect();
            let w: Vec<f32> = (0..d).map(|i| 1.0 + (i % 7) as f32 * 0.01).collect();
            let b: Vec<f32> = (0..d).map(|i| (i % 5) as f32 * 0.1).collect();
            let run = |f: fn(&mut [f32], &[f32], &[f32], f32)| {
                let mut y = x.clone();
                f(&mut y, &w, &b, 1e-12);
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let portable = run(super::normalize);
            for (name, f) in super::normalize_paths() {
                assert_eq!(portable, run(f), "{name}, d = {d}");
            }
        }
    }
}
