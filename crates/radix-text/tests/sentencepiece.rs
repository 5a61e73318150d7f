//! SentencePiece vocabularies from GGUF files (`tokenizer.ggml.model` =
//! `llama`): Gemma 3 270M's vocabulary, a GGUF file without tensors committed
//! as a fixture, against the ids and text of the tokenizer transformers builds
//! from the same file (`tests/fixtures/gemma3/make.py`), and the errors for
//! vocabularies radix cannot build.

#[path = "../../radix/tests/io_common/mod.rs"]
mod common;
mod gemma3_vocab;

use common::write;
use gemma3_vocab::{fixtures, gemma3_vocab};
use radix::io::Gguf;
use radix_text::{ChatMessage, TemplateOrigin, Tokenizer, turn_end_ids};

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("tokens.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn gemma3_vocabulary_equals_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = Gguf::open(&gemma3_vocab(dir.path())).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let r = reference();
    assert_eq!(tok.vocab_size(), r["vocab_size"].as_u64().unwrap() as usize);
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(2), Some(1)));
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
        assert_eq!(
            tok.decode(&want).unwrap(),
            case["decoded"].as_str().unwrap(),
            "{text:?}"
        );
        assert_eq!(
            tok.decode_skipping_special(&want).unwrap(),
            case["decoded_skipping_special"].as_str().unwrap(),
            "{text:?}"
        );
    }
    assert!(
        wrong.is_empty(),
        "{} of {} strings differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
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
    // The rendered `<bos>` is the BOS token, not text; encoding adds another
    // one, as transformers' `tokenizer(prompt)` does.
    assert_eq!(
        tok.encode_without_added_tokens(&prompt).unwrap()[..3],
        [2, 105, 2364]
    );
}

#[test]
fn vocabularies_of_unknown_kinds_are_errors_naming_file_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "t5.gguf",
        &gguf_with_strings(&[("tokenizer.ggml.model", "t5")]),
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
        &gguf_with_strings(&[("tokenizer.ggml.model", "llama")]),
    );
    let msg = Tokenizer::from_gguf(&Gguf::open(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("bare.gguf") && msg.contains("tokenizer.ggml.tokens"),
        "{msg}"
    );
}

/// A GGUF v3 file holding only string metadata.
fn gguf_with_strings(kv: &[(&str, &str)]) -> Vec<u8> {
    let mut g = b"GGUF".to_vec();
    g.extend(3u32.to_le_bytes());
    g.extend(0u64.to_le_bytes());
    g.extend((kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        g.extend((k.len() as u64).to_le_bytes());
        g.extend(k.as_bytes());
        g.extend(8u32.to_le_bytes());
        g.extend((v.len() as u64).to_le_bytes());
        g.extend(v.as_bytes());
    }
    g
}
