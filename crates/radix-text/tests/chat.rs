//! Chat templates rendered with minijinja against transformers'
//! `apply_chat_template` (jinja2) for the same chats (`fixtures/chat/make.py`):
//! SmolLM2's and Phi-3's templates as their GGUF files ship them, Gemma's turns (the known template
//! for a gemma file that ships none), and a template using what HF templates
//! use beyond plain Jinja.

#[path = "../../radix-io/tests/common/mod.rs"]
mod common;
mod gemma3_vocab;

use std::path::Path;

use common::smollm2_gguf;
use radix_io::Gguf;
use radix_text::{ChatMessage, ChatTemplate, TemplateOrigin, Tokenizer};

fn reference() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat/chats.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn messages(v: &serde_json::Value) -> Vec<ChatMessage> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

/// Checks that `render(messages, add_generation_prompt)` gives transformers'
/// text for every chat of `cases`, or fails where transformers raised.
fn check(
    cases: &serde_json::Value,
    render: impl Fn(&[ChatMessage], bool) -> Result<String, String>,
) {
    for case in cases.as_array().unwrap() {
        let msgs = messages(&case["messages"]);
        for (key, add_generation_prompt) in [("prompt", true), ("transcript", false)] {
            let want = &case[key];
            let got = render(&msgs, add_generation_prompt);
            match (want["text"].as_str(), got) {
                (Some(want), Ok(got)) => assert_eq!(got, want, "{msgs:?}"),
                (None, Err(e)) => {
                    let raised = want["error"].as_str().unwrap();
                    assert!(
                        e.contains(raised) || msgs.is_empty(),
                        "{msgs:?}: {e} does not say {raised}"
                    );
                }
                (want, got) => panic!("{msgs:?}: want {want:?}, got {got:?}"),
            }
        }
    }
}

#[test]
fn smollm2_template_renders_as_transformers_renders_it() {
    let tok = Tokenizer::from_gguf(&Gguf::open(&smollm2_gguf()).unwrap()).unwrap();
    assert_eq!(
        tok.chat_template().unwrap().origin(),
        &TemplateOrigin::Shipped
    );
    check(&reference()["smollm2"], |msgs, generation_prompt| {
        let res = if generation_prompt {
            tok.chat_prompt(msgs)
        } else {
            tok.chat_transcript(msgs)
        };
        res.map_err(|e| e.to_string())
    });
    // ChatML's end of turn is SmolLM2's eos.
    assert_eq!(tok.stop_ids(), [2]);
}

#[test]
fn gemma_template_renders_as_transformers_renders_it() {
    let dir = tempfile::tempdir().unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::open(&gemma3_vocab::gemma3_vocab(dir.path())).unwrap())
        .unwrap();
    check(&reference()["gemma3"], |msgs, generation_prompt| {
        let res = if generation_prompt {
            tok.chat_prompt(msgs)
        } else {
            tok.chat_transcript(msgs)
        };
        res.map_err(|e| e.to_string())
    });
    // The exception the template raises is the error's one line.
    let msg = tok
        .chat_prompt(&[ChatMessage::assistant("a")])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("gemma-3-270m-vocab.gguf"), "{msg}");
    assert!(msg.contains("Conversation roles must alternate"), "{msg}");
    assert_eq!(msg.lines().count(), 1, "{msg}");
}

#[test]
fn phi3_template_renders_as_transformers_renders_it() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spm/ggml-vocab-phi-3.gguf");
    let tok = Tokenizer::from_gguf(&Gguf::open(&path).unwrap()).unwrap();
    check(&reference()["phi3"], |msgs, generation_prompt| {
        let res = if generation_prompt {
            tok.chat_prompt(msgs)
        } else {
            tok.chat_transcript(msgs)
        };
        res.map_err(|e| e.to_string())
    });
}

#[test]
fn hf_template_features_render_as_jinja2_renders_them() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat/features.jinja");
    let source = std::fs::read_to_string(path).unwrap();
    let template = ChatTemplate::shipped(&source, "<|im_start|>", "<|im_end|>");
    check(&reference()["features"], |msgs, generation_prompt| {
        if msgs.is_empty() {
            return Err("empty".into());
        }
        template.render(msgs, generation_prompt)
    });
    let err = template
        .render(&[ChatMessage::new("tool", "x")], true)
        .unwrap_err();
    assert!(err.contains("Unknown role: tool"), "{err}");
}

#[test]
fn known_templates_by_architecture() {
    let chatml = ChatTemplate::known("qwen2", "", "<|im_end|>").unwrap();
    assert_eq!(
        chatml.render(&[ChatMessage::user("Hi")], true).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        chatml.origin(),
        &TemplateOrigin::Known {
            architecture: "qwen2".into(),
            name: "chatml"
        }
    );
    assert!(ChatTemplate::known("bert", "", "").is_none());
    let syntax = ChatTemplate::shipped("{% for m in messages %}", "", "");
    let err = syntax.render(&[ChatMessage::user("Hi")], true).unwrap_err();
    assert!(err.contains("does not parse"), "{err}");
}
