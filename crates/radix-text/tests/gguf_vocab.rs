//! Vocabularies from GGUF files against the ids and text of the tokenizer
//! transformers builds from the same file, on 420 strings each (whitespace
//! runs, digits, emoji, CJK, bytes no token holds, special tokens in the text):
//! SentencePiece (`tokenizer.ggml.model` = `llama`) as Gemma 3 270M's
//! (`tests/fixtures/gemma3/make.py`), Llama 2's and Phi-3's (llama.cpp's test
//! vocabularies, `tests/fixtures/spm/make.py`), and byte-level BPE with
//! Llama 3's split regex (`tests/fixtures/bpe/make.py`), all GGUF files without
//! tensors committed as fixtures; and the errors for vocabularies radix cannot
//! build. SmolLM2's byte-level BPE is checked in `tokenizer.rs`.

#[path = "../../radix-io/tests/common/mod.rs"]
mod common;
mod gemma3_vocab;

use std::path::{Path, PathBuf};

use common::write;
use gemma3_vocab::{fixtures, gemma3_vocab, unzip};
use radix_io::Gguf;
use radix_text::{ChatMessage, TemplateOrigin, Tokenizer, turn_end_ids};

fn reference(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Checks the tokenizer built from `gguf` against transformers' ids and
/// decodings in `reference` (a `tokens*.json` fixture): every string must
/// encode to the same ids and those decode to the same text.
fn check(gguf: &Path, reference: &Path) -> Tokenizer {
    let tok = Tokenizer::from_gguf(&Gguf::open(gguf).unwrap()).unwrap();
    let r = self::reference(reference);
    check_ids(&tok, &r);
    assert_eq!(tok.vocab_size(), r["vocab_size"].as_u64().unwrap() as usize);
    tok
}

/// Checks `tok` against the ids and decodings of the fixture `r`.
fn check_ids(tok: &Tokenizer, r: &serde_json::Value) {
    let id = |key: &str| r[key].as_u64().map(|i| i as u32);
    assert_eq!((tok.bos_id(), tok.eos_id()), (id("bos_id"), id("eos_id")));
    let cases = r["cases"].as_array().unwrap();
    assert!(cases.len() >= 400, "{} strings", cases.len());
    let mut wrong = vec![];
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids"]);
        let got = tok.encode(text).unwrap();
        if got != want {
            wrong.push(format!("{text:?}: got {got:?}, want {want:?}"));
            continue;
        }
        for (decoded, key) in [
            (tok.decode(&want).unwrap(), "decoded"),
            (
                tok.decode_skipping_special(&want).unwrap(),
                "decoded_skipping_special",
            ),
        ] {
            if decoded != case[key].as_str().unwrap() {
                wrong.push(format!("{text:?}: {key} {decoded:?}, want {}", case[key]));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}: {} of {} strings differ:\n{}",
        tok.path().display(),
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

fn spm_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spm")
}

/// Gemma 3: merges from the order of the tokens, no prefix space, tokens of
/// blanks respelled.
#[test]
fn gemma3_vocabulary_equals_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let tok = check(&gemma3_vocab(dir.path()), &fixtures().join("tokens.json"));
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(2), Some(1)));
}

/// Llama 2's vocabulary: merges from the scores, a prefix space.
#[test]
fn llama_vocabulary_equals_transformers() {
    let dir = spm_fixtures();
    let tok = check(
        &dir.join("ggml-vocab-llama-spm.gguf"),
        &dir.join("tokens-llama-spm.json"),
    );
    assert_eq!(tok.encode("Hello world").unwrap(), [1, 15043, 3186]);
    assert_eq!(tok.stop_ids(), [2]);
}

/// Phi-3's vocabulary: the prefix space and the `▁`s from a normalizer.
#[test]
fn phi3_vocabulary_equals_transformers() {
    let dir = spm_fixtures();
    let tok = check(
        &dir.join("ggml-vocab-phi-3.gguf"),
        &dir.join("tokens-phi-3.json"),
    );
    // `<|endoftext|>` (eos) and `<|end|>`, which ends its chat turns.
    assert_eq!(tok.stop_ids(), [32000, 32007]);
}

/// Llama 3's vocabulary: byte-level BPE with Llama 3's split regex (digits
/// in threes, `tokenizer.ggml.pre` = `llama-bpe`), no BOS added.
#[test]
fn llama3_vocabulary_equals_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let path = unzip(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/bpe/ggml-vocab-llama-bpe.gguf.zip"),
        "ggml-vocab-llama-bpe.gguf",
        dir.path(),
    );
    let tok = Tokenizer::from_gguf(&Gguf::open(&path).unwrap()).unwrap();
    let r = reference(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bpe/tokens-llama-bpe.json"),
    );
    check_ids(&tok, &r);
    // transformers' GPT2Tokenizer adds its default `<|endoftext|>` as id
    // 128256, past the model's 128,256 embeddings; radix does not.
    assert_eq!(tok.vocab_size(), 128_256);
    assert_eq!(r["vocab_size"], 128_257);
    assert_eq!(tok.encode("1234567").unwrap(), [4513, 10961, 22]);
    // `<|eot_id|>` ends a turn besides `<|end_of_text|>`.
    assert_eq!(tok.stop_ids(), [128_001, 128_009]);
}

#[test]
fn gemma3_turns_end_at_end_of_turn_and_use_the_known_template() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = Gguf::open(&gemma3_vocab(dir.path())).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    // `<eos>` and `<end_of_turn>`.
    assert_eq!(tok.stop_ids(), [1, 106]);
    assert_eq!(turn_end_ids(&gguf), [1, 106]);
    // The file ships no chat template: Gemma's known one is used.
    let template = tok.chat_template().unwrap();
    assert_eq!(
        template.origin(),
        &TemplateOrigin::Known {
            architecture: "gemma3".into(),
            name: "gemma"
        }
    );
    let prompt = tok
        .chat_prompt(&[ChatMessage::system("Be brief."), ChatMessage::user("Hi")])
        .unwrap();
    assert_eq!(
        prompt,
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    );
    // The rendered `<bos>` is the BOS token, and the only one: the template
    // writes it, so none is added (`apply_chat_template(tokenize=True)`).
    let ids = tok
        .chat_prompt_ids(&[ChatMessage::system("Be brief."), ChatMessage::user("Hi")])
        .unwrap();
    // transformers' apply_chat_template(.., tokenize=True) with this template.
    assert_eq!(
        ids,
        [
            2, 105, 2364, 107, 3912, 8652, 236761, 108, 10979, 106, 107, 105, 4368, 107
        ]
    );
    assert_eq!(tok.encode("Hi").unwrap(), [2, 10979]);
}

#[test]
fn vocabularies_of_unknown_kinds_are_errors_naming_file_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "t5.gguf",
        &radix_io::gguf::strings_only_file(&[("tokenizer.ggml.model", "t5")]),
    );
    let msg = Tokenizer::from_gguf(&Gguf::open(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert_eq!(msg.lines().count(), 1, "{msg}");
    for part in ["t5.gguf", "tokenizer.ggml.model", "\"t5\"", "gpt2", "llama"] {
        assert!(msg.contains(part), "{part} not in {msg}");
    }
    // A SentencePiece vocabulary without its tokens.
    let path = write(
        dir.path(),
        "bare.gguf",
        &radix_io::gguf::strings_only_file(&[("tokenizer.ggml.model", "llama")]),
    );
    let msg = Tokenizer::from_gguf(&Gguf::open(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("bare.gguf") && msg.contains("tokenizer.ggml.tokens"),
        "{msg}"
    );
}
