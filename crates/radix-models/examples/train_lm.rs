//! Trains a small llama-style language model from scratch on a text file,
//! its bytes as tokens: `radix_models::llama::Llama` with 2 layers of width
//! 64, `Decoder::next_token_loss` on windows of the text, its gradient by
//! `radix::grad` and AdamW, one donated step (`radix_models::train`). The
//! loss is printed at every step; it starts at about ln 256 = 5.5.
//!
//! Run: `cargo run -p radix-models --example train_lm -- [--bf16] [TEXT]
//! [STEPS] [BATCH]` (default: the repository's README.md, 400 steps of 1
//! window; its loss falls from 5.9 to about 2.6, below half, as
//! `tests/train_lm.rs` checks). A step of BATCH windows trains on their
//! mean loss. `--bf16` trains the same model from the same weights in mixed
//! precision (`radix::optim::MixedPrecision::BF16`: bf16 forward and
//! backward passes, f32 master weights and update). The last line gives the
//! median time of a step, the first (which compiles nothing but warms up)
//! left out.
//!
//! `--data-parallel` trains over the processes of an MPI job (`radix
//! launch -n N -- train_lm --data-parallel ...`; BATCH must be a multiple
//! of N): every process draws the same global batch of BATCH windows and
//! steps on its share, and the step averages the loss and the gradient
//! over the processes (`Trainer::data_parallel`), so the losses are the
//! ones one process prints for the same global batch. Rank 0 prints the
//! losses; every rank ends with the sha256 of its weights, which agree.

use std::path::PathBuf;
use std::time::Instant;

use radix::collective::{process_count, process_index};
use radix::optim::{MixedPrecision, Precision};
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
    let mut args: Vec<String> = std::env::args().collect();
    let flag = |args: &mut Vec<String>, name: &str| {
        let on = args.iter().any(|a| a == name);
        args.retain(|a| a != name);
        on
    };
    let bf16 = flag(&mut args, "--bf16");
    let data_parallel = flag(&mut args, "--data-parallel");
    if let Some(unknown) = args.iter().skip(1).find(|a| a.starts_with("--")) {
        return Err(format!("unknown flag {unknown}").into());
    }
    let precision = if bf16 {
        Precision::Mixed(MixedPrecision::BF16)
    } else {
        Precision::Full
    };
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

    // Each process steps on its share: rows `rank * share..` of the batch.
    let (rank, processes) = if data_parallel {
        (process_index()?, process_count()?)
    } else {
        (0, 1)
    };
    if !batch.is_multiple_of(processes) {
        return Err(format!("a batch of {batch} windows over {processes} processes").into());
    }
    let share = batch / processes;

    let platform = Platform::cpu()?;
    let model = Llama::new(&byte_llama());
    let mut rng = Rng::new(0);
    let weights = init_weights(&platform, &model, &mut rng)?;
    let shape = Shape::tagged(DType::I32, &[("b", share as i64), ("s", WINDOW)]);
    let step_of = if data_parallel {
        Trainer::data_parallel
    } else {
        Trainer::new
    };
    let mut trainer = step_of(
        &platform,
        &model,
        weights,
        &Tensor::param(shape),
        loss,
        BYTE_LLAMA_ADAMW,
        precision,
    )?;
    let mut first = None;
    let mut last = 0.0;
    let mut times = vec![];
    for step in 0..steps {
        let ids: Vec<i32> = (0..batch)
            .flat_map(|_| byte_window(&text, WINDOW as usize, &mut rng))
            .collect();
        let mine = &ids[rank * share * WINDOW as usize..][..share * WINDOW as usize];
        let ids = Buffer::from_slice(&platform, mine, shape)?;
        let start = Instant::now();
        last = trainer.step(ids)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        first.get_or_insert(last);
        if rank == 0 {
            println!("step {step}: loss {last:.4}");
        }
    }
    if rank == 0 {
        println!(
            "loss {:.4} -> {last:.4} in {steps} steps on {}",
            first.unwrap_or(last),
            path.display()
        );
    }
    if data_parallel {
        println!(
            "rank {rank} of {processes}: weights sha256 {}",
            trainer.weights_sha256()?
        );
    }
    let mut times = times.split_off(1.min(times.len()));
    times.sort_by(f64::total_cmp);
    if let Some(median) = times.get(times.len() / 2) {
        let name = if bf16 { "bf16 mixed" } else { "f32" };
        println!("{median:.3} ms per step ({name}, median of steps 1..{steps})");
    }
    Ok(())
}
