//! [`RmsNorm`](super::RmsNorm)'s arithmetic as the custom call
//! `radix.rms_norm`: one kernel per call on the CPU plugin, and each row's
//! bits the same whatever rows share the call. XLA sums a row's squares in
//! another order once it vectorizes the reduction across 8 rows or more,
//! so the same token got other activations in a step of 8 tokens than
//! alone, and with 8-bit products some of them then rounded to other
//! codes. Elsewhere, and wherever a gradient flows through it (in a
//! training step's forward pass too), the same formula in ops ([`traced`]).

use std::sync::LazyLock;

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::nn::broadcast_like;
use crate::nn::rows::{LAST, Rows, in_row_tasks};
use crate::nn::vector_math::vectorized;
use crate::{DType, Shape, Tensor};

/// `x [n, d] f32` divided by the root mean square of its row along `d`,
/// times `weight [d]`; attribute `eps` (f32).
static RMS_NORM: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.rms_norm", 1, shape_rule, kernel)
        .fallback(|x, attrs| vec![traced(x[0], x[1], LAST, eps(attrs))])
        // The kernel computes the fallback's function.
        .differentiate_fallback()
        .register()
        .expect("radix.rms_norm is declared once")
});

fn eps(attrs: &Attrs) -> f64 {
    f64::from(attrs.f32("eps").unwrap_or(0.0))
}

/// `x / sqrt(mean(x²) + eps) * weight` over `x`'s axis `axis`, `weight`
/// tagged `axis`: the kernel for f32 `x`, the formula in ops otherwise.
#[track_caller]
pub(super) fn rms_norm(x: Tensor, weight: Tensor, axis: &str, eps: f64) -> Tensor {
    let f32s = x.dtype() == DType::F32 && weight.dtype() == DType::F32;
    let Some(rows) = Rows::along(x, axis).filter(|_| f32s) else {
        return traced(x, weight, axis, eps);
    };
    let attrs = Attrs::new().with("eps", eps as f32);
    rows.unflat(RMS_NORM.call(&[rows.flat(x), weight.rename(axis, LAST)], &attrs)[0])
}

/// The formula in ops.
#[track_caller]
pub(super) fn traced(x: Tensor, weight: Tensor, axis: &str, eps: f64) -> Tensor {
    let ms = (x * x).mean(axis);
    let inv = broadcast_like((ms + eps).rsqrt(), x);
    x * inv * broadcast_like(weight, x)
}

fn shape_rule(s: &[Shape], attrs: &Attrs) -> Result<Vec<Shape>, String> {
    attrs.f32("eps")?;
    let [x, w] = s else {
        return Err(format!("wants x and weight, got {s:?}"));
    };
    let f32s = x.dtype() == DType::F32 && w.dtype() == DType::F32;
    if !f32s || x.rank() != 2 || w.rank() != 1 || w.dims()[0] != x.dims()[1] {
        return Err(format!(
            "wants f32 x [n, d] and weight [d], got {x} and {w}"
        ));
    }
    Ok(vec![*x])
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let eps = k.attrs().f32("eps")?;
    let (x, w) = (k.input::<f32>(0)?, k.input::<f32>(1)?);
    let y = k.output::<f32>(0)?;
    let d = w.len();
    in_row_tasks(y, d, &|first, y| {
        y.copy_from_slice(&x[first..][..y.len()]);
        for y in y.chunks_exact_mut(d) {
            scale_best(y, w, eps);
        }
    })
}

vectorized! {
    /// [`scale`] compiled for AVX-512 where the CPU has it (sixteen lanes),
    /// else for AVX2 and FMA (eight), else as portable code; the same bits
    /// every way.
    fn scale_best, scale_paths = scale(y: &mut [f32], w: &[f32], eps: f32);
}

/// Partial sums of [`scale`]'s mean square: one AVX-512 vector, two of AVX2.
const LANES: usize = 16;

/// One row `x`, in place: the mean of its squares (in [`LANES`] partial
/// sums, so that the loop runs in vector lanes and a row's sum is the same
/// whatever rows are beside it), then `x · rsqrt(mean + eps) · w`.
#[inline(always)]
fn scale(x: &mut [f32], w: &[f32], eps: f32) {
    let (chunks, tail) = x.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l] * c[l];
        }
    }
    let tail: f32 = tail.iter().map(|&v| v * v).sum();
    let ms = (acc.iter().sum::<f32>() + tail) / x.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    for (x, &w) in x.iter_mut().zip(w) {
        *x = *x * inv * w;
    }
}

#[cfg(test)]
mod tests {
    /// Every compiled copy of a row's scaling gives the portable loop's
    /// bits, for a row of SmolLM2's width and one with a tail past the
    /// lanes.
    #[test]
    fn every_scale_path_gives_the_same_bits() {
        for d in [576, 77] {
            let x: Vec<f32> = (0..d)
                .map(|i| ((i * 37) % 101) as f32 * 0.173 - 8.0)
                .collect();
            let w: Vec<f32> = (0..d).map(|i| 1.0 + (i % 7) as f32 * 0.01).collect();
            let run = |f: fn(&mut [f32], &[f32], f32)| {
                let mut y = x.clone();
                f(&mut y, &w, 1e-5);
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let portable = run(super::scale);
            for (name, f) in super::scale_paths() {
                assert_eq!(portable, run(f), "{name}, d = {d}");
            }
        }
    }
}
