//! Tokenizer files: a folder's `tokenizer.json` and `tokenizer_config.json`
//! (the tiny Qwen3 for `radix generate`, MiniLM for `radix embed`) that
//! are not JSON, cut short, or describe no tokenizer; a chat template that
//! does not parse; and GGUF vocabularies whose arrays have the wrong types.

use crate::gguf::generate;
use crate::safetensors::embed;
use crate::{Case, check, copy_dir, minilm, tiny, write};

#[test]
fn tokenizer_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let tok = std::fs::read(tiny("qwen3/tokenizer.json")).unwrap();
    for (name, file, bytes) in [
        ("tok_not_json", "tokenizer.json", &b"tokenizer"[..]),
        ("tok_empty_object", "tokenizer.json", b"{}"),
        ("tok_cut", "tokenizer.json", &tok[..tok.len() / 2]),
        (
            "tok_model_null",
            "tokenizer.json",
            br#"{"version": "1.0", "model": null}"#,
        ),
        // The tokenizers crate panicked on a control character in a
        // decoder's string (found by the tokenizer_json fuzz target).
        ("tok_control_char", "tokenizer.json", &control_char(&tok)),
        (
            "config_not_json",
            "tokenizer_config.json",
            b"{\"bos_token\": ",
        ),
        (
            "config_bad_template",
            "tokenizer_config.json",
            br#"{"eos_token": "</s>", "chat_template": "{% for m in messages %}{{ m.content "}"#,
        ),
        (
            "config_template_error",
            "tokenizer_config.json",
            br#"{"eos_token": "</s>", "chat_template": "{{ raise_exception('no chats here') }}"}"#,
        ),
    ] {
        let f = copy_dir(&tiny("qwen3"), &d.join(name));
        write(&f, file, bytes);
    }
    for (name, bytes) in [
        ("embed_tok_not_json", &b"["[..]),
        ("embed_tok_empty_object", b"{}"),
    ] {
        let f = minilm(d, name);
        write(&f, "tokenizer.json", bytes);
    }
    // GGUF vocabularies: tokens that are numbers, no tokens at all.
    write(
        d,
        "no_tokens.gguf",
        radix::io::gguf::strings_only_file(&[("tokenizer.ggml.model", "gpt2")]),
    );
    write(
        d,
        "token_string.gguf",
        radix::io::gguf::strings_only_file(&[
            ("tokenizer.ggml.model", "llama"),
            ("tokenizer.ggml.tokens", "not an array"),
        ]),
    );

    // A SentencePiece vocabulary whose scores hold a NaN: sorting merges
    // by score panicked (found by the tokenizer_gguf fuzz target).
    write(
        d,
        "nan_score.gguf",
        std::fs::read(crate::repo(
            "../fuzz/regressions/tokenizer_gguf/nan-score-sort",
        ))
        .unwrap(),
    );
    let model = |name: &'static str, folder: &str, want: &str| generate(name, folder, want);
    let cases = vec![
        model(
            "a tokenizer.json that is not JSON",
            "tok_not_json",
            "tok_not_json/tokenizer.json",
        ),
        model(
            "an empty tokenizer.json",
            "tok_empty_object",
            "tok_empty_object/tokenizer.json",
        ),
        model(
            "a tokenizer.json cut short",
            "tok_cut",
            "tok_cut/tokenizer.json",
        ),
        model(
            "a tokenizer without a model",
            "tok_model_null",
            "tok_model_null/tokenizer.json",
        ),
        model(
            "a control character in a decoder's string",
            "tok_control_char",
            "tok_control_char/tokenizer.json: tokenizer: not JSON: control character",
        ),
        model(
            "a tokenizer_config.json that is not JSON",
            "config_not_json",
            "config_not_json/tokenizer_config.json",
        ),
        Case::new(
            "a chat template that does not parse",
            &[
                &"generate",
                &"--max-tokens",
                &"2",
                &"--model",
                &"config_bad_template",
                &"--chat",
                &"hi",
            ],
            "template",
        ),
        Case::new(
            "a chat template that raises",
            &[
                &"generate",
                &"--max-tokens",
                &"2",
                &"--model",
                &"config_template_error",
                &"--chat",
                &"hi",
            ],
            "no chats here",
        ),
        embed(
            "a MiniLM tokenizer.json that is not JSON",
            "embed_tok_not_json",
        ),
        embed("an empty MiniLM tokenizer.json", "embed_tok_empty_object"),
        model(
            "a GGUF vocabulary without tokens",
            "no_tokens.gguf",
            "tokenizer.ggml.tokens",
        ),
        model(
            "a NaN among the scores",
            "nan_score.gguf",
            "nan_score.gguf: tokenizer: `tokenizer.ggml.scores[",
        ),
        model(
            "GGUF tokens that are a string",
            "token_string.gguf",
            "tokenizer.ggml.tokens",
        ),
    ];
    eprintln!("{} tokenizer cases", check(d, cases));
}

/// `tokenizer.json` with a raw control character in its decoder's type.
fn control_char(tok: &[u8]) -> Vec<u8> {
    crate::patched(
        tok,
        b"\"decoder\": {\n    \"type\": \"ByteLevel\"",
        b"\"decoder\": {\n    \"type\": \"Byte\x01Level\"",
    )
}
