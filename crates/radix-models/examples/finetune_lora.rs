//! Fine-tunes SmolLM2-135M-Instruct (its Q4_1 GGUF file, fetched on first
//! use) on a short story shipped here (`examples/data/lighthouse.txt`)
//! with LoRA adapters: rank 8, alpha 16, on every projection of every
//! block (`q_proj` ... `down_proj`), trained by `LoraTrainer` while the
//! base weights stay in their Q4_1 blocks (products exact: `W·x` in f32),
//! frozen. The story is cut into windows of 65 tokens, 64 apart, taken in
//! order, one a step; the loss is printed at every step and its mean over
//! each pass through the story (an epoch) after it. The adapter is saved as
//! `peft` saves one (`adapter_config.json`, `adapter_model.safetensors`),
//! and the greedy continuation of the story's first words is printed by
//! the base model and by the model with the adapter. The peak resident
//! memory of the process (`VmHWM`) is printed last.
//!
//! Run: `cargo run -p radix-models --example finetune_lora --
//! [EPOCHS] [OUT_DIR]` (default: 3 epochs of 12 steps, the adapter written
//! to `target/lora-lighthouse`), then
//! `radix generate --lora OUT_DIR "Marta Vell kept the light"`.
//!
//! With `--full` as the first argument, it trains every weight instead
//! (`radix_models::train::Trainer`, the matrices dequantized to f32, as a
//! full fine-tune must hold them) on the same windows and saves nothing:
//! the memory to compare with. Both print the peak after training, before
//! the models that generate are loaded.

use std::path::PathBuf;

use radix::nn::MatrixFormat;
use radix::optim::{AdamW, Precision};
use radix::{Buffer, DType, Platform, Shape, Tensor};
use radix_models::engine::{Engine, config_of, weight_store};
use radix_models::llama::Llama;
use radix_models::lora::{LoraConfig, LoraTrainer, initial_adapters, save_adapter};
use radix_models::sampling::{Rng, Sampler};
use radix_models::train::Trainer;

/// Tokens per window: 64 predicted from the ones before them.
const WINDOW: usize = 65;

/// Where one window starts after the previous one.
const STRIDE: usize = WINDOW - 1;

/// The story's opening words, continued by both models at the end.
const PROMPT: &str = "Marta Vell kept the light on Gannet Rock";

const TEXT: &str = include_str!("data/lighthouse.txt");

const ADAMW: AdamW = AdamW {
    lr: 2e-3,
    betas: (0.9, 0.999),
    eps: 1e-8,
    weight_decay: 0.0,
};

/// A full fine-tune moves every weight: a smaller step.
const ADAMW_FULL: AdamW = AdamW { lr: 1e-4, ..ADAMW };

fn loss(m: &Llama, ids: &Tensor) -> Tensor {
    m.next_token_loss(*ids)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.first().is_some_and(|a| a == "--full");
    if full {
        args.remove(0);
    }
    let epochs: usize = args.first().map_or(Ok(3), |s| s.parse())?;
    let out = args.get(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/lora-lighthouse"),
        PathBuf::from,
    );
    let gguf_path = radix_models::packages::smollm2_gguf()?;
    let gguf = radix::io::Gguf::open(&gguf_path)?;
    let tokenizer = radix_text::Tokenizer::from_gguf(&gguf)?;
    let text = tokenizer.encode(TEXT)?;
    if text.len() <= WINDOW {
        return Err(format!("the text is {} tokens, fewer than {WINDOW}", text.len()).into());
    }
    let starts: Vec<usize> = (0..=text.len() - WINDOW).step_by(STRIDE).collect();
    let steps = epochs * starts.len();
    println!(
        "{} tokens of text, {} windows of {WINDOW}, {epochs} epochs",
        text.len(),
        starts.len()
    );
    let platform = Platform::cpu()?;
    let cfg = config_of(&gguf_path)?;
    let shape = Shape::tagged(DType::I32, &[("b", 1), ("s", WINDOW as i64)]);
    let batch = Tensor::param(shape);
    let mut rng = Rng::new(0);
    let lora = LoraConfig::every_projection(8, 16.0);
    let mut step: Box<dyn FnMut(Buffer) -> radix_models::Result<f32>> = if full {
        let mut model = Llama::new(&cfg);
        let store = radix::io::WeightStore::new(vec![Box::new(gguf)], str::to_string);
        radix::nn::set_matrix_formats(&mut model, &store, MatrixFormat::F32);
        let weights = radix::nn::load_weights(&platform, &store, &model)?;
        let mut trainer = Trainer::new(
            &platform,
            &model,
            weights,
            &batch,
            loss,
            ADAMW_FULL,
            Precision::Full,
        )?;
        Box::new(move |ids| trainer.step(ids))
    } else {
        let mut model = Llama::new(&cfg).with_lora(&lora)?;
        let init = Box::new(initial_adapters(&model, &mut rng));
        let (_, store) = weight_store(&gguf_path, init)?;
        radix::nn::set_matrix_formats(&mut model, &store, MatrixFormat::Exact);
        let weights = radix::nn::load_weights(&platform, &store, &model)?;
        let mut trainer = LoraTrainer::new(&platform, &model, weights, &batch, loss, ADAMW)?;
        let out = out.clone();
        let lora = lora.clone();
        let mut done = 0;
        Box::new(move |ids| {
            let loss = trainer.step(ids)?;
            done += 1;
            if done == steps {
                let base = "HuggingFaceTB/SmolLM2-135M-Instruct";
                save_adapter(&out, &model, &trainer.weights()?, &lora, base)?;
            }
            Ok(loss)
        })
    };
    println!(
        "peak RSS after compiling (VmHWM): {} MiB",
        peak_rss_kib()? / 1024
    );
    let mut means = vec![];
    for epoch in 0..epochs {
        let mut sum = 0.0;
        for (k, &at) in starts.iter().enumerate() {
            let ids: Vec<i32> = text[at..at + WINDOW].iter().map(|&t| t as i32).collect();
            let loss = step(Buffer::from_slice(&platform, &ids, shape)?)?;
            sum += loss;
            println!("epoch {epoch} step {k}: loss {loss:.4}");
        }
        means.push(sum / starts.len() as f32);
        println!("epoch {epoch}: mean loss {:.4}", means[epoch]);
    }
    drop(step);
    let what = if full { "full fine-tune" } else { "LoRA" };
    let means: Vec<String> = means.iter().map(|m| format!("{m:.4}")).collect();
    println!("{what}: mean loss per epoch {}", means.join(" -> "));
    println!(
        "peak RSS after training (VmHWM): {} MiB",
        peak_rss_kib()? / 1024
    );
    if !full && steps > 0 {
        println!("adapter saved to {}", out.display());
        let prompt = tokenizer.encode(PROMPT)?;
        for (name, adapter) in [("base", None), ("with the adapter", Some(&out))] {
            let mut engine = match adapter {
                None => Engine::open(&platform, &gguf_path, 128, MatrixFormat::Exact)?,
                Some(dir) => {
                    Engine::open_with_lora(&platform, &gguf_path, dir, 128, MatrixFormat::Exact)?
                }
            };
            let ids = engine.generate(&prompt, 24, &mut Sampler::greedy())?;
            println!("{name}: {PROMPT}{}", tokenizer.decode(&ids)?);
        }
    }
    Ok(())
}

/// The process's peak resident memory, KiB (`VmHWM` of `/proc/self/status`).
fn peak_rss_kib() -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .ok_or("no VmHWM in /proc/self/status")?;
    let kib = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim();
    Ok(kib.parse()?)
}
