//! SmolLM2-135M-Instruct through radix on the CPU plugin: prefill tokens/s for
//! a 128-token prompt and decode tokens/s (one token per step with the KV
//! cache, after that prompt). Host copies of the inputs and of the logits are
//! included; compilation happens before timing.
//!
//! Run with `cargo bench -p radix-models --bench llama`.

use std::time::{Duration, Instant};

use radix::Platform;
use radix::io::Gguf;
use radix::nn::MatrixFormat;
use radix_models::engine::Engine;

const PROMPT: usize = 128;
const DECODE: usize = 64;
const RUNS: usize = 5;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let platform = Platform::cpu()?;
    let gguf = Gguf::open(&radix_models::packages::smollm2_gguf()?)?;
    let t = Instant::now();
    let mut engine = Engine::load(&platform, gguf, PROMPT + DECODE, MatrixFormat::AsStored)?;
    println!("load: {:.2?}", t.elapsed());
    // Any tokens will do; these cycle through ordinary word ids.
    let prompt: Vec<u32> = (0..PROMPT as u32).map(|i| 1000 + 37 * i).collect();

    let t = Instant::now();
    let (_, mut cache) = engine.prefill(&prompt)?;
    engine.decode(0, &mut cache)?;
    println!(
        "compile prefill ({PROMPT}) + decode, first run: {:.2?}",
        t.elapsed()
    );

    let mut times = vec![];
    for _ in 0..RUNS {
        let t = Instant::now();
        engine.prefill(&prompt)?;
        times.push(t.elapsed());
    }
    let best = median(&mut times);
    println!(
        "prefill {PROMPT} tokens: median {best:.2?} = {:.0} tokens/s",
        PROMPT as f64 / best.as_secs_f64()
    );

    let mut times = vec![];
    for _ in 0..RUNS {
        let (mut logits, mut cache) = engine.prefill(&prompt)?;
        let t = Instant::now();
        for _ in 0..DECODE {
            let next = radix_models::sampling::Sampler::greedy().pick(&logits) as u32;
            logits = engine.decode(next, &mut cache)?;
        }
        times.push(t.elapsed() / DECODE as u32);
    }
    let step = median(&mut times);
    println!(
        "decode after {PROMPT} tokens: median {step:.2?}/token = {:.1} tokens/s",
        1.0 / step.as_secs_f64()
    );
    Ok(())
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}
