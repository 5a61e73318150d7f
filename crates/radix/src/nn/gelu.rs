//! Exact (erf) GELU as the custom call `radix.gelu_erf`: one vectorized
//! pass on the CPU plugin, where XLA's loop fusion of the same formula
//! (an exponential, a division and a dozen multiply-adds per element) took
//! ~110 µs for the 16 × 1536 activations of one MiniLM layer on a 2-core
//! Xeon, 0.6–0.8 ms of a 3.8 ms sentence; the kernel takes a tenth of it.
//! Elsewhere, and for derivatives, the same formula in ops
//! ([`Tensor::gelu_erf`]).

use std::sync::LazyLock;

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::nn::vector_math::{erf, vectorized};
use crate::{DType, Shape, Tensor};

/// `x f32` (any shape) to `0.5 x (1 + erf(x / √2))`, the same shape.
static GELU_ERF: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.gelu_erf", 1, shape_rule, kernel)
        .fallback(|x, _| vec![x[0].gelu_erf()])
        .derivative(|x, _, g, _| {
            // The fallback's: the kernel computes the same function.
            let f = |x: &Tensor, _: &()| x.gelu_erf();
            let (_, dx) = crate::vjp(f, &x[0], &(), &g[0]);
            vec![dx]
        })
        .register()
        .expect("radix.gelu_erf is declared once")
});

/// GELU, exact form: `0.5 x (1 + erf(x / √2))`, the function of
/// [`Tensor::gelu_erf`] (BERT's activation). On the CPU plugin an f32 `x`
/// is one kernel per call; elsewhere, and for other dtypes, the formula in
/// ops.
///
/// ```
/// use radix::{DType, Shape, Tensor};
/// let x = Tensor::param(Shape::tagged(DType::F32, &[("s", 16), ("ff", 1536)]));
/// assert_eq!(radix::nn::gelu_erf(x).shape(), x.shape());
/// ```
#[track_caller]
pub fn gelu_erf(x: Tensor) -> Tensor {
    if x.dtype() != DType::F32 {
        return x.gelu_erf();
    }
    GELU_ERF.call(&[x], &Attrs::new())[0]
}

fn shape_rule(s: &[Shape], _: &Attrs) -> Result<Vec<Shape>, String> {
    match s {
        [x] if x.dtype() == DType::F32 => Ok(vec![*x]),
        _ => Err(format!("wants one f32 operand, got {s:?}")),
    }
}

/// Elements a task of GELU takes at least: fewer would cost more to hand
/// over than to compute.
pub(crate) const MIN_GELU_TASK: usize = 8 * 1024;

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let x = k.input::<f32>(0)?;
    let y = k.output::<f32>(0)?;
    radix_quant::SpinPool::global().try_run_chunks(y, MIN_GELU_TASK, &|task, y| {
        y.copy_from_slice(&x[task * MIN_GELU_TASK..][..y.len()]);
        gelu_erf_in_place(y);
    })
}

vectorized! {
    /// `y` replaced by its GELU: [`gelu`] compiled for AVX-512 where the
    /// CPU has it (its loop then runs sixteen lanes at a time: the division
    /// and the exponential make it compute-bound, ~20 cycles a vector),
    /// else for AVX2 and FMA (eight lanes), else as portable code; the same
    /// bits every way. Also the activation `radix.quant_dot` applies after
    /// its bias ([`crate::quant::dot_bias_gelu_erf`]).
    pub(crate) fn gelu_erf_in_place, gelu_paths = gelu(y: &mut [f32]);
}

/// `x · 0.5 · (erf(x / √2) + 1)` for each `x` of `y`, in place, the order
/// of [`Tensor::gelu_erf`]'s ops.
#[inline(always)]
fn gelu(y: &mut [f32]) {
    for y in y.iter_mut() {
        let x = *y;
        *y = x * 0.5 * (erf(x * std::f32::consts::FRAC_1_SQRT_2) + 1.0);
    }
}

#[cfg(test)]
mod tests {
    /// The portable loop, the AVX2 one and the AVX-512 one (each where the
    /// CPU has it) agree to the bit: each element is the same sequence of
    /// f32 operations.
    #[test]
    fn every_path_gives_the_same_bits() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.0137).collect();
        let run = |f: fn(&mut [f32])| {
            let mut y = x.clone();
            f(&mut y);
            y.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        };
        let portable = run(super::gelu);
        assert_eq!(f32::from_bits(portable[500]), 0.0);
        assert_eq!(portable, run(super::gelu_erf_in_place));
        let paths = super::gelu_paths();
        for &(name, f) in &paths {
            assert_eq!(portable, run(f), "{name}");
        }
        eprintln!(
            "paths checked: {:?}",
            paths.iter().map(|p| p.0).collect::<Vec<_>>()
        );
    }
}
