//! Training any model tree: [`Trainer`] compiles one step, the loss of a
//! batch, its gradient with respect to every weight (`radix::value_and_grad`)
//! and the AdamW update, as one executable whose weights and optimizer
//! state are donated, so each step updates them in place, in f32 or in
//! mixed precision (`radix::optim::Precision`: bf16 forward and backward
//! passes on f32 master weights). Used by the small language model of
//! `examples/train_lm.rs`.
//!
//! [`Trainer::data_parallel`] trains one model over the processes of an MPI
//! job (`radix launch -n N`): each process steps on its share of the global
//! batch, and the step averages the loss and the gradient over the
//! processes (`radix::collective::all_reduce`) before the update, so every
//! process applies the same update, the one a single process would apply
//! to the global batch, and the weights stay the same bits everywhere.

use radix::collective::{ReduceOp, all_reduce, all_reduce_tree};
use radix::optim::{AdamW, AdamWState, Precision, donate};
use radix::{Buffer, Bufferized, Compiled, Module, Platform, Shape, Tensor};
use sha2::{Digest, Sha256};

use crate::Result;
use crate::llama::LlamaConfig;
use crate::sampling::Rng;
use crate::transformer::Arch;

/// A step's inputs: the weights, the optimizer state and a batch.
type StepInputs<M, I> = (M, AdamWState<M>, I);
/// A step's outputs: the loss before the step, the weights and the state.
type StepOutputs<M> = (Tensor, M, AdamWState<M>);

/// A model `M` being trained on batches `I` (both trees of tensors).
pub struct Trainer<M: Module + Clone, I: Module + Clone> {
    exe: Compiled<(), StepInputs<M, I>, StepOutputs<M>>,
    weights: Bufferized<M>,
    state: Bufferized<AdamWState<M>>,
}

impl<M, I> Trainer<M, I>
where
    M: Module + Clone,
    I: Module + Clone,
    Bufferized<M>: Clone,
    Bufferized<AdamWState<M>>: Clone,
{
    /// Compiles the step of `loss(model, batch)` with `opt` for `model`'s
    /// and `batch`'s shapes (trees of [`Tensor::param`]), the loss and its
    /// gradient computed in `precision`, starting from `weights` (the
    /// masters, in their own dtype) and a zero optimizer state.
    pub fn new(
        platform: &Platform,
        model: &M,
        weights: Bufferized<M>,
        batch: &I,
        loss: fn(&M, &I) -> Tensor,
        opt: AdamW,
        precision: Precision,
    ) -> Result<Trainer<M, I>> {
        let step = Step {
            loss,
            opt,
            precision,
            gradient: Gradient::OfThisProcess,
        };
        Self::compile(platform, model, weights, batch, step)
    }

    /// [`Trainer::new`] for one process of a data-parallel job: `batch` is
    /// this process's share of the global batch (every process's share of
    /// the same shape), and each step's loss and gradient are their means
    /// over the job's processes, so the step is the global batch's on every
    /// process. Every process must start from the same `weights`. In a
    /// process started alone (a job of one) this is [`Trainer::new`].
    pub fn data_parallel(
        platform: &Platform,
        model: &M,
        weights: Bufferized<M>,
        batch: &I,
        loss: fn(&M, &I) -> Tensor,
        opt: AdamW,
        precision: Precision,
    ) -> Result<Trainer<M, I>> {
        let step = Step {
            loss,
            opt,
            precision,
            gradient: Gradient::MeanOverProcesses,
        };
        Self::compile(platform, model, weights, batch, step)
    }

    fn compile(
        platform: &Platform,
        model: &M,
        weights: Bufferized<M>,
        batch: &I,
        step: Step<M, I>,
    ) -> Result<Trainer<M, I>> {
        let Step {
            loss,
            opt,
            precision,
            gradient,
        } = step;
        let inputs = (model.clone(), AdamWState::params(model), batch.clone());
        let exe = radix::compile_fn(platform, &inputs, |(m, s, b): StepInputs<M, I>| {
            let (value, g) = precision.value_and_grad(loss, &m, &b);
            let (value, g) = match gradient {
                Gradient::OfThisProcess => (value, g),
                // The mean over processes of each process's mean over its
                // share is the global batch's mean (the shares are equal).
                Gradient::MeanOverProcesses => (
                    all_reduce(value, ReduceOp::Mean),
                    all_reduce_tree(&g, ReduceOp::Mean),
                ),
            };
            let (m2, s2) = opt.update(&m, &g, &s);
            (value, donate(&m2, &m), donate(&s2, &s))
        })?;
        let state = radix::optim::zeros(platform, &AdamWState::params(model))?;
        Ok(Trainer {
            exe,
            weights,
            state,
        })
    }

    /// One step on `batch`; the batch's loss before the step.
    pub fn step(&mut self, batch: Bufferized<I>) -> Result<f32> {
        // The call consumes the weights and the state (donated): the
        // step's results replace them.
        let inputs = (self.weights.clone(), self.state.clone(), batch);
        let (loss, weights, state) = self.exe.call_fn(inputs)?;
        (self.weights, self.state) = (weights, state);
        Ok(loss.to_vec::<f32>()?[0])
    }

    /// The weights so far.
    pub fn weights(&self) -> &Bufferized<M> {
        &self.weights
    }

    /// The sha256 of the weights so far (each one's bytes, in the model's
    /// visit order), in hex: the processes of a data-parallel job print the
    /// same.
    pub fn weights_sha256(&self) -> Result<String> {
        let mut hash = Sha256::new();
        let mut failed = None;
        M::visit_leaves(
            &self.weights,
            &mut String::new(),
            &mut |_, b: &Buffer| match b.to_literal() {
                Ok(l) => hash.update(l.to_bytes()),
                Err(e) => failed = failed.take().or(Some(e)),
            },
        );
        if let Some(e) = failed {
            return Err(e.into());
        }
        Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// What a step computes, apart from its shapes.
struct Step<M, I> {
    loss: fn(&M, &I) -> Tensor,
    opt: AdamW,
    precision: Precision,
    gradient: Gradient,
}

/// Whose gradient a step applies.
#[derive(Clone, Copy)]
enum Gradient {
    /// This process's batch's.
    OfThisProcess,
    /// The mean of every process's (data parallelism).
    MeanOverProcesses,
}

/// Weights for `model` drawn as is usual for a transformer: norms at one,
/// biases at zero, matrices normal with standard deviation `1 / sqrt(n)`
/// for `n` inputs (the last axis).
pub fn init_weights<M: Module>(
    platform: &Platform,
    model: &M,
    rng: &mut Rng,
) -> Result<Bufferized<M>> {
    Ok(model.map(&mut String::new(), &mut |path, t| {
        let s: Shape = t.shape();
        let values: Vec<f32> = if path.contains("norm") {
            vec![1.0; s.count()]
        } else if s.rank() < 2 {
            vec![0.0; s.count()]
        } else {
            let fan_in = s.dims()[s.rank() - 1] as f64;
            normal(rng, s.count(), 1.0 / fan_in.sqrt())
        };
        Buffer::from_slice(platform, &values, s)
    })?)
}

/// The small llama of `examples/train_lm.rs`, its test and `radix-bench
/// train`: 2 layers of width 64, 4 query and 2 key/value heads, an FFN of
/// 192, and bytes as tokens (a vocabulary of 256).
pub fn byte_llama() -> LlamaConfig {
    LlamaConfig::new(Arch::Llama, 2, 64, (4, 2), 192, 256)
}

/// The AdamW settings [`byte_llama`] trains with.
pub const BYTE_LLAMA_ADAMW: AdamW = AdamW {
    lr: 3e-3,
    betas: (0.9, 0.99),
    eps: 1e-8,
    weight_decay: 0.01,
};

/// `len` consecutive bytes of `text` from a random place, as token ids;
/// `text` must be longer than `len`.
pub fn byte_window(text: &[u8], len: usize, rng: &mut Rng) -> Vec<i32> {
    let at = (rng.next_u64() % (text.len() - len) as u64) as usize;
    text[at..at + len].iter().map(|&b| i32::from(b)).collect()
}

/// Normal samples (Box-Muller) scaled by `std`.
pub(crate) fn normal(rng: &mut Rng, n: usize, std: f64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
            ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos() * std) as f32
        })
        .collect()
}
