//! GGUF files given to `radix generate --model`: not GGUF, cut short,
//! counts and lengths no file could hold (which must not size an
//! allocation), tensors with no or zero dims or data outside the file,
//! block types radix has no kernel for, and metadata that does not describe
//! a model radix can run (zero heads, a billion layers, an architecture or
//! a vocabulary kind it does not know). Files are the tiny models of
//! `radix-models/tests/fixtures/tiny`, changed in place.

use crate::{Case, check, find_once, patched, tiny, write};

/// The bytes of key `key`'s entry up to its value: the key with its
/// length, and the value's type.
fn key_bytes(key: &str, ty: u32) -> Vec<u8> {
    let mut b = (key.len() as u64).to_le_bytes().to_vec();
    b.extend(key.as_bytes());
    b.extend(ty.to_le_bytes());
    b
}

/// `bytes` with the `u32` value of metadata `key` set to `value`.
fn with_u32(bytes: &[u8], key: &str, value: u32) -> Vec<u8> {
    let at = find_once(bytes, &key_bytes(key, 4)) + key_bytes(key, 4).len();
    let mut out = bytes.to_vec();
    out[at..at + 4].copy_from_slice(&value.to_le_bytes());
    out
}

/// The tensor-info bytes of `name` up to its type: the name with its
/// length, the rank, and `ne` (the file's dims, fastest first).
fn tensor_info(name: &str, ne: &[u64]) -> Vec<u8> {
    let mut b = (name.len() as u64).to_le_bytes().to_vec();
    b.extend(name.as_bytes());
    b.extend((ne.len() as u32).to_le_bytes());
    for d in ne {
        b.extend(d.to_le_bytes());
    }
    b
}

/// A GGUF string value.
fn string(v: &str) -> Vec<u8> {
    let mut b = 8u32.to_le_bytes().to_vec();
    b.extend((v.len() as u64).to_le_bytes());
    b.extend(v.as_bytes());
    b
}

#[test]
fn gguf_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let llama = std::fs::read(tiny("llama.f32.gguf")).unwrap();
    let w = |name: &str, bytes: &[u8]| {
        write(d, name, bytes);
    };
    w("notes.gguf", b"these are notes, not weights\n");
    w("empty.gguf", b"");
    w("magic.gguf", &patched(&llama[..8], b"GGUF", b"GGUX"));
    let mut version = llama.clone();
    version[4..8].copy_from_slice(&99u32.to_le_bytes());
    w("version.gguf", &version);
    w("cut_metadata.gguf", &llama[..300]);
    w("cut_data.gguf", &llama[..llama.len() - 4096]);
    let mut tensors = llama.clone();
    tensors[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    w("tensor_count.gguf", &tensors);
    let mut kvs = llama.clone();
    kvs[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    w("kv_count.gguf", &kvs);
    let mut key_len = llama.clone();
    key_len[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes());
    w("key_length.gguf", &key_len);
    w(
        "zero_heads.gguf",
        &with_u32(&llama, "llama.attention.head_count", 0),
    );
    w(
        "zero_kv_heads.gguf",
        &with_u32(&llama, "llama.attention.head_count_kv", 0),
    );
    w(
        "three_heads.gguf",
        &with_u32(&llama, "llama.attention.head_count", 3),
    );
    w(
        "zero_width.gguf",
        &with_u32(&llama, "llama.embedding_length", 0),
    );
    w(
        "layers_1e9.gguf",
        &with_u32(&llama, "llama.block_count", 1_000_000_000),
    );
    w(
        "zero_context.gguf",
        &with_u32(&llama, "llama.context_length", 0),
    );
    w(
        "zero_ffn.gguf",
        &with_u32(&llama, "llama.feed_forward_length", 0),
    );
    w(
        "zero_dim.gguf",
        &patched(
            &llama,
            &tensor_info("token_embd.weight", &[32, 280]),
            &tensor_info("token_embd.weight", &[0, 280]),
        ),
    );
    // A norm weight of rank 0: its 8 bytes of dims move into the model's
    // name, so every offset after them stays where it was.
    let no_dims = patched(
        &llama,
        &tensor_info("blk.0.attn_norm.weight", &[32]),
        &tensor_info("blk.0.attn_norm.weight", &[]),
    );
    let no_dims = patched(
        &no_dims,
        &[key_bytes("general.name", 8), string("Llama")[4..].to_vec()].concat(),
        &[
            key_bytes("general.name", 8),
            string("Llama 12345678")[4..].to_vec(),
        ]
        .concat(),
    );
    w("no_dims.gguf", &no_dims);
    let embd = tensor_info("token_embd.weight", &[32, 280]);
    let at = find_once(&llama, &embd) + embd.len() + 4;
    let mut offset = llama.clone();
    offset[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    w("offset.gguf", &offset);
    let mut rank = llama.clone();
    let at = find_once(&llama, &embd) + 8 + "token_embd.weight".len();
    rank[at..at + 4].copy_from_slice(&9u32.to_le_bytes());
    w("rank_9.gguf", &rank);
    let tokens = key_bytes("tokenizer.ggml.tokens", 9);
    let at = find_once(&llama, &tokens) + tokens.len() + 4;
    let mut n_tokens = llama.clone();
    n_tokens[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    w("token_count.gguf", &n_tokens);
    w(
        "no_merges.gguf",
        &patched(&llama, b"tokenizer.ggml.merges", b"tokenizer.ggml.merged"),
    );
    w(
        "rwkv6.gguf",
        &patched(
            &llama,
            &[b"general.architecture".to_vec(), string("llama")].concat(),
            &[b"general.architecture".to_vec(), string("rwkv6")].concat(),
        ),
    );
    let mut q4_k = tensor_info("blk.0.ffn_down.weight", &[256, 32]);
    let mut iq2_xs = q4_k.clone();
    // IQ2_XS (ggml type 17) blocks are smaller than Q4_K's (type 12), so
    // the data still lies inside the file.
    q4_k.extend(12u32.to_le_bytes());
    iq2_xs.extend(17u32.to_le_bytes());
    w(
        "iq2_xs.gguf",
        &patched(
            &std::fs::read(tiny("qwen3.q4_k_m.gguf")).unwrap(),
            &q4_k,
            &iq2_xs,
        ),
    );
    w(
        "no_eps.gguf",
        &patched(
            &std::fs::read(tiny("gemma3.f32.gguf")).unwrap(),
            b"gemma3.attention.layer_norm_rms_epsilon",
            b"gemma3.attention.layer_norm_rms_epsiloX",
        ),
    );
    w(
        "t5.gguf",
        &radix::io::gguf::strings_only_file(&[("tokenizer.ggml.model", "t5")]),
    );
    std::fs::create_dir(d.join("empty_folder")).unwrap();

    let model = |name: &'static str, model: &str, want: &str| generate(name, model, want);
    let cases = vec![
        model(
            "a missing file",
            "missing.gguf",
            "model file missing.gguf not found",
        ),
        model(
            "an unknown model name",
            "llama-7b",
            "unknown model \"llama-7b\"",
        ),
        model(
            "a text file",
            "notes.gguf",
            "notes.gguf: not a valid GGUF file",
        ),
        model("an empty file", "empty.gguf", "empty.gguf"),
        model("a bad magic", "magic.gguf", "magic.gguf"),
        model("version 99", "version.gguf", "version 99"),
        model(
            "a file cut in its metadata",
            "cut_metadata.gguf",
            "cut_metadata.gguf",
        ),
        model(
            "a file cut in its tensor data",
            "cut_data.gguf",
            "cut_data.gguf",
        ),
        model("2^40 tensors", "tensor_count.gguf", "tensor_count.gguf"),
        model("2^40 metadata entries", "kv_count.gguf", "kv_count.gguf"),
        model(
            "a key 2^62 bytes long",
            "key_length.gguf",
            "key_length.gguf",
        ),
        model("zero heads", "zero_heads.gguf", "head_count"),
        model(
            "zero key-value heads",
            "zero_kv_heads.gguf",
            "head_count_kv",
        ),
        model(
            "heads that do not fit the width",
            "three_heads.gguf",
            "three_heads.gguf",
        ),
        model("zero width", "zero_width.gguf", "embedding_length"),
        model("a billion layers", "layers_1e9.gguf", "block_count"),
        model("a context of 0", "zero_context.gguf", "context_length"),
        model(
            "a feed-forward width of 0",
            "zero_ffn.gguf",
            "feed_forward_length",
        ),
        model(
            "a tensor with a zero dim",
            "zero_dim.gguf",
            "token_embd.weight",
        ),
        model(
            "a tensor with no dims",
            "no_dims.gguf",
            "blk.0.attn_norm.weight",
        ),
        model(
            "a tensor outside the file",
            "offset.gguf",
            "token_embd.weight",
        ),
        model("a tensor of rank 9", "rank_9.gguf", "rank_9.gguf"),
        model("2^40 tokens", "token_count.gguf", "token_count.gguf"),
        model(
            "a byte-level vocabulary without merges",
            "no_merges.gguf",
            "merges",
        ),
        model(
            "an architecture radix does not run",
            "rwkv6.gguf",
            "architecture \"rwkv6\" is not one radix runs (known: llama, mistral, qwen2, qwen3, gemma3)",
        ),
        model(
            "a block type without a kernel",
            "iq2_xs.gguf",
            "iq2_xs.gguf: tensor `blk.0.ffn_down.weight` has type IQ2_XS",
        ),
        model(
            "a missing metadata key",
            "no_eps.gguf",
            "no_eps.gguf: metadata gemma3.attention.layer_norm_rms_epsilon missing",
        ),
        model(
            "a vocabulary kind radix cannot build",
            "t5.gguf",
            "t5.gguf: tokenizer: `tokenizer.ggml.model` is \"t5\", a kind radix cannot build",
        ),
        model(
            "a folder without config.json",
            "empty_folder",
            "is a folder without config.json, not a Hugging Face model",
        ),
    ];
    eprintln!("{} GGUF cases", check(d, cases));
}

/// `radix generate --max-tokens 2 --model MODEL hi`.
pub fn generate(name: &'static str, model: &str, want: &str) -> Case {
    Case::new(
        name,
        &[
            &"generate",
            &"--max-tokens",
            &"2",
            &"--model",
            &model,
            &"hi",
        ],
        want,
    )
}
