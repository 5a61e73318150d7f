//! Training the adapters of a model alone: [`LoraTrainer`] compiles one
//! step, the loss of a batch, its gradient with respect to the adapters
//! ([`radix::value_and_grad`] with the adapters as parameters and the base
//! weights as arguments, which it does not differentiate) and the AdamW
//! update of the adapters, as one executable whose adapters and optimizer
//! state are donated. The base weights go in unchanged each step, in
//! whatever form they were loaded: a quantized matrix stays in its blocks,
//! and gradients flow through its products to the adapters below it.

use radix::optim::{AdamW, AdamWState, donate};
use radix::{Buffer, Bufferized, Compiled, Module, Platform, Tensor};

use crate::Result;
use radix::nn::Lora;

/// The leaves of one side of a model: its base weights or its adapters.
type Leaves = Vec<Tensor>;
/// A step's inputs: the base weights, the adapters, their optimizer state
/// and a batch.
type StepInputs<I> = (Leaves, Leaves, AdamWState<Leaves>, I);
/// A step's outputs: the loss before the step, the adapters and the state.
type StepOutputs = (Tensor, Leaves, AdamWState<Leaves>);

/// A model `M` (holding [`radix::nn::Lora`] adapters) whose adapters are
/// trained on batches `I`, its other weights frozen.
pub struct LoraTrainer<M: Module + Clone, I: Module + Clone> {
    exe: Compiled<(), StepInputs<I>, StepOutputs>,
    model: M,
    base: Vec<Buffer>,
    adapters: Vec<Buffer>,
    state: Bufferized<AdamWState<Leaves>>,
}

impl<M, I> LoraTrainer<M, I>
where
    M: Module + Clone,
    I: Module + Clone,
    Bufferized<I>: Clone,
{
    /// Compiles the step of `loss(model, batch)` with `opt` on the adapters
    /// of `model` for `batch`'s shapes, starting from `weights` (the base
    /// weights and the adapters' first values) and a zero optimizer state.
    pub fn new(
        platform: &Platform,
        model: &M,
        weights: Bufferized<M>,
        batch: &I,
        loss: impl Fn(&M, &I) -> Tensor,
        opt: AdamW,
    ) -> Result<LoraTrainer<M, I>> {
        let buffers = radix::module::leaves::<M, Buffer>(&weights);
        let (base, adapters) = split(model, buffers.into_iter().cloned());
        let tensors = radix::module::tensors(model).into_iter().map(|(_, t)| t);
        let (base_ts, adapter_ts) = split(model, tensors);
        let state_ts = AdamWState::params(&adapter_ts);
        let inputs = (base_ts, adapter_ts.clone(), state_ts, batch.clone());
        let template = model.clone();
        let exe = radix::compile_fn(platform, &inputs, |(b, a, s, x): StepInputs<I>| {
            let f = |a: &Leaves, (b, x): &(Leaves, I)| loss(&assemble(&template, b, a), x);
            let (value, g) = radix::value_and_grad(f, &a, &(b, x));
            let (a2, s2) = opt.update(&a, &g, &s);
            (value, donate(&a2, &a), donate(&s2, &s))
        })?;
        let state = radix::optim::zeros(platform, &AdamWState::params(&adapter_ts))?;
        Ok(LoraTrainer {
            exe,
            model: model.clone(),
            base,
            adapters,
            state,
        })
    }

    /// One step on `batch`; the batch's loss before the step.
    pub fn step(&mut self, batch: Bufferized<I>) -> Result<f32> {
        // The call consumes the adapters and the state (donated): the
        // step's results replace them. The base buffers are shared handles.
        let inputs = (
            self.base.clone(),
            self.adapters.clone(),
            self.state.clone(),
            batch,
        );
        let (loss, adapters, state) = self.exe.call_fn(inputs)?;
        (self.adapters, self.state) = (adapters, state);
        Ok(loss.to_vec::<f32>()?[0])
    }

    /// The model's weights: the base as loaded, the adapters so far.
    pub fn weights(&self) -> Result<Bufferized<M>> {
        let mut merged = Merged {
            base: self.base.iter(),
            adapters: self.adapters.iter(),
        };
        let weights = self.model.map(&mut String::new(), &mut |path, t| {
            merged.next_for(t).cloned().ok_or_else(|| {
                radix::Error::Host(format!("no buffer for {path}: the model changed"))
            })
        })?;
        Ok(weights)
    }
}

/// `leaves`, one per tensor of `model` in its visit order, split into the
/// base weights' and the adapters', each in that order.
fn split<M: Module, L>(model: &M, leaves: impl IntoIterator<Item = L>) -> (Vec<L>, Vec<L>) {
    let (mut base, mut adapters) = (vec![], vec![]);
    for ((_, t), leaf) in radix::module::tensors(model).iter().zip(leaves) {
        if Lora::is_adapter(t) {
            adapters.push(leaf);
        } else {
            base.push(leaf);
        }
    }
    (base, adapters)
}

/// [`split`] undone: the base weights' and the adapters' leaves handed out
/// in turn, as a walk over the model's tensors asks for them.
struct Merged<I> {
    base: I,
    adapters: I,
}

impl<I: Iterator> Merged<I> {
    /// The next leaf of `t`'s side.
    fn next_for(&mut self, t: &Tensor) -> Option<I::Item> {
        if Lora::is_adapter(t) {
            self.adapters.next()
        } else {
            self.base.next()
        }
    }
}

/// `template` with its base tensors replaced by `base` and its adapters'
/// by `adapters`, in visit order.
fn assemble<M: Module + Clone>(template: &M, base: &[Tensor], adapters: &[Tensor]) -> M {
    let mut m = template.clone();
    let mut merged = Merged {
        base: base.iter(),
        adapters: adapters.iter(),
    };
    m.visit_mut(&mut String::new(), &mut |_, t| {
        *t = *merged
            .next_for(t)
            .expect("as many tensors as the template has");
    });
    m
}
