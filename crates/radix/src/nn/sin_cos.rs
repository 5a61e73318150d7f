//! The sines and cosines of rotary angles as the custom call
//! `radix.sin_cos`: each angle's values computed alone (libm's `sin` and
//! `cos` in f64), so that a token's rotation is the same whatever tokens
//! share its step. XLA's vectorized f64 `cos` and `sin` give some angles
//! other last bits in a step of 2 or 16 tokens than in a step of 1 or 8,
//! which with 8-bit products moved a token's activations to other codes.
//! Elsewhere the ops `cos` and `sin`.

use std::sync::LazyLock;

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::{DType, Shape, Tensor};

/// `x f64` (any shape) to `(cos x, sin x)`, each of `x`'s shape.
static SIN_COS: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.sin_cos", 1, shape_rule, kernel)
        .fallback(|x, _| vec![x[0].cos(), x[0].sin()])
        .derivative(|_, y, g, _| {
            // d cos = −sin, d sin = cos.
            let (cos, sin) = (y[0], y[1]);
            vec![cos * g[1] - sin * g[0]]
        })
        .register()
        .expect("radix.sin_cos is declared once")
});

/// `(cos x, sin x)` of f64 angles `x`: the kernel on the CPU plugin, the
/// ops elsewhere; for other element types the ops.
#[track_caller]
pub(super) fn sin_cos(x: Tensor) -> (Tensor, Tensor) {
    match x.dtype() {
        DType::F64 => {
            let y = SIN_COS.call(&[x], &Attrs::new());
            (y[0], y[1])
        }
        _ => (x.cos(), x.sin()),
    }
}

fn shape_rule(s: &[Shape], _: &Attrs) -> Result<Vec<Shape>, String> {
    match s {
        [x] if x.dtype() == DType::F64 => Ok(vec![*x, *x]),
        _ => Err(format!("wants one f64 operand, got {s:?}")),
    }
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let x = k.input::<f64>(0)?;
    let (cos, sin) = (k.output::<f64>(0)?, k.output::<f64>(1)?);
    for ((&x, c), s) in x.iter().zip(cos).zip(sin) {
        (*s, *c) = x.sin_cos();
    }
    Ok(())
}
