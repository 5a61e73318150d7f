//! Tokenizers: MiniLM's `tokenizer.json` and SmolLM2's GGUF-embedded BPE against
//! the transformers reference ids, the GGUF-built tokenizer against the one
//! transformers built from the same GGUF (an HF `tokenizer.json` oracle), and
//! the ChatML chat template.

// The model files and reference outputs, found as the `radix` io tests find them.
#[path = "../../radix-io/tests/common/mod.rs"]
mod common;
mod gemma3_vocab;

use common::{minilm_dir, reference_dir, reference_json, smollm2_gguf, write};
use radix_io::Gguf;
use radix_quant::testing::Rng;
use radix_text::{ChatMessage, Tokenizer};

fn smollm2() -> Tokenizer {
    Tokenizer::from_gguf(&Gguf::open(&smollm2_gguf()).unwrap()).unwrap()
}

/// The tokenizer transformers built from SmolLM2's GGUF file, as it saves it
/// (`tokenizer.json` with `tokenizer_config.json` and `chat_template.jinja`
/// beside it), unzipped from the reference fixtures.
fn oracle() -> Tokenizer {
    let zip = reference_dir().join("smollm2/tokenizer_from_gguf.zip");
    let dir = tempfile::tempdir().unwrap();
    for name in ["tokenizer_config.json", "chat_template.jinja"] {
        gemma3_vocab::unzip(&zip, name, dir.path());
    }
    Tokenizer::from_file(&gemma3_vocab::unzip(&zip, "tokenizer.json", dir.path())).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Checks that `tok` encodes `text` to `want` and decodes it back to `text`.
fn check(tok: &Tokenizer, text: &str, want: &[u32]) {
    assert_eq!(tok.encode(text).unwrap(), want, "{text:?}");
}

#[test]
fn minilm_ids_equal_the_reference() {
    let tok = Tokenizer::from_file(&minilm_dir().join("tokenizer.json")).unwrap();
    let r = reference_json("minilm/minilm_reference.json");
    let sentences = r["sentences"].as_array().unwrap();
    for (i, s) in sentences.iter().enumerate() {
        let padded = ids(&r["input_ids"][i]);
        let mask = ids(&r["attention_mask"][i]);
        let want: Vec<u32> = padded
            .iter()
            .zip(&mask)
            .filter(|&(_, &m)| m == 1)
            .map(|(&id, _)| id)
            .collect();
        check(&tok, s.as_str().unwrap(), &want);
    }
    // No padding or truncation from the file's settings (it pads to 128).
    assert_eq!(tok.encode("Hello world").unwrap(), [101, 7592, 2088, 102]);
    assert_eq!(
        tok.encode_without_added_tokens("Hello world").unwrap(),
        [7592, 2088]
    );
    assert_eq!(
        tok.decode_skipping_special(&[101, 7592, 2088, 102])
            .unwrap(),
        "hello world"
    );
    let long = "word ".repeat(300);
    assert_eq!(tok.encode(&long).unwrap().len(), 302);
    let msg = tok
        .chat_prompt(&[ChatMessage::user("hi")])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("no chat template"), "{msg}");
}

#[test]
fn smollm2_prompt_ids_equal_the_reference() {
    let tok = smollm2();
    let r = reference_json("smollm2/smollm2_reference.json");
    for case in r["cases"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let want = ids(&case["prompt_ids"]);
        check(&tok, prompt, &want);
        assert_eq!(tok.encode_without_added_tokens(prompt).unwrap(), want);
        assert_eq!(tok.decode(&want).unwrap(), prompt);
        let greedy = ids(&case["greedy_10_ids"]);
        assert_eq!(
            tok.decode(&greedy).unwrap(),
            case["greedy_10_text"].as_str().unwrap()
        );
    }
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(1), Some(2)));
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tok.id_to_token(2).as_deref(), Some("<|im_end|>"));
}

#[test]
fn smollm2_chat_template_is_chatml() {
    let tok = smollm2();
    let r = reference_json("smollm2/smollm2_reference.json");
    let chat = &r["cases"][2];
    let prompt = tok
        .chat_prompt(&[ChatMessage::user("What is 2+2?")])
        .unwrap();
    assert_eq!(prompt, chat["prompt"].as_str().unwrap());
    assert_eq!(tok.encode(&prompt).unwrap(), ids(&chat["prompt_ids"]));
    // The same template read from `chat_template.jinja` beside a
    // `tokenizer.json` (as transformers saves it), with the same special tokens.
    let oracle = oracle();
    assert_eq!(
        oracle
            .chat_prompt(&[ChatMessage::user("What is 2+2?")])
            .unwrap(),
        prompt
    );
    assert_eq!((oracle.bos_id(), oracle.eos_id()), (Some(1), Some(2)));
    assert_eq!(oracle.stop_ids(), [2]);
    // An explicit system message replaces the default one.
    let msgs = [
        ChatMessage::system("Be brief."),
        ChatMessage::user("Hi"),
        ChatMessage::assistant("Hello!"),
    ];
    assert_eq!(
        tok.chat_transcript(&msgs).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n"
    );
}

/// Strings that exercise the GPT-2 pre-tokenizer regex and byte-level BPE:
/// unicode, whitespace runs, digits, code, contractions and special tokens.
fn corpus() -> Vec<String> {
    let fixed = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "\t\tindented",
        "Hello, world!",
        "hello world   ",
        "   leading spaces",
        "trailing\n \n",
        "I'm, you're, he's, we'll, they've, I'd, don't, CAN'T",
        "1234567890 12 345 6789 3.14159 -42 1e-5 0x1F",
        "2024-12-02T14:39:00Z",
        "fn main() { println!(\"{}\", 1 + 2); }",
        "def f(x):\n    return x ** 2  # square\n",
        "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }",
        "<html><body class=\"x\">&amp;&lt;</body></html>",
        "naïve café résumé Ångström façade",
        "Привет, мир! Как дела?",
        "你好，世界。我爱编程。",
        "こんにちは世界、カタカナ",
        "안녕하세요 세계",
        "مرحبا بالعالم",
        "שלום עולם",
        "Ελληνικά γράμματα αβγ",
        "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷",
        "math ∑∫√∞≈≠ ≤ ≥ ∀x∃y",
        "zero\u{200b}width\u{feff}bom",
        "\u{0}\u{1}\u{7f} control chars",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>",
        "text<|im_end|>text",
        "<repo_name>radix<file_sep>src/lib.rs<filename>a.rs<gh_stars>10",
        "<jupyter_code>print(1)<jupyter_output>1<empty_output>",
        "<|im_start",
        "< |im_start| >",
        "ALL CAPS SENTENCE WITH NUMBERS 123",
        "mIxEd CaSe wOrDs",
        "a\u{a0}non-breaking\u{a0}space",
        "tabs\tand\u{b}vertical\u{c}feeds\r\nCRLF",
        "................",
        "!!!???,,,;;;:::",
        "$100.00 + €50 = £?",
        "https://example.com/path?q=1&r=two#frag",
        "user@example.com",
        "snake_case_name camelCaseName PascalCase kebab-case",
        "'quoted' \"double\" `back`",
        "  \t \n mixed   whitespace\t\t\n\n  runs  ",
    ];
    let mut out: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    let mut rng = Rng(0x70_6b_6e);
    while out.len() < 400 {
        let n = 1 + rng.below(5);
        let mut s = String::new();
        for _ in 0..n {
            s.push_str(fixed[rng.below(fixed.len())]);
            s.push_str([" ", "", "\n", "  ", "1", "'s"][rng.below(6)]);
        }
        out.push(s);
    }
    out
}

#[test]
fn smollm2_gguf_tokenizer_equals_the_transformers_oracle() {
    let (tok, oracle) = (smollm2(), oracle());
    assert_eq!(tok.vocab_size(), oracle.vocab_size());
    for s in corpus() {
        let want = oracle.encode(&s).unwrap();
        check(&tok, &s, &want);
        assert_eq!(
            tok.decode(&want).unwrap(),
            oracle.decode(&want).unwrap(),
            "{s:?}"
        );
        assert_eq!(
            tok.decode_skipping_special(&want).unwrap(),
            oracle.decode_skipping_special(&want).unwrap()
        );
    }
}

#[test]
fn malformed_tokenizer_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "tokenizer.json",
        b"{\"version\": \"1.0\", \"model\": ",
    );
    let msg = Tokenizer::from_file(&path).unwrap_err().to_string();
    assert!(msg.contains("tokenizer.json"), "{msg}");
    let msg = Tokenizer::from_file(&dir.path().join("absent.json"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("absent.json"), "{msg}");
    // A GGUF file without a tokenizer.
    let mut g = b"GGUF".to_vec();
    g.extend(3u32.to_le_bytes());
    g.extend([0u8; 16]);
    let path = write(dir.path(), "empty.gguf", &g);
    let msg = Tokenizer::from_gguf(&Gguf::open(&path).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("empty.gguf") && msg.contains("tokenizer.ggml.model"),
        "{msg}"
    );
}
