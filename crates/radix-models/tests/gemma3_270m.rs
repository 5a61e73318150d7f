//! Gemma 3 270M Q4_K_M from PyPI (four chunk wheels, assembled by
//! `packages::gemma3_270m_gguf`) against transformers loading the same GGUF
//! (`tests/fixtures/gemma3_270m/make.py`: every tensor dequantized to f32):
//! at the token level, the last-position logits' best tokens and 16 greedy
//! ids per prompt.

mod common;

use std::path::PathBuf;

use common::greedy::{assert_greedy_eq, top2_margin};

use radix::nn::MatrixFormat;
use radix_models::engine::Engine;
use radix_models::sampling::Sampler;
use radix_models::transformer::Arch;
use serde_json::Value;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn greedy_ids_equal_transformers() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gemma3_270m/expected.json");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("expected.json")).expect("json");
    let file = radix_models::packages::gemma3_270m_gguf().expect("fetch Gemma 3 270M");
    let platform = radix::testing::platform();
    // transformers dequantizes: products with f32 activations.
    let mut engine = Engine::open(&platform, &file, 64, MatrixFormat::Exact).expect("load");
    let cfg = engine.config();
    assert_eq!(cfg.arch, Arch::Gemma3);
    assert_eq!((cfg.n_layers, cfg.dim, cfg.head_dim), (18, 640, 256));
    for case in expected["cases"].as_array().expect("cases") {
        let prompt = ids(&case["prompt_ids"]);
        let (logits, _) = engine.prefill(&prompt).expect("prefill");
        // The same weights summed in another order (blocks against f32)
        // over 18 layers: logits of order 10 to 20 agreed within 2e-5 here;
        // 1e-3 leaves room for other CPUs' roundoff.
        for (id, want) in ids(&case["top5_ids"])
            .iter()
            .zip(case["top5_logits"].as_array().unwrap())
        {
            let (got, want) = (logits[*id as usize], want.as_f64().unwrap() as f32);
            assert!(
                (got - want).abs() < 1e-3,
                "{case}: logit of {id}: {got} vs {want}"
            );
        }
        let greedy = engine
            .generate(&prompt, 16, &mut Sampler::greedy())
            .expect("generate");
        let want = ids(&case["greedy_16_ids"]);
        assert_greedy_eq(&case["prompt"].to_string(), &greedy, &want, |k| {
            let (logits, _) = engine
                .prefill(&[&prompt[..], &greedy[..k]].concat())
                .expect("prefill");
            top2_margin(&logits)
        });
    }
}
