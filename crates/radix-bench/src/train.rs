//! `radix-bench train`: one training step of the MNIST MLP (batch 128) and
//! of the small llama of `examples/train_lm.rs` (one window of 65 tokens),
//! each the loss, its gradient (`radix::grad`) and the AdamW update in one
//! executable with the weights and optimizer state donated. The batch is
//! uploaded once; `bench/peers/train.py` times the same steps in JAX
//! (`jax.jit` of `jax.grad` and the update, donated) and PyTorch. The
//! llama's step is also timed in mixed precision (`MixedPrecision::BF16`:
//! bf16 forward and backward passes, f32 masters and update), radix alone.
//! Third, a LoRA step on SmolLM2-135M-Instruct (its Q4_1 GGUF file): rank
//! 8, alpha 16 adapters on every projection of every block, the base
//! frozen in its blocks with exact products (`W·x`, the function of the
//! dequantized weights), 64 next tokens, AdamW on the adapters
//! (`radix_models::lora::LoraTrainer`); `train.py torch --lora GGUF` times
//! PEFT doing the same step on the same file's weights, dequantized by
//! transformers. radix's step also runs on the base dequantized to f32 at
//! load, as PEFT holds it.

use anyhow::Result;
use radix::nn::MatrixFormat;
use radix::optim::{AdamW, MixedPrecision, Precision};
use radix::{Buffer, DType, Platform, Shape, Tensor};
use radix_models::engine::{config_of, weight_store};
use radix_models::llama::Llama;
use radix_models::lora::{LoraConfig, LoraTrainer, initial_adapters};
use radix_models::mnist::Mlp;
use radix_models::sampling::Rng;
use radix_models::train::{Trainer, byte_llama, init_weights};
use serde_json::json;

use crate::measure::{Report, time_per_call};

const BATCH: i64 = 128;
const WINDOW: i64 = 65;
/// Steps per sample of the LoRA step (`train.py` takes as many).
const LORA_STEPS: usize = 5;

fn mlp_loss(m: &Mlp, batch: &(Tensor, Tensor)) -> Tensor {
    m.loss(batch.0, batch.1)
}

fn lm_loss(m: &Llama, ids: &Tensor) -> Tensor {
    m.next_token_loss(*ids)
}

pub fn train(samples: usize, steps: usize) -> Result<Report> {
    let platform = Platform::cpu()?;
    let opt = AdamW {
        lr: 1e-3,
        betas: (0.9, 0.999),
        eps: 1e-8,
        weight_decay: 0.01,
    };
    let mut rng = Rng::new(0);
    let mut report = Report::new("train");

    let model = Mlp::new();
    let images = Shape::tagged(DType::U8, &[("b", BATCH), ("h", 28), ("w", 28)]);
    let labels = Shape::tagged(DType::I32, &[("b", BATCH)]);
    let batch = (Tensor::param(images), Tensor::param(labels));
    let weights = init_weights(&platform, &model, &mut rng)?;
    let mut trainer = Trainer::new(
        &platform,
        &model,
        weights,
        &batch,
        mlp_loss,
        opt,
        Precision::Full,
    )?;
    let pixels: Vec<u8> = (0..images.count())
        .map(|_| (rng.next_u64() % 256) as u8)
        .collect();
    let digits: Vec<i32> = (0..BATCH).map(|_| (rng.next_u64() % 10) as i32).collect();
    let x = Buffer::from_slice(&platform, &pixels, images)?;
    let y = Buffer::from_slice(&platform, &digits, labels)?;
    let values = step_ms(samples, steps, || trainer.step((x.clone(), y.clone())))?;
    report.samples("radix train mnist", "ms", &values);

    let bf16 = Precision::Mixed(MixedPrecision::BF16);
    for (precision, name) in [
        (Precision::Full, "radix train lm"),
        (bf16, "radix train lm bf16"),
    ] {
        let values = lm_step_ms(&platform, opt, precision, &mut rng, samples, steps)?;
        report.samples(name, "ms", &values);
    }
    // A LoRA step of SmolLM2 takes far longer than the small models' steps.
    // The base in its Q4_1 blocks (radix's way: a quarter of the memory),
    // and dequantized to f32 at load (PEFT's way).
    for (base, name) in [
        (MatrixFormat::Exact, "radix train lora"),
        (MatrixFormat::F32, "radix train lora f32"),
    ] {
        let values = lora_step_ms(&platform, base, &mut rng, samples, LORA_STEPS)?;
        report.samples(name, "ms", &values);
    }
    report.meta(
        "models",
        json!({"mnist_mlp": "784-128-10, batch 128", "small_lm": "llama, 2 layers, d 64, 4/2 heads, ffn 192, vocab 256, 65 tokens", "lora": "SmolLM2-135M-Instruct Q4_1, LoRA r 8 alpha 16 on q/k/v/o/gate/up/down, 65 tokens"}),
    );
    Ok(report)
}

/// `samples` times in milliseconds of one step of the small llama in
/// `precision`, each the mean of `steps` steps after one to warm up.
fn lm_step_ms(
    platform: &Platform,
    opt: AdamW,
    precision: Precision,
    rng: &mut Rng,
    samples: usize,
    steps: usize,
) -> Result<Vec<f64>> {
    let model = Llama::new(&byte_llama());
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", WINDOW)]);
    let weights = init_weights(platform, &model, rng)?;
    let batch = Tensor::param(shape);
    let mut trainer = Trainer::new(platform, &model, weights, &batch, lm_loss, opt, precision)?;
    let ids: Vec<i32> = (0..WINDOW).map(|_| (rng.next_u64() % 256) as i32).collect();
    let ids = Buffer::from_slice(platform, &ids, shape)?;
    step_ms(samples, steps, || trainer.step(ids.clone()))
}

/// `samples` times in milliseconds of one LoRA step on SmolLM2 (see the
/// module's doc), its base's matrices as `base` says, each the mean of
/// `steps` steps after one to warm up.
fn lora_step_ms(
    platform: &Platform,
    base: MatrixFormat,
    rng: &mut Rng,
    samples: usize,
    steps: usize,
) -> Result<Vec<f64>> {
    let file = radix_models::packages::smollm2_gguf()?;
    let cfg = config_of(&file)?;
    let lora = LoraConfig::every_projection(8, 16.0);
    let mut model = Llama::new(&cfg).with_lora(&lora)?;
    let init = Box::new(initial_adapters(&model, rng));
    let (_, store) = weight_store(&file, init)?;
    radix::nn::set_matrix_formats(&mut model, &store, base);
    let weights = radix::nn::load_weights(platform, &store, &model)?;
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", WINDOW)]);
    let opt = AdamW {
        lr: 2e-3,
        betas: (0.9, 0.999),
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let batch = Tensor::param(shape);
    let mut trainer = LoraTrainer::new(platform, &model, weights, &batch, lm_loss, opt)?;
    let vocab = cfg.vocab as u64;
    let ids: Vec<i32> = (0..WINDOW)
        .map(|_| (rng.next_u64() % vocab) as i32)
        .collect();
    let ids = Buffer::from_slice(platform, &ids, shape)?;
    step_ms(samples, steps, || trainer.step(ids.clone()))
}

/// `samples` times in milliseconds of `step`, each the mean of `steps`
/// calls, after one call to warm up.
fn step_ms<T>(
    samples: usize,
    steps: usize,
    mut step: impl FnMut() -> radix_models::Result<T>,
) -> Result<Vec<f64>> {
    step()?;
    let mut values = vec![];
    for _ in 0..samples {
        let t = time_per_call(steps, || step().map(|_| ()))?;
        values.push(t * 1e3);
    }
    Ok(values)
}
