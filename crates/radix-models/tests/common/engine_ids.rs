//! Greedy ids of an [`Engine`] on the prompts of a reference fixture.

use std::path::PathBuf;

use radix_models::engine::Engine;
use radix_models::sampling::Sampler;
use serde_json::Value;

use super::greedy::top2_margin;

/// The prompts (token ids) of a fixture's `cases` (a path from the crate's
/// folder), and how many greedy ids it records for each.
pub fn prompts(fixture: &str) -> (Vec<Vec<u32>>, usize) {
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

/// `n` greedy ids after `prompt` and the top-2 margin of each pick.
pub fn greedy(engine: &mut Engine, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
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

/// The SmolLM2 reference prompts' fixture.
pub const SMOLLM2_CASES: &str = "tests/fixtures/reference/smollm2/smollm2_reference.json";
/// The Gemma 3 270M reference prompts' fixture.
pub const GEMMA3_CASES: &str = "tests/fixtures/gemma3_270m/expected.json";
