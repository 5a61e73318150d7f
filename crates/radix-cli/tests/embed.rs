//! `radix embed` against the PyTorch/sentence-transformers reference
//! (`radix-models/tests/fixtures/reference/minilm`, made by its `make.py`):
//! token ids and embeddings and the cosine table. Bad folders are the
//! bad-input suite's (`tests/bad_input`).

mod common;

use common::{radix, reference_dir};

use radix::io::Safetensors;
use radix::testing::{Tol, assert_all_close};
use serde_json::Value;

/// The reference sentences, their unpadded token ids and embeddings.
fn reference() -> (Vec<String>, Vec<Vec<u64>>, Vec<Vec<f32>>) {
    let dir = reference_dir().join("minilm");
    let path = dir.join("minilm_reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let json: Value = serde_json::from_str(&text).unwrap();
    let sentences: Vec<String> = serde_json::from_value(json["sentences"].clone()).unwrap();
    let ids: Vec<Vec<u64>> = serde_json::from_value(json["input_ids"].clone()).unwrap();
    let mask: Vec<Vec<u64>> = serde_json::from_value(json["attention_mask"].clone()).unwrap();
    let ids = ids
        .iter()
        .zip(&mask)
        .map(|(ids, mask)| {
            ids.iter()
                .zip(mask)
                .filter(|&(_, &m)| m == 1)
                .map(|(&i, _)| i)
                .collect()
        })
        .collect();
    let arrays = Safetensors::open(&dir.join("minilm_reference.safetensors")).unwrap();
    let flat = arrays.tensor("embeddings").unwrap().unwrap().to_f32_vec();
    let dim = flat.len() / sentences.len();
    let embeddings = flat.chunks(dim).map(<[f32]>::to_vec).collect();
    (sentences, ids, embeddings)
}

#[test]
fn json_equals_the_reference() {
    let (sentences, ids, want) = reference();
    let out = radix()
        .args(["embed", "--json"])
        .args(&sentences)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let json: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(json["model"], "minilm");
    assert_eq!(json["dim"], 384);
    let got_ids: Vec<Vec<u64>> = serde_json::from_value(json["ids"].clone()).unwrap();
    assert_eq!(got_ids, ids);
    let got: Vec<Vec<f32>> = serde_json::from_value(json["embeddings"].clone()).unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), 384);
        // As in radix-models' MiniLM parity test: six layers of f32 sums in
        // another order than PyTorch's (`ref_minilm.py`, 2 threads, an AMD
        // EPYC of this workplace), on unit vectors.
        let tol = Tol {
            rel: 0.0,
            abs: 1e-4,
        };
        assert_all_close(&format!("sentence {i}"), g, w, tol);
    }
}

/// The plain output: the numbered texts, then the cosine table (the
/// reference's cosine of sentences 0 and 1 is 0.10861).
#[test]
fn cosine_table() {
    let out = radix()
        .args([
            "embed",
            "The quick brown fox jumps over the lazy dog.",
            "Hello world",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let want = "\
[0] The quick brown fox jumps over the lazy dog.
[1] Hello world

cosine similarity
         [0]     [1]
[0]   1.0000  0.1086
[1]   0.1086  1.0000
";
    assert_eq!(text, want);
}
