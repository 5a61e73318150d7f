//! Composites: activations, normalizing reductions and `argmax`, written
//! with the primitive ops (they add no IR op).

use crate::shape::{Axes, AxisRef};
use crate::tensor::{fail, located};
use std::panic::Location;

use crate::ir::ops::reduce::lowest;
use crate::tensor::reduce::reduce;
use crate::{DType, Shape, Tensor};

impl Tensor {
    /// `max(x, 0)`.
    #[track_caller]
    pub fn relu(self) -> Tensor {
        self.maximum(Tensor::scalar(0.0, self.dtype()))
    }

    /// `x * logistic(x)` (also called swish).
    #[track_caller]
    pub fn silu(self) -> Tensor {
        self * self.logistic()
    }

    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    #[track_caller]
    pub fn gelu_tanh(self) -> Tensor {
        let inner = (self + self * self * self * 0.044715) * (2.0 / std::f64::consts::PI).sqrt();
        self * 0.5 * (inner.tanh() + 1.0)
    }

    /// GELU, exact form: `0.5 x (1 + erf(x / sqrt 2))`.
    #[track_caller]
    pub fn gelu_erf(self) -> Tensor {
        self * 0.5 * ((self * std::f64::consts::FRAC_1_SQRT_2).erf() + 1.0)
    }

    /// The error function (Abramowitz–Stegun 7.1.26, |error| <= 1.5e-7).
    #[track_caller]
    pub fn erf(self) -> Tensor {
        let a = self.abs();
        let t = 1.0 / (a * 0.3275911 + 1.0);
        let poly = t
            * (t * (t * (t * (t * 1.061405429 - 1.453152027) + 1.421413741) - 0.284496736)
                + 0.254829592);
        let y = 1.0 - poly * (-(a * a)).exp();
        y * self.sign()
    }

    /// The mean over `axes`, which are removed.
    #[track_caller]
    pub fn mean(self, axes: impl Axes) -> Tensor {
        let n: i64 = match self.shape().resolve(&axes) {
            Ok(a) => a.iter().map(|&i| self.shape().dims()[i]).product(),
            Err(msg) => return fail("mean", msg, &[self], self.shape()),
        };
        self.sum(axes) / n as f64
    }

    /// `exp(x - max) / sum(exp(x - max))` along `axis` (shape kept).
    #[track_caller]
    pub fn softmax(self, axis: impl Into<AxisRef>) -> Tensor {
        let axis = axis.into();
        let Some(a) = self.shape().axis(axis) else {
            return fail("softmax", format!("no axis {axis}"), &[self], self.shape());
        };
        let m = self.max(a).broadcast_back(self.shape(), a);
        let e = (self - m).exp();
        e / e.sum(a).broadcast_back(self.shape(), a)
    }

    /// `log(sum(exp(x)))` along `axis` (removed), computed stably.
    #[track_caller]
    pub fn log_sum_exp(self, axis: impl Into<AxisRef>) -> Tensor {
        let axis = axis.into();
        let Some(a) = self.shape().axis(axis) else {
            return fail(
                "log_sum_exp",
                format!("no axis {axis}"),
                &[self],
                self.shape(),
            );
        };
        let m = self.max(a);
        let e = (self - m.broadcast_back(self.shape(), a)).exp();
        e.sum(a).log() + m
    }

    /// The position of the largest value along `axis` (removed), as `i32`;
    /// the first one on ties, and the first NaN if any. A two-operand
    /// `stablehlo.reduce` of (value, position) pairs.
    #[track_caller]
    pub fn argmax(self, axis: impl Into<AxisRef>) -> Tensor {
        let axis = axis.into();
        let s = self.shape();
        let Some(a) = s.axis(axis) else {
            return fail("argmax", format!("no axis {axis}"), &[self], s);
        };
        let iota = Tensor::iota(s.with_dtype(DType::I32), a);
        let inits = [
            Tensor::scalar(lowest(s.dtype()), s.dtype()),
            Tensor::scalar(0.0, DType::I32),
        ];
        // The body is radix's: its nodes are at the caller's line.
        located(Location::caller(), || {
            reduce(&[self, iota], &inits, a, |acc, x| {
                let (av, ai, xv, xi) = (acc[0], acc[1], x[0], x[1]);
                // Keep the accumulator if it is NaN (the first NaN wins), else
                // if it is larger, or equal and first.
                let (a_nan, x_num, a_first) = (av.ne(av), xv.eq(xv), ai.lt(xi));
                let larger = av.gt(xv).or(av.eq(xv).and(a_first));
                let keep = a_nan.and(x_num.or(a_first)).or(x_num.and(larger));
                vec![keep.select(av, xv), keep.select(ai, xi)]
            })[1]
        })
    }

    /// `self` (reduced over axis `removed` of `like`) broadcast back to `like`.
    #[track_caller]
    fn broadcast_back(self, like: Shape, removed: usize) -> Tensor {
        let axes: Vec<usize> = (0..like.rank()).filter(|&i| i != removed).collect();
        self.broadcast_in_dim(like, &axes)
    }
}
