//! GGUF loading: the real SmolLM2 file against the transformers reference
//! weights, synthetic files for every supported type and value type, and
//! corrupt or truncated files.

mod common;

use std::collections::BTreeMap;

use common::{reference_dir, smollm2_gguf, write};
use half::{bf16, f16};
use radix_io::gguf::{GgmlType, GgufValue};
use radix_io::{Error, Gguf, Safetensors, WeightStore};
use radix_quant::testing::Rng;

/// Opens `bytes` as a GGUF file in a temporary folder.
fn open_bytes(bytes: &[u8]) -> (tempfile::TempDir, Result<Gguf, Error>) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "t.gguf", bytes);
    let res = Gguf::open(&path);
    (dir, res)
}

/// Checks that opening `bytes` fails with an error naming the file and containing `needle`.
fn check_err(bytes: &[u8], needle: &str) {
    let (_dir, res) = open_bytes(bytes);
    let msg = res.expect_err("corrupt GGUF opened").to_string();
    assert!(msg.contains("t.gguf") && msg.contains(needle), "{msg}");
}

// ---- a minimal GGUF writer ----

struct Writer {
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    alignment: usize,
}

impl Writer {
    fn new() -> Self {
        Writer {
            kv: Vec::new(),
            n_kv: 0,
            tensors: Vec::new(),
            alignment: 32,
        }
    }

    fn kv(&mut self, key: &str, ty: u32, value: &[u8]) {
        put_str(&mut self.kv, key);
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend(value);
        self.n_kv += 1;
    }

    /// A tensor with `ne` in GGUF order (fastest first).
    fn tensor(&mut self, name: &str, ne: &[u64], ty: u32, data: Vec<u8>) {
        self.tensors.push((name.into(), ne.to_vec(), ty, data));
    }

    fn finish(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend(self.n_kv.to_le_bytes());
        out.extend(&self.kv);
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (name, ne, ty, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend((ne.len() as u32).to_le_bytes());
            for d in ne {
                out.extend(d.to_le_bytes());
            }
            out.extend(ty.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len()).div_ceil(self.alignment) * self.alignment;
        }
        let start = out.len().div_ceil(self.alignment) * self.alignment;
        out.resize(start, 0);
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize(start + off, 0);
            out.extend(data);
        }
        out
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A small file with one tensor of each supported type and metadata of every
/// value type.
fn synthetic() -> (Vec<u8>, BTreeMap<&'static str, Vec<f32>>) {
    let mut w = Writer::new();
    w.kv("u8", 0, &[7]);
    w.kv("i8", 1, &(-7i8).to_le_bytes());
    w.kv("u16", 2, &700u16.to_le_bytes());
    w.kv("i16", 3, &(-700i16).to_le_bytes());
    w.kv("u32", 4, &70_000u32.to_le_bytes());
    w.kv("i32", 5, &(-70_000i32).to_le_bytes());
    w.kv("f32", 6, &1.5f32.to_le_bytes());
    w.kv("bool", 7, &[1]);
    let mut s = Vec::new();
    put_str(&mut s, "héllo");
    w.kv("string", 8, &s);
    w.kv("u64", 10, &(1u64 << 40).to_le_bytes());
    w.kv("i64", 11, &(-(1i64 << 40)).to_le_bytes());
    w.kv("f64", 12, &0.25f64.to_le_bytes());
    // An array of two arrays of i32.
    let mut arr = 9u32.to_le_bytes().to_vec();
    arr.extend(2u64.to_le_bytes());
    for row in [[1i32, 2], [3, 4]] {
        arr.extend(5u32.to_le_bytes());
        arr.extend(2u64.to_le_bytes());
        for x in row {
            arr.extend(x.to_le_bytes());
        }
    }
    w.kv("nested", 9, &arr);

    let mut want = BTreeMap::new();
    // F32, 3-D: ne = [4, 3, 2] is row-major [2, 3, 4].
    let v: Vec<f32> = (0..24).map(|i| i as f32 * 0.5 - 3.0).collect();
    w.tensor("f32", &[4, 3, 2], 0, f32_bytes(&v));
    want.insert("f32", v);
    let v: Vec<f32> = (0..8).map(|i| i as f32 * 0.25).collect();
    w.tensor(
        "f16",
        &[8],
        1,
        v.iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
    );
    want.insert("f16", v);
    let v: Vec<f32> = (0..8).map(|i| -(i as f32) * 2.0).collect();
    w.tensor(
        "bf16",
        &[4, 2],
        30,
        v.iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect(),
    );
    want.insert("bf16", v);
    // Q8_0: one row of 64 (two blocks).
    let (mut data, mut v) = (Vec::new(), Vec::new());
    for (b, d) in [0.5f32, -0.125].into_iter().enumerate() {
        data.extend(f16::from_f32(d).to_le_bytes());
        for j in 0..32 {
            let q = (j * 7 - 100 + b as i32) as i8;
            data.push(q as u8);
            v.push(d * f32::from(q));
        }
    }
    w.tensor("q8_0", &[64], 8, data);
    want.insert("q8_0", v);
    // Q4_0 and Q4_1: two rows of 32.
    let (mut d40, mut v40, mut d41, mut v41) =
        (Vec::new(), vec![0f32; 64], Vec::new(), vec![0f32; 64]);
    for row in 0..2 {
        let (d, m) = (0.75f32 + row as f32, -1.5f32);
        d40.extend(f16::from_f32(d).to_le_bytes());
        d41.extend(f16::from_f32(d).to_le_bytes());
        d41.extend(f16::from_f32(m).to_le_bytes());
        for j in 0..16 {
            let (lo, hi) = ((j * 5 + row) % 16, (j * 3 + 7) % 16);
            d40.push((lo | hi << 4) as u8);
            d41.push((lo | hi << 4) as u8);
            v40[row * 32 + j] = d * (lo as f32 - 8.0);
            v40[row * 32 + j + 16] = d * (hi as f32 - 8.0);
            v41[row * 32 + j] = d * lo as f32 + m;
            v41[row * 32 + j + 16] = d * hi as f32 + m;
        }
    }
    w.tensor("q4_0", &[32, 2], 2, d40);
    want.insert("q4_0", v40);
    w.tensor("q4_1", &[32, 2], 3, d41);
    want.insert("q4_1", v41);
    // Q4_K (type 12): 256 elements in one 144-byte block, all-zero scales.
    w.tensor("q4_k", &[256], 12, vec![0; 144]);
    want.insert("q4_k", vec![0.0; 256]);
    // Q2_K (type 10) is not supported: 256 elements in one 84-byte block.
    w.tensor("q2_k", &[256], 10, vec![0; 84]);
    (w.finish(), want)
}

#[test]
fn synthetic_metadata_of_every_value_type() {
    let (bytes, _) = synthetic();
    let (_dir, g) = open_bytes(&bytes);
    let g = g.unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    let m = g.metadata();
    assert_eq!(m["u8"], GgufValue::U8(7));
    assert_eq!(m["i8"], GgufValue::I8(-7));
    assert_eq!(m["u16"], GgufValue::U16(700));
    assert_eq!(m["i16"], GgufValue::I16(-700));
    assert_eq!(m["u32"], GgufValue::U32(70_000));
    assert_eq!(m["i32"].as_i64(), Some(-70_000));
    assert_eq!(m["f32"].as_f64(), Some(1.5));
    assert_eq!(m["bool"].as_bool(), Some(true));
    assert_eq!(m["string"].as_str(), Some("héllo"));
    assert_eq!(m["u64"].as_i64(), Some(1 << 40));
    assert_eq!(m["i64"], GgufValue::I64(-(1 << 40)));
    assert_eq!(m["f64"], GgufValue::F64(0.25));
    let nested = m["nested"].as_array().unwrap();
    assert_eq!(
        nested[1],
        GgufValue::Array(vec![GgufValue::I32(3), GgufValue::I32(4)])
    );
}

#[test]
fn synthetic_tensors_of_every_supported_type() {
    let (bytes, want) = synthetic();
    let (_dir, g) = open_bytes(&bytes);
    let g = g.unwrap();
    assert_eq!(g.tensor_info("f32").unwrap().dims, [2, 3, 4]);
    assert_eq!(g.tensor_info("bf16").unwrap().dims, [2, 4]);
    assert_eq!(g.tensor_info("q4_1").unwrap().ty, GgmlType::Q4_1);
    for (name, v) in &want {
        let t = g.tensor(name).unwrap().unwrap();
        assert_eq!(t.dtype(), radix_io::DType::F32, "{name}");
        assert_eq!(&t.to_f32_vec(), v, "{name}");
        assert_eq!(t.as_slice::<f32>().unwrap(), &v[..], "{name}");
    }
    // F32 data is mapped, not copied.
    assert!(g.tensor("f32").unwrap().unwrap().is_mapped());
    assert!(g.tensor("missing").unwrap().is_none());
    let msg = g.tensor("q2_k").unwrap_err().to_string();
    assert!(
        msg.contains("Q2_K") && msg.contains("`q2_k`") && msg.contains("t.gguf"),
        "{msg}"
    );
}

#[test]
fn truncated_synthetic_files_are_errors() {
    let (bytes, _) = synthetic();
    for len in 0..bytes.len() {
        let (_dir, res) = open_bytes(&bytes[..len]);
        let msg = res.expect_err("truncated GGUF opened").to_string();
        assert!(msg.contains("t.gguf"), "{msg}");
    }
}

#[test]
fn corrupt_synthetic_files_do_not_panic() {
    let (bytes, want) = synthetic();
    let mut rng = Rng(0x5eed);
    let dir = tempfile::tempdir().unwrap();
    for i in 0..400 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(b.len());
            b[at] = match rng.below(3) {
                0 => rng.next() as u8,
                1 => 0xff,
                _ => b[at] ^ 0x80,
            };
        }
        let path = write(dir.path(), &format!("c{i}.gguf"), &b);
        match Gguf::open(&path) {
            Err(e) => assert!(e.to_string().contains(&format!("c{i}.gguf")), "{e}"),
            Ok(g) => {
                // Whatever opened must read without panicking.
                for name in want.keys() {
                    let _ = g.tensor(name);
                }
            }
        }
    }
}

#[test]
fn targeted_corruptions() {
    let (bytes, _) = synthetic();
    let mut b = bytes.clone();
    b[0] = b'X';
    check_err(&b, "magic");
    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    check_err(&b, "version 1");
    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    check_err(&b, "big-endian");
    // A tensor count far beyond the file.
    let mut b = bytes.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    check_err(&b, "tensor count");
    // A key length far beyond the file.
    let mut b = bytes.clone();
    b[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
    check_err(&b, "string length");
    // Arrays nested deeper than allowed.
    let mut w = Writer::new();
    let mut arr = Vec::new();
    for _ in 0..100 {
        arr.extend(9u32.to_le_bytes());
        arr.extend(1u64.to_le_bytes());
    }
    arr.extend(0u32.to_le_bytes());
    arr.extend(0u64.to_le_bytes());
    w.kv("deep", 9, &arr);
    check_err(&w.finish(), "nested");
    // Q4_0 rows must be whole blocks.
    let mut w = Writer::new();
    w.tensor("odd", &[16], 2, vec![0; 18]);
    check_err(&w.finish(), "multiple of 32");
    // A bad alignment.
    let mut w = Writer::new();
    w.kv("general.alignment", 4, &3u32.to_le_bytes());
    check_err(&w.finish(), "general.alignment");
}

// ---- the real SmolLM2 file ----

#[test]
fn smollm2_header_metadata_and_tensor_infos() {
    let g = Gguf::open(&smollm2_gguf()).unwrap();
    assert_eq!(
        g.get("general.architecture").and_then(GgufValue::as_str),
        Some("llama")
    );
    assert_eq!(
        g.get("llama.block_count").and_then(GgufValue::as_i64),
        Some(30)
    );
    assert_eq!(
        g.get("llama.embedding_length").and_then(GgufValue::as_i64),
        Some(576)
    );
    let mut counts = BTreeMap::new();
    for t in g.tensor_infos() {
        *counts.entry(t.ty.name()).or_insert(0) += 1;
    }
    let counts: Vec<_> = counts.into_iter().collect();
    assert_eq!(
        counts,
        [
            ("F32".to_string(), 61),
            ("Q4_1".to_string(), 210),
            ("Q8_0".to_string(), 1)
        ]
    );
    assert_eq!(
        g.tensor_info("token_embd.weight").unwrap().dims,
        [49152, 576]
    );
    assert_eq!(
        g.tensor_info("blk.0.ffn_down.weight").unwrap().dims,
        [576, 1536]
    );
    assert_eq!(
        g.tensor_info("blk.0.attn_k.weight").unwrap().dims,
        [192, 576]
    );
}

/// llama.cpp stores `attn_q`/`attn_k` rows permuted for adjacent-pair RoPE;
/// transformers un-permutes them: within each head, stored row `2 b + a`
/// becomes row `a * (head_dim / 2) + b`.
fn unpermute(w: &[f32], rows: usize, cols: usize, n_heads: usize) -> Vec<f32> {
    let head_dim = rows / n_heads;
    let mut out = vec![0f32; w.len()];
    for h in 0..n_heads {
        for b in 0..head_dim / 2 {
            for a in 0..2 {
                let (src, dst) = (
                    h * head_dim + 2 * b + a,
                    h * head_dim + a * head_dim / 2 + b,
                );
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

#[test]
fn smollm2_dequantized_weights_equal_the_reference() {
    let g = Gguf::open(&smollm2_gguf()).unwrap();
    let reference =
        Safetensors::open(&reference_dir().join("smollm2/smollm2_reference.safetensors")).unwrap();
    // The model's names mapped to the file's, as a model would through a store.
    let store = WeightStore::new(vec![Box::new(g)], |name: &str| {
        name.replace("model.embed_tokens", "token_embd")
            .replace("model.norm", "output_norm")
            .replace("model.layers.", "blk.")
            .replace("input_layernorm", "attn_norm")
            .replace("self_attn.q_proj", "attn_q")
            .replace("self_attn.k_proj", "attn_k")
            .replace("mlp.down_proj", "ffn_down")
    });
    let cases: [(&str, &[i64], usize); 6] = [
        ("model.embed_tokens.weight", &[49152, 576], 0),
        ("model.layers.0.input_layernorm.weight", &[576], 0),
        ("model.layers.0.mlp.down_proj.weight", &[576, 1536], 0),
        ("model.layers.0.self_attn.q_proj.weight", &[576, 576], 9),
        ("model.layers.0.self_attn.k_proj.weight", &[192, 576], 3),
        ("model.norm.weight", &[576], 0),
    ];
    for (name, dims, heads) in cases {
        let want = reference
            .tensor(&format!("w.{name}"))
            .unwrap()
            .unwrap()
            .to_f32_vec();
        let t = store.get(name, dims).unwrap();
        let mut got = t.to_f32_vec();
        if heads > 0 {
            got = unpermute(&got, dims[0] as usize, dims[1] as usize, heads);
        }
        // The reference holds only the first rows of each matrix (for attn_q
        // and attn_k, their first head).
        got.truncate(want.len());
        // Tolerance: exact. Both sides compute `d * q (+ m)` in f32 from the same bits.
        let max = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert_eq!(max, 0.0, "{name}: max abs difference {max}");
    }
}

#[test]
fn store_errors_name_the_tensor_and_both_shapes() {
    let g = Gguf::open(&smollm2_gguf()).unwrap();
    let store = WeightStore::new(vec![Box::new(g)], |name: &str| {
        name.replace("layers.", "blk.")
    });
    let msg = store
        .get("layers.0.attn_norm.weight", &[577])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("layers.0.attn_norm.weight") && msg.contains("[576]") && msg.contains("[577]"),
        "{msg}"
    );
    let msg = store
        .get("layers.99.attn_norm.weight", &[576])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("layers.99.attn_norm.weight") && msg.contains("blk.99.attn_norm.weight"),
        "{msg}"
    );
    assert!(msg.contains("SmolLM2-135M-Instruct.Q4_1.gguf"), "{msg}");
    assert_eq!(store.sources()[0].names().len(), 272);
}

#[test]
fn smollm2_truncated_and_corrupt_files_are_errors() {
    let bytes = std::fs::read(smollm2_gguf()).unwrap();
    let header_end = {
        let g = Gguf::open(&smollm2_gguf()).unwrap();
        g.tensor_infos().iter().map(|t| t.offset).min().unwrap() as usize
    };
    let dir = tempfile::tempdir().unwrap();
    let cuts = [
        0,
        3,
        7,
        20,
        1000,
        100_000,
        1_000_000,
        2_000_000,
        bytes.len() / 2,
        bytes.len() - 1,
    ];
    for (i, len) in cuts
        .into_iter()
        .chain([header_end.saturating_sub(1)])
        .enumerate()
    {
        let path = write(dir.path(), &format!("cut{i}.gguf"), &bytes[..len]);
        let msg = Gguf::open(&path)
            .expect_err("truncated GGUF opened")
            .to_string();
        assert!(msg.contains(&format!("cut{i}.gguf")), "{msg}");
    }
    // Corrupt bytes in the metadata and tensor infos (the first 2 MB).
    let mut rng = Rng(42);
    let mut head = bytes[..2_000_000.min(bytes.len())].to_vec();
    for i in 0..40 {
        let at = 8 + rng.below(head.len() - 8);
        let old = head[at];
        head[at] = 0xff;
        let path = write(dir.path(), "corrupt.gguf", &head);
        // Either way no panic; most are errors, since the data section is gone.
        let _ = Gguf::open(&path).map(|g| g.tensor_infos().len());
        head[at] = old;
        let _ = i;
    }
}

/// An array of 17 million one-byte items (the bytes are there: 17 MB)
/// would take half a GiB parsed; the file is refused instead.
#[test]
fn too_many_items_are_refused_before_they_are_parsed() {
    let n: u64 = (1 << 24) + 1;
    let mut array = 0u32.to_le_bytes().to_vec(); // items of type u8
    array.extend(n.to_le_bytes());
    array.resize(array.len() + n as usize, 0);
    let mut w = Writer::new();
    w.kv("tokenizer.ggml.scores", 9, &array);
    let (_dir, res) = open_bytes(&w.finish());
    let Err(err) = res else {
        panic!("a file of 2^24 + 1 items is refused")
    };
    let msg = err.to_string();
    assert!(
        msg.contains("array length 16777217 takes the file past the 16777216 items"),
        "{msg}"
    );
}
