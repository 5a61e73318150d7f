//! Trains a small llama-style language model from scratch on a text file,
//! its bytes as tokens: `radix_models::llama::Llama` with 2 layers of width
//! 64, `Decoder::next_token_loss` on windows of the text, its gradient by
//! `radix::grad` and AdamW, one donated step (`radix_models::train`). The
//! loss is printed at every step; it starts at about ln 256 = 5.5.
//!
//! Run: `cargo run -p radix-models --example train_lm -- [TEXT] [STEPS] [BATCH]`
//! (default: the repository's README.md, 400 steps of 1 window; its loss
//! falls from 5.9 to about 2.6, below half, as `tests/train_lm.rs` checks).
//! A step of BATCH windows trains on their mean loss.

use std::path::PathBuf;

use radix::{Buffer, DType, Platform, Shape, Tensor};
use radix_models::llama::Llama;
use radix_models::sampling::Rng;
use radix_models::train::{BYTE_LLAMA_ADAMW, Trainer, byte_llama, byte_window, init_weights};

/// Tokens per window: 64 predicted from the ones before them.
const WINDOW: i64 = 65;

fn loss(m: &Llama, ids: &Tensor) -> Tensor {
    m.next_token_loss(*ids)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
        PathBuf::from,
    );
    let steps: usize = args.get(2).map_or(Ok(400), |s| s.parse())?;
    let batch: usize = args.get(3).map_or(Ok(1), |s| s.parse())?;
    if batch == 0 {
        return Err("a batch of 0 windows".into());
    }
    let text = std::fs::read(&path)?;
    if text.len() <= WINDOW as usize {
        return Err(format!("{} holds fewer than {WINDOW} bytes", path.display()).into());
    }

    let platform = Platform::cpu()?;
    let model = Llama::new(&byte_llama());
    let mut rng = Rng::new(0);
    let weights = init_weights(&platform, &model, &mut rng)?;
    let shape = Shape::tagged(DType::I32, &[("b", batch as i64), ("s", WINDOW)]);
    let mut trainer = Trainer::new(
        &platform,
        &model,
        weights,
        &Tensor::param(shape),
        loss,
        BYTE_LLAMA_ADAMW,
    )?;
    let mut first = None;
    let mut last = 0.0;
    for step in 0..steps {
        let ids: Vec<i32> = (0..batch)
            .flat_map(|_| byte_window(&text, WINDOW as usize, &mut rng))
            .collect();
        last = trainer.step(Buffer::from_slice(&platform, &ids, shape)?)?;
        first.get_or_insert(last);
        println!("step {step}: loss {last:.4}");
    }
    println!(
        "loss {:.4} -> {last:.4} in {steps} steps on {}",
        first.unwrap_or(last),
        path.display()
    );
    Ok(())
}
