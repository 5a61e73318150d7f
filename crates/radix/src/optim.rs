//! Optimizers as traced functions: [`Sgd`] (with momentum) and [`AdamW`]
//! update a tree of parameters from its gradient (`radix::grad`) and an
//! optimizer state of the same tree, inside the traced training step, so
//! one executable computes the loss, the gradient and the update.
//! [`donate`] writes the new parameters and state into the buffers of the
//! old ones (`reuse_buffer`): pass them as inputs, and each step updates
//! them in place.
//!
//! The update rules are PyTorch's (`torch.optim.SGD`, `torch.optim.AdamW`),
//! checked against it in `tests/optim.rs`. Hyper-parameters are constants
//! of the program (another learning rate is another executable). Integer
//! and bool tensors of the tree are left as they are.
//!
//! ```
//! # fn main() -> radix::Result<()> {
//! use radix::optim::{AdamW, AdamWState, donate};
//! use radix::{DType, Shape, Tensor};
//! let w = Tensor::param(Shape::new(DType::F32, &[3]));
//! let opt = AdamW { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.01 };
//! let state = AdamWState::params(&w);
//! let program = radix::trace_fn(&(w, state), |(w, s)| {
//!     let (loss, g) = radix::value_and_grad(|w: &Tensor, _: &()| (*w * *w).sum(0), &w, &());
//!     let (w2, s2) = opt.update(&w, &g, &s);
//!     (loss, donate(&w2, &w), donate(&s2, &s))
//! })?;
//! assert!(program.optimize().stablehlo().contains("tf.aliasing_output"));
//! # Ok(())
//! # }
//! ```
//!
//! [`Precision`] says how the step gets its loss and gradient: in the
//! parameters' own dtype ([`Precision::Full`], `radix::value_and_grad`), or
//! in mixed precision ([`MixedPrecision`]): the parameters stay f32 masters
//! (what is donated and updated), the forward and backward passes run on
//! their bf16 copies, and the gradient comes back in f32 for the f32 update,
//! so either optimizer works unchanged. Static loss scaling is an option,
//! off by default: bf16 has f32's 8-bit exponent, so gradients that f16
//! would flush to zero (below 2^-24) stay normal down to 2^-126.
//!
//! ```
//! # fn main() -> radix::Result<()> {
//! use radix::optim::{MixedPrecision, Precision, Sgd, SgdState, donate};
//! use radix::{DType, Shape, Tensor};
//! let w = Tensor::param(Shape::new(DType::F32, &[3]));
//! let opt = Sgd { lr: 0.1, momentum: 0.9, weight_decay: 0.0 };
//! let precision = Precision::Mixed(MixedPrecision::BF16);
//! let state = SgdState::params(&w);
//! let program = radix::trace_fn(&(w, state), |(w, s)| {
//!     // `w` is bf16 inside the loss; its gradient `g` is f32, as `w` is.
//!     let loss = |w: &Tensor, _: &()| (*w * *w).sum(0);
//!     let (loss, g) = precision.value_and_grad(loss, &w, &());
//!     let (w2, s2) = opt.update(&w, &g, &s);
//!     (loss, donate(&w2, &w), donate(&s2, &s))
//! })?;
//! let text = program.optimize().stablehlo();
//! assert!(text.contains("bf16") && text.contains("tf.aliasing_output"));
//! # Ok(())
//! # }
//! ```

use crate::Module;
use crate::module::tensors;
use crate::{Buffer, Bufferized, DType, Platform, Result, Shape, Tensor};

/// How a training step computes the loss and its gradient with respect to
/// the parameters, before an optimizer's `update`.
#[derive(Debug, Clone, Copy)]
pub enum Precision {
    /// In the parameters' own dtype, as [`crate::value_and_grad`].
    Full,
    /// On copies of the parameters in a narrower dtype, the gradient back
    /// in the parameters' dtype (see [`MixedPrecision`]).
    Mixed(MixedPrecision),
}

/// Mixed-precision training: the parameters are f32 master weights (what
/// the optimizer updates and a step donates); inside the traced step the
/// loss runs on their copies in `compute` (bf16), its float arguments
/// converted too, so activations, the backward pass and the gradient are in
/// `compute`; the gradient is converted back to each parameter's dtype and
/// the loss to f32. The update itself stays in f32, so the small steps
/// `lr * g` that bf16's 8-bit mantissa would round away accumulate in the
/// masters.
///
/// Static loss scaling ([`MixedPrecision::loss_scale_log2`]) multiplies the
/// loss by a power of two before differentiation and divides the gradient
/// by it after, exactly (a power of two changes only the exponent). It is
/// for f16, whose 5-bit exponent flushes gradients below 2^-24 to zero; bf16
/// has f32's 8-bit exponent (normal down to 2^-126), so it is off in
/// [`MixedPrecision::BF16`].
#[derive(Debug, Clone, Copy)]
pub struct MixedPrecision {
    /// The dtype of the forward and backward passes (bf16).
    pub compute: DType,
    /// `Some(k)`: the loss is scaled by `2^k` before differentiation and the
    /// gradient by `2^-k` after; `None`: no scaling.
    pub loss_scale_log2: Option<i32>,
}

impl MixedPrecision {
    /// bf16 weights and activations, f32 masters, no loss scaling.
    pub const BF16: MixedPrecision = MixedPrecision {
        compute: DType::BF16,
        loss_scale_log2: None,
    };
}

impl Precision {
    /// The value of `f(params, args)`, a float scalar (a loss), and its
    /// gradient with respect to every tensor of `params`, as the same tree
    /// in `params`' dtypes, as [`crate::value_and_grad`]. Mixed, `f` sees
    /// the float tensors of `params` and `args` in the compute dtype, and
    /// the value comes back in f32.
    #[track_caller]
    pub fn value_and_grad<P, A>(
        &self,
        f: impl FnOnce(&P, &A) -> Tensor,
        params: &P,
        args: &A,
    ) -> (Tensor, P)
    where
        P: Module + Clone,
        A: Module + Clone,
    {
        let mp = match self {
            Precision::Full => return crate::value_and_grad(f, params, args),
            Precision::Mixed(mp) => *mp,
        };
        let scale = mp.loss_scale_log2.map(|k| 2f64.powi(k));
        // Differentiating through the conversions: each one's derivative
        // converts the cotangent back, so the gradient is in the masters'
        // dtype.
        let (value, grads) = crate::value_and_grad(
            |p: &P, a: &A| {
                let value = f(&cast(p, mp.compute), &cast(a, mp.compute)).convert(DType::F32);
                scale.map_or(value, |s| value * s)
            },
            params,
            args,
        );
        let Some(s) = scale else {
            return (value, grads);
        };
        let unscale = |t: &Tensor| {
            if t.dtype().is_float() { *t / s } else { *t }
        };
        let grads = refill(
            &grads,
            &leaves(&grads).iter().map(unscale).collect::<Vec<_>>(),
        );
        (value / s, grads)
    }
}

/// Stochastic gradient descent with momentum, as `torch.optim.SGD`
/// (no dampening, not Nesterov): `g += weight_decay * p`, `buf = momentum
/// * buf + g`, `p -= lr * buf`.
#[derive(Debug, Clone, Copy)]
pub struct Sgd {
    /// The learning rate.
    pub lr: f64,
    /// The momentum (0 for plain SGD).
    pub momentum: f64,
    /// The L2 penalty added to the gradient.
    pub weight_decay: f64,
}

/// [`Sgd`]'s state: one velocity per parameter.
#[derive(Clone, Module)]
pub struct SgdState<P: Module> {
    /// The momentum buffers, shaped as the parameters.
    pub velocity: P,
}

impl<P: Module + Clone> SgdState<P> {
    /// The state's tensors as arguments (made with [`Tensor::param`])
    /// shaped as `params`; start it from zeros.
    pub fn params(params: &P) -> SgdState<P> {
        SgdState {
            velocity: like(params, Tensor::param),
        }
    }
}

impl Sgd {
    /// The parameters after one step from their gradient `grads` (the same
    /// tree), and the next state.
    #[track_caller]
    pub fn update<P: Module + Clone>(
        &self,
        params: &P,
        grads: &P,
        state: &SgdState<P>,
    ) -> (P, SgdState<P>) {
        let (p, g, v) = (leaves(params), leaves(grads), leaves(&state.velocity));
        let (mut new_p, mut new_v) = (p.clone(), v.clone());
        for k in 0..p.len() {
            if p[k].dtype().is_float() {
                let g = g[k] + p[k] * self.weight_decay;
                new_v[k] = v[k] * self.momentum + g;
                new_p[k] = p[k] - new_v[k] * self.lr;
            }
        }
        (
            refill(params, &new_p),
            SgdState {
                velocity: refill(&state.velocity, &new_v),
            },
        )
    }
}

/// Adam with decoupled weight decay, as `torch.optim.AdamW`: `p *= 1 - lr
/// * weight_decay`, `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g²`,
/// `p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)` at step `t`.
#[derive(Debug, Clone, Copy)]
pub struct AdamW {
    /// The learning rate.
    pub lr: f64,
    /// The decay rates of the first and second moments.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// The decoupled weight decay.
    pub weight_decay: f64,
}

/// [`AdamW`]'s state: the steps taken (an f32 scalar) and both moments
/// per parameter.
#[derive(Clone, Module)]
pub struct AdamWState<P: Module> {
    /// How many steps were taken.
    pub step: Tensor,
    /// The first moments, shaped as the parameters.
    pub m: P,
    /// The second moments, shaped as the parameters.
    pub v: P,
}

impl<P: Module + Clone> AdamWState<P> {
    /// The state's tensors as arguments (made with [`Tensor::param`])
    /// shaped as `params`; start it from zeros.
    pub fn params(params: &P) -> AdamWState<P> {
        AdamWState {
            step: Tensor::param(Shape::scalar(DType::F32)),
            m: like(params, Tensor::param),
            v: like(params, Tensor::param),
        }
    }
}

impl AdamW {
    /// The parameters after one step from their gradient `grads` (the same
    /// tree), and the next state.
    #[track_caller]
    pub fn update<P: Module + Clone>(
        &self,
        params: &P,
        grads: &P,
        state: &AdamWState<P>,
    ) -> (P, AdamWState<P>) {
        let (b1, b2) = self.betas;
        let t = state.step + 1.0;
        let power = |b: f64| Tensor::scalar(b, DType::F32).pow(t);
        let bc1 = 1.0 - power(b1);
        let bc2 = (1.0 - power(b2)).sqrt();
        let (p, g) = (leaves(params), leaves(grads));
        let (m, v) = (leaves(&state.m), leaves(&state.v));
        let (mut new_p, mut new_m, mut new_v) = (p.clone(), m.clone(), v.clone());
        for k in 0..p.len() {
            let dtype = p[k].dtype();
            if !dtype.is_float() {
                continue;
            }
            new_m[k] = m[k] * b1 + g[k] * (1.0 - b1);
            new_v[k] = v[k] * b2 + g[k] * g[k] * (1.0 - b2);
            let step = (Tensor::scalar(self.lr, DType::F32) / bc1).convert(dtype);
            let denom = new_v[k].sqrt() / bc2.convert(dtype) + self.eps;
            new_p[k] = p[k] * (1.0 - self.lr * self.weight_decay) - new_m[k] / denom * step;
        }
        (
            refill(params, &new_p),
            AdamWState {
                step: t,
                m: refill(&state.m, &new_m),
                v: refill(&state.v, &new_v),
            },
        )
    }
}

/// Buffers of zeros shaped as the tensors of `tree` (made with
/// [`Tensor::param`]): an optimizer state to start from,
/// `zeros(&platform, &AdamWState::params(&model))`.
pub fn zeros<M: Module>(platform: &Platform, tree: &M) -> Result<Bufferized<M>> {
    tree.map(&mut String::new(), &mut |_, t| {
        let s = t.shape();
        let bytes = vec![0u8; s.byte_size()];
        Buffer::from_bytes(platform, &bytes, s)
    })
}

/// `new` written into the buffers of `old` (the same tree of arguments):
/// each tensor of `new` with [`Tensor::reuse_buffer`] of its counterpart
/// in `old`, so a call consumes the old buffers instead of allocating.
#[track_caller]
pub fn donate<P: Module + Clone>(new: &P, old: &P) -> P {
    let olds = leaves(old);
    let mut k = 0;
    let mut res = new.clone();
    res.visit_mut(&mut String::new(), &mut |_, t| {
        *t = t.reuse_buffer(olds[k]);
        k += 1;
    });
    res
}

/// The tensors of `m` in visit order.
fn leaves<M: Module>(m: &M) -> Vec<Tensor> {
    tensors(m).into_iter().map(|t| t.1).collect()
}

/// A copy of `m` with `values` in place of its tensors, in visit order.
fn refill<M: Module + Clone>(m: &M, values: &[Tensor]) -> M {
    let mut res = m.clone();
    let mut k = 0;
    res.visit_mut(&mut String::new(), &mut |_, t| {
        *t = values[k];
        k += 1;
    });
    res
}

/// The tree `m` with its float tensors converted to `dtype`.
fn cast<M: Module + Clone>(m: &M, dtype: DType) -> M {
    let mut res = m.clone();
    res.visit_mut(&mut String::new(), &mut |_, t| {
        if t.dtype().is_float() {
            *t = t.convert(dtype);
        }
    });
    res
}

/// The tree `m` with `f(shape)` in place of each tensor.
fn like<M: Module + Clone>(m: &M, f: impl Fn(Shape) -> Tensor) -> M {
    let mut res = m.clone();
    res.visit_mut(&mut String::new(), &mut |_, t| *t = f(t.shape()));
    res
}
