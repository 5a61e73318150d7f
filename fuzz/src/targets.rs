//! One function per fuzz target: each takes the fuzzer's bytes as one file
//! (or two, split at [`SPLIT`]), opens it as radix does and uses what it
//! reads. A target returns whatever the parser says; only a panic, an abort
//! or a signal is a finding. The parsers take paths (they map or read
//! files), so the bytes are written to a scratch folder first, in
//! `/dev/shm` where there is one.
//!
//! This file is shared: the fuzz binaries (`fuzz/fuzz_targets`) call these
//! functions, and so does `radix-cli`'s `fuzz_regressions` test, which
//! includes it with `crate::npy` and `crate::signature` beside it.

use std::path::{Path, PathBuf};

use radix::io::{Gguf, Safetensors};
use radix_text::Tokenizer;

use crate::npy;
use crate::signature::{Signature, module_partitions};

/// The fuzz targets, by name, as [`run`] takes them.
pub const TARGETS: &[&str] = &[
    "npy",
    "npz",
    "gguf",
    "safetensors",
    "mlir",
    "tokenizer_json",
    "tokenizer_gguf",
];

/// Where an input of two files is split: `tokenizer_json` reads the bytes
/// after it as `tokenizer_config.json`, `safetensors` (when the input is a
/// shard index) as the shard the index names.
pub const SPLIT: &[u8] = b"\n#radix-fuzz-split#\n";

/// Runs target `name` on `data`; `false` if there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    let f: fn(&[u8]) = match name {
        "npy" => npy,
        "npz" => npz,
        "gguf" => gguf,
        "safetensors" => safetensors,
        "mlir" => mlir,
        "tokenizer_json" => tokenizer_json,
        "tokenizer_gguf" => tokenizer_gguf,
        _ => return false,
    };
    f(data);
    true
}

/// A `.npy` file, read as `radix run` reads its inputs.
pub fn npy(data: &[u8]) {
    let path = scratch("in.npy", data);
    if let Ok(a) = npy::read_npy(&path) {
        assert_eq!(
            a.data().len(),
            radix_pjrt::byte_len(a.ty(), a.dims()).expect("a read array has a byte length")
        );
    }
}

/// A `.npz` file, read whole and with a bound on each array.
pub fn npz(data: &[u8]) {
    let path = scratch("in.npz", data);
    let _ = npy::read_npz(&path);
    let _ = npy::read_npz_at_most(&path, 256);
}

/// A GGUF file: its metadata, and every tensor of up to a million elements
/// dequantized and as raw blocks.
pub fn gguf(data: &[u8]) {
    let path = scratch("model.gguf", data);
    let Ok(g) = Gguf::open(&path) else { return };
    for value in g.metadata().values() {
        let _ = (
            value.as_str(),
            value.as_i64(),
            value.as_f64(),
            value.as_array(),
        );
    }
    let names: Vec<String> = g.tensor_infos().iter().map(|t| t.name.clone()).collect();
    for name in names {
        let info = g.tensor_info(&name).expect("listed");
        let n = info
            .dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?));
        if n.is_none_or(|n| n > 1 << 20) {
            continue;
        }
        if let Ok(Some(t)) = g.tensor(&name) {
            let _ = t.to_f32_vec();
        }
        let _ = g.blocks(&name);
    }
}

/// A safetensors file, or (input starting with `{`) a
/// `model.safetensors.index.json` whose shard `model-00001.safetensors` is
/// the bytes after [`SPLIT`]; every tensor read as f32.
pub fn safetensors(data: &[u8]) {
    let path = if data.first() == Some(&b'{') {
        let (index, shard) = split(data);
        scratch("model-00001.safetensors", shard);
        scratch("model.safetensors.index.json", index)
    } else {
        scratch("model.safetensors", data)
    };
    let Ok(st) = Safetensors::open(&path) else {
        return;
    };
    for name in radix::io::TensorSource::names(&st) {
        let _ = st.info(&name);
        if let Ok(Some(t)) = st.tensor(&name) {
            let _ = t.to_f32_vec();
        }
    }
}

/// Module text as `radix run` reads it: the partition count, the `@main`
/// signature, and each argument's and result's tiling over 1, 2 and 4
/// partitions.
pub fn mlir(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = module_partitions(&text);
    let Ok(Some(sig)) = Signature::parse(&text) else {
        return;
    };
    for param in sig.args.iter().chain(&sig.results) {
        for n in [1, 2, 4] {
            if let Ok(tiling) = param.tiling(&text, n) {
                for p in 0..n {
                    let _ = tiling.block(p, &param.dims);
                }
            }
        }
    }
}

/// A `tokenizer.json`, with the bytes after [`SPLIT`] (if any) as its
/// `tokenizer_config.json`; a loaded tokenizer encodes and decodes a text.
pub fn tokenizer_json(data: &[u8]) {
    let (json, config) = split(data);
    let dir = scratch_dir();
    let config_path = dir.join("tokenizer_config.json");
    if data.len() > json.len() {
        scratch("tokenizer_config.json", config);
    } else {
        let _ = std::fs::remove_file(&config_path);
    }
    let path = scratch("tokenizer.json", json);
    if let Ok(t) = Tokenizer::from_file(&path) {
        use_tokenizer(&t);
    }
}

/// A GGUF file's vocabulary, as `radix generate` builds its tokenizer.
pub fn tokenizer_gguf(data: &[u8]) {
    let path = scratch("vocab.gguf", data);
    let Ok(g) = Gguf::open(&path) else { return };
    if let Ok(t) = Tokenizer::from_gguf(&g) {
        use_tokenizer(&t);
    }
}

fn use_tokenizer(t: &Tokenizer) {
    let text = "Hello world! <|im_end|> 3.14 \u{e9}t\u{e9} \u{1F600}\n\tdone";
    if let Ok(ids) = t.encode(text) {
        let _ = t.decode(&ids);
        let _ = t.decode_skipping_special(&ids);
    }
    let _ = t.encode_without_added_tokens(text);
    let _ = (t.vocab_size(), t.bos_id(), t.eos_id(), t.stop_ids());
    let _ = t.decode(&[0, 1, 2, u32::MAX]);
}

/// `data` cut at the first [`SPLIT`]: the bytes before it and after it
/// (empty without one).
fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(SPLIT.len()).position(|w| w == SPLIT) {
        Some(i) => (&data[..i], &data[i + SPLIT.len()..]),
        None => (data, &[]),
    }
}

/// This process's scratch folder, made on first use.
fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("radix-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// Writes `data` to file `name` in the scratch folder.
fn scratch(name: &str, data: &[u8]) -> PathBuf {
    let path = scratch_dir().join(name);
    std::fs::write(&path, data).expect("a scratch file");
    path
}

/// Removes this process's scratch folder.
pub fn remove_scratch() {
    let _ = std::fs::remove_dir_all(scratch_dir());
}
