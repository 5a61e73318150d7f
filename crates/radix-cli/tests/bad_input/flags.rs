//! Command lines `radix generate` and `radix embed` refuse: sampling flags
//! greedy decoding would ignore, values out of range, no text, a prompt
//! longer than the model's context (on the default SmolLM2 and MiniLM).

use crate::{Case, check};

#[test]
fn command_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // SmolLM2's context is 8192 tokens; each " hello" is one token.
    let long = "hello".to_string() + &" hello".repeat(9000);
    let cases = vec![
        Case::new(
            "--top-p above 1",
            &[&"generate", &"--top-p", &"2", &"hi"],
            "--top-p must be in (0, 1], got 2",
        ),
        Case::new(
            "--seed without sampling",
            &[&"generate", &"--seed", &"3", &"hi"],
            "--seed needs sampling: give --temperature above 0",
        ),
        Case::new(
            "--top-k without sampling",
            &[&"generate", &"--top-k", &"5", &"hi"],
            "--top-k needs sampling",
        ),
        Case::new(
            "a negative temperature",
            &[&"generate", &"--temperature=-1", &"hi"],
            "--temperature must be",
        ),
        Case::new("no prompt", &[&"generate"], "no prompt"),
        Case::new(
            "a prompt longer than the context",
            &[&"generate"],
            "the prompt is 9001 tokens, longer than the model's context of 8192 tokens",
        )
        .stdin(long),
        Case::new("no text to embed", &[&"embed"], "no text to embed"),
        Case::new(
            "an unknown embedding model",
            &[&"embed", &"--model", &"bert-large", &"hi"],
            "unknown model \"bert-large\"",
        ),
        Case::new(
            "a missing model folder",
            &[&"embed", &"--model", &"./missing", &"hi"],
            "model folder ./missing not found",
        ),
    ];
    eprintln!("{} command-line cases", check(d, cases));
}
