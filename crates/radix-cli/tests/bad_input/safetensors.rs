//! safetensors checkpoints and their shard index (`model.safetensors.index.json`)
//! in a model folder given to `radix generate --model` (the tiny Qwen3,
//! two shards) and `radix embed --model` (MiniLM, one file): an index that
//! is not JSON, lacks its map, names missing shards or tensors in none of
//! them; shards whose header is too long, not JSON, cut short, or whose
//! tensors lie outside the file, overlap another shard or have a dtype
//! radix has no type for.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::gguf::generate;
use crate::{Case, check, copy_dir, minilm, minilm_dir, tiny, write};

const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";
const INDEX: &str = "model.safetensors.index.json";

/// A copy of the tiny Qwen3 folder as `dir/name`, changed by `change`.
fn qwen3(dir: &Path, name: &str, change: impl FnOnce(&Path)) -> PathBuf {
    let folder = copy_dir(&tiny("qwen3"), &dir.join(name));
    change(&folder);
    folder
}

/// `file` with its header JSON changed by `change`, the data kept.
fn with_header(file: &Path, change: impl FnOnce(&mut Value)) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    change(&mut header);
    let mut text = serde_json::to_vec(&header).unwrap();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + n..]);
    std::fs::write(file, out).unwrap();
}

/// `file` with tensor `name` stored as `F8_E4M3` of the same shape: its
/// first bytes kept, the later tensors moved up.
fn as_f8(file: &Path, name: &str) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let data = &bytes[8 + n..];
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let offsets = |v: &Value| -> (u64, u64) {
        let o = v["data_offsets"].as_array().unwrap();
        (o[0].as_u64().unwrap(), o[1].as_u64().unwrap())
    };
    let (begin, end) = offsets(&header[name]);
    let elements: u64 = header[name]["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .product();
    let cut = (end - begin) - elements;
    let map = header.as_object_mut().unwrap();
    for (k, v) in map.iter_mut() {
        if k == "__metadata__" {
            continue;
        }
        let (b, e) = offsets(v);
        if k == name {
            v["dtype"] = json!("F8_E4M3");
            v["data_offsets"] = json!([b, b + elements]);
        } else if b >= end {
            v["data_offsets"] = json!([b - cut, e - cut]);
        }
    }
    let mut new_data = data[..(begin + elements) as usize].to_vec();
    new_data.extend(&data[end as usize..]);
    let mut text = serde_json::to_vec(&header).unwrap();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(new_data);
    std::fs::write(file, out).unwrap();
}

/// The index of `folder` changed by `change`.
fn with_index(folder: &Path, change: impl FnOnce(&mut Value)) {
    let path = folder.join(INDEX);
    let mut index: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut index);
    std::fs::write(path, serde_json::to_vec(&index).unwrap()).unwrap();
}

#[test]
fn checkpoints_and_indexes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    qwen3(d, "index_not_json", |f| {
        write(f, INDEX, "{\"weight_map\": ");
    });
    qwen3(d, "index_no_map", |f| {
        with_index(f, |i| i["weight_map"] = json!(null))
    });
    qwen3(d, "index_number", |f| {
        with_index(f, |i| i["weight_map"]["model.norm.weight"] = json!(7))
    });
    qwen3(d, "index_missing_shard", |f| {
        with_index(f, |i| {
            i["weight_map"]["model.norm.weight"] = json!("model-00009-of-00009.safetensors")
        })
    });
    qwen3(d, "index_extra_tensor", |f| {
        with_index(f, |i| {
            i["weight_map"]["model.frobnicator.weight"] = json!(SHARD1)
        })
    });
    qwen3(d, "index_escapes", |f| {
        with_index(f, |i| {
            i["weight_map"]["model.norm.weight"] = json!("../../../../../../../../dev/null")
        })
    });
    qwen3(d, "header_2e63", |f| {
        let mut b = std::fs::read(f.join(SHARD1)).unwrap();
        b[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
        std::fs::write(f.join(SHARD1), b).unwrap();
    });
    qwen3(d, "header_not_json", |f| {
        let mut b = std::fs::read(f.join(SHARD1)).unwrap();
        b[8] = b'[';
        std::fs::write(f.join(SHARD1), b).unwrap();
    });
    qwen3(d, "shard_cut", |f| {
        let b = std::fs::read(f.join(SHARD2)).unwrap();
        std::fs::write(f.join(SHARD2), &b[..b.len() - 1000]).unwrap();
    });
    qwen3(d, "shard_cut_header", |f| {
        let b = std::fs::read(f.join(SHARD2)).unwrap();
        std::fs::write(f.join(SHARD2), &b[..100]).unwrap();
    });
    qwen3(d, "offsets_outside", |f| {
        with_header(&f.join(SHARD1), |h| {
            h["model.embed_tokens.weight"]["data_offsets"] = json!([0, 1u64 << 40])
        })
    });
    qwen3(d, "offsets_overflow", |f| {
        with_header(&f.join(SHARD1), |h| {
            h["model.embed_tokens.weight"]["data_offsets"] = json!([0, u64::MAX])
        })
    });
    qwen3(d, "shape_overflow", |f| {
        with_header(&f.join(SHARD1), |h| {
            h["model.embed_tokens.weight"]["shape"] = json!([u64::MAX, 2])
        })
    });
    qwen3(d, "f8", |f| {
        as_f8(&f.join(SHARD1), "model.embed_tokens.weight")
    });
    qwen3(d, "twice", |f| {
        let b = std::fs::read(f.join(SHARD1)).unwrap();
        std::fs::write(f.join(SHARD2), b).unwrap();
    });
    qwen3(d, "no_weights", |f| {
        for file in [INDEX, SHARD1, SHARD2] {
            std::fs::remove_file(f.join(file)).unwrap();
        }
    });

    let real = std::fs::read(minilm_dir().join("model.safetensors")).unwrap();
    for (name, weights) in [
        ("embed_not_weights", &b"not weights"[..]),
        ("embed_cut", &real[..1 << 16]),
    ] {
        let f = minilm(d, name);
        // The link to the cache's file goes first: writing through it
        // would change the cache.
        std::fs::remove_file(f.join("model.safetensors")).unwrap();
        std::fs::write(f.join("model.safetensors"), weights).unwrap();
    }
    drop(real);

    let model = |name: &'static str, folder: &str, want: &str| generate(name, folder, want);
    let cases = vec![
        model(
            "an index that is not JSON",
            "index_not_json",
            "shard index is not JSON",
        ),
        model(
            "an index without its map",
            "index_no_map",
            "shard index has no `weight_map` object",
        ),
        model(
            "an index naming a number",
            "index_number",
            "`weight_map[model.norm.weight]` is not a string",
        ),
        model(
            "an index naming a missing shard",
            "index_missing_shard",
            "model-00009-of-00009.safetensors",
        ),
        model(
            "an index naming a tensor in no shard",
            "index_extra_tensor",
            "tensor `model.frobnicator.weight` is in the index but in none of its shards",
        ),
        model(
            "an index naming a file outside the folder",
            "index_escapes",
            "dev/null",
        ),
        model("a header of 2^63 bytes", "header_2e63", SHARD1),
        model("a header that is not JSON", "header_not_json", SHARD1),
        model("a shard cut in its data", "shard_cut", SHARD2),
        model("a shard cut in its header", "shard_cut_header", SHARD2),
        model(
            "a tensor outside its shard",
            "offsets_outside",
            "offsets_outside/model-00001-of-00002.safetensors: not a valid safetensors file",
        ),
        model("offsets at the end of u64", "offsets_overflow", SHARD1),
        model("a shape whose size overflows", "shape_overflow", SHARD1),
        model("an f8 tensor", "f8", "F8_E4M3"),
        model(
            "a tensor in two shards",
            "twice",
            "appears in more than one shard",
        ),
        model("a folder without weights", "no_weights", "no_weights"),
        embed(
            "MiniLM weights that are not safetensors",
            "embed_not_weights",
        ),
        embed("MiniLM weights cut short", "embed_cut"),
    ];
    eprintln!("{} safetensors cases", check(d, cases));
}

/// `radix embed --model FOLDER hi`, failing to load the model in the folder.
pub fn embed(name: &'static str, folder: &str) -> Case {
    Case::new(
        name,
        &[&"embed", &"--model", &folder, &"hi"],
        format!("cannot load the model in {folder}"),
    )
}
