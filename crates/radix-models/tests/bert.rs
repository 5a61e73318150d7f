//! all-MiniLM-L6-v2 against the PyTorch/sentence-transformers reference
//! (`tests/fixtures/reference/minilm`, made by its `make.py`).

mod common;

use radix::io::Safetensors;
use radix::nn::MatrixFormat;
use radix::testing::{Tol, assert_all_close, compare, platform};
use radix::{Buffer, DType, Shape, Tensor};
use radix_models::bert::{Bert, BertConfig, Embedder, EmbedderConfig, TokenBatch};
use radix_models::packages::minilm_dir;

/// The reference outputs: sentences, ids and masks (JSON), full arrays (safetensors).
struct Reference {
    sentences: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    attention_mask: Vec<Vec<u32>>,
    cosines: [f64; 2],
    arrays: Safetensors,
}

fn reference() -> Reference {
    let dir = common::reference_dir().join("minilm");
    let json = common::reference_json("minilm/minilm_reference.json");
    let rows = |key: &str| -> Vec<Vec<u32>> { serde_json::from_value(json[key].clone()).unwrap() };
    Reference {
        sentences: serde_json::from_value(json["sentences"].clone()).unwrap(),
        input_ids: rows("input_ids"),
        attention_mask: rows("attention_mask"),
        cosines: [
            json["cosine_0_1"].as_f64().unwrap(),
            json["cosine_0_2"].as_f64().unwrap(),
        ],
        arrays: Safetensors::open(&dir.join("minilm_reference.safetensors")).unwrap(),
    }
}

impl Reference {
    fn array(&self, name: &str) -> (Vec<i64>, Vec<f32>) {
        let t = self.arrays.tensor(name).unwrap().unwrap();
        (t.dims().to_vec(), t.to_f32_vec())
    }
}

/// radix against the PyTorch reference. The reference was made by
/// `ref_minilm.py` (PyTorch on 2 threads, on an AMD EPYC of this
/// workplace); six layers of f32 dot products over 384 and 1536 terms, in
/// another summation order than XLA's on any CPU. Embeddings are unit
/// vectors (components about 0.05), hidden states of order 1: 1e-4 absolute
/// is about 1000 units of f32 roundoff at 1, while a missing term, a wrong
/// axis or a bf16 rounding moves them by 1e-3 or more.
const TORCH: Tol = Tol {
    rel: 0.0,
    abs: 1e-4,
};

/// The same model twice on this machine, in other padding buckets: the
/// padding changes XLA's blocking of the sums over the sequence, not the
/// terms (the masked ones are zero).
const OTHER_BUCKET: Tol = Tol {
    rel: 0.0,
    abs: 1e-5,
};

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

#[test]
fn token_ids_equal_the_reference() {
    let r = reference();
    let embedder = Embedder::minilm(&platform()).unwrap();
    let seqs: Vec<Vec<u32>> = r
        .sentences
        .iter()
        .map(|s| embedder.tokenize(s).unwrap())
        .collect();
    let len = r.input_ids[0].len();
    let batch = TokenBatch::pad(&seqs, 0, seqs.len(), len).unwrap();
    let ids: Vec<u32> = batch.ids().iter().map(|&i| i as u32).collect();
    let valid: Vec<u32> = batch.valid().iter().map(|&v| v as u32).collect();
    assert_eq!(ids, r.input_ids.concat());
    assert_eq!(valid, r.attention_mask.concat());
}

#[test]
fn embeddings_and_cosines_match_the_reference() {
    let r = reference();
    let mut embedder = Embedder::minilm(&platform()).unwrap();
    let texts: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    let got = embedder.embed(&texts).unwrap();
    let (dims, want) = r.array("embeddings");
    assert_eq!(dims, [3, 384]);
    let diff = max_abs_diff(&got.concat(), &want);
    eprintln!("MiniLM embeddings: max |radix - torch| = {diff:e}");
    assert_all_close("embeddings", &got.concat(), &want, TORCH);

    // A norm sums 384 squares of about 1/384 each.
    let norms: Vec<f64> = got.iter().map(|e| dot(e, e).sqrt()).collect();
    compare(&norms, &[1.0; 3], Tol::sum(DType::F32, 384, 1.0 / 384.0)).unwrap();
    let mut worst = 0f64;
    for (j, want) in [(1, r.cosines[0]), (2, r.cosines[1])] {
        worst = worst.max((dot(&got[0], &got[j]) - want).abs());
    }
    for i in 0..3 {
        for j in 0..3 {
            let (a, b) = (&want[i * 384..][..384], &want[j * 384..][..384]);
            worst = worst.max((dot(&got[i], &got[j]) - dot(a, b)).abs());
        }
    }
    // A cosine is a sum of 384 products of about 1/384 each.
    eprintln!("MiniLM cosines: max |radix - torch| = {worst:e}");
    assert!(worst <= 1e-5, "cosine diff {worst}");

    // The same sentences one at a time (other buckets) and in another order.
    let one = embedder.embed(&[texts[1]]).unwrap();
    assert_all_close("alone", &one[0], &got[1], OTHER_BUCKET);
    let swapped = embedder.embed(&[texts[2], texts[0]]).unwrap();
    assert_all_close(
        "swapped",
        &swapped.concat(),
        &[got[2].clone(), got[0].clone()].concat(),
        OTHER_BUCKET,
    );
}

/// With every matrix a plain f32 parameter through XLA's dot
/// (`MatrixFormat::AsStored`; the default sends them to radix's CPU kernels,
/// `radix.quant_dot` and `radix.quant_rows`), the embeddings still match
/// torch's, in a batch and alone.
#[test]
fn embeddings_through_xla_dots_match_the_reference() {
    let r = reference();
    let config = EmbedderConfig {
        matrices: MatrixFormat::AsStored,
        ..EmbedderConfig::minilm()
    };
    let dir = minilm_dir().unwrap();
    let mut embedder = Embedder::new(&platform(), &dir, config).unwrap();
    let texts: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    let got = embedder.embed(&texts).unwrap();
    let (_, want) = r.array("embeddings");
    let diff = max_abs_diff(&got.concat(), &want);
    eprintln!("MiniLM embeddings through XLA's dots: max |radix - torch| = {diff:e}");
    assert_all_close("embeddings (XLA dots)", &got.concat(), &want, TORCH);
    let one = embedder.embed(&[texts[1]]).unwrap();
    assert_all_close("alone (XLA dots)", &one[0], &got[1], OTHER_BUCKET);
}

#[test]
fn hidden_states_match_the_reference() {
    let r = reference();
    let platform = platform();
    let dir = minilm_dir().unwrap();
    let cfg = BertConfig::from_file(&dir.join("config.json")).unwrap();
    let model = Bert::new(&cfg);
    let (b, s) = (r.input_ids.len() as i64, r.input_ids[0].len() as i64);
    let shape = Shape::tagged(DType::I32, &[("b", b), ("s", s)]);
    let inputs = (
        Tensor::param(shape),
        Tensor::param(shape.with_dtype(DType::F32)),
    );
    let exe = radix::compile(&platform, &model, &inputs, |m, (ids, valid)| {
        m.forward(ids, valid)
    })
    .unwrap();
    let store = radix_models::bert::weight_store(&dir.join("model.safetensors")).unwrap();
    let weights = radix::nn::load_weights(&platform, &store, &model).unwrap();

    let ids: Vec<i32> = r.input_ids.concat().iter().map(|&i| i as i32).collect();
    let valid: Vec<f32> = r
        .attention_mask
        .concat()
        .iter()
        .map(|&v| v as f32)
        .collect();
    let ids = Buffer::from_slice(&platform, &ids, shape).unwrap();
    let valid = Buffer::from_slice(&platform, &valid, shape.with_dtype(DType::F32)).unwrap();
    let out = exe.call(&weights, (ids, valid)).unwrap();
    assert_eq!(
        out.shape(),
        Shape::tagged(DType::F32, &[("b", b), ("s", s), ("d", 384)])
    );
    let got = out.to_vec::<f32>().unwrap();
    let (_, want) = r.array("last_hidden_state");
    // Padding positions attend to the valid keys as in PyTorch, so they compare too.
    let diff = max_abs_diff(&got, &want);
    eprintln!("MiniLM last_hidden_state: max |radix - torch| = {diff:e}");
    assert_all_close("last_hidden_state", &got, &want, TORCH);
}

#[test]
fn checkpoint_names_follow_bert_model() {
    let dir = minilm_dir().unwrap();
    let cfg = BertConfig::from_file(&dir.join("config.json")).unwrap();
    let names: Vec<String> = radix::module::tensors(&Bert::new(&cfg))
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    // 5 embedding tensors, then 12 per layer (the query, key and value
    // projections stacked in one weight and one bias).
    assert_eq!(names.len(), 5 + 12 * 6);
    assert_eq!(names[0], "embeddings.word_embeddings.weight");
    assert!(names.contains(&"encoder.layer.5.output.LayerNorm.bias".to_string()));
    assert!(names.contains(&"encoder.layer.0.attention.self.qkv.weight".to_string()));
    assert!(names.contains(&"encoder.layer.3.intermediate.dense.weight".to_string()));
}

#[test]
fn lengths_share_buckets_and_long_texts_are_truncated() {
    let mut embedder = Embedder::minilm(&platform()).unwrap();
    let short = [
        "Hello world",
        "A somewhat longer sentence of a dozen tokens or so.",
    ];
    let alone: Vec<Vec<f32>> = short
        .iter()
        .map(|t| embedder.embed(&[t]).unwrap().remove(0))
        .collect();
    let together = embedder.embed(&short).unwrap();
    for (a, b) in alone.iter().zip(&together) {
        assert_all_close("alone and together", a, b, OTHER_BUCKET);
    }
    assert_eq!(embedder.compiled(), [(1, 16), (2, 16)]);

    // 300 words: truncated to 256 tokens, keeping [SEP] last, as transformers does.
    let long = vec!["word"; 300].join(" ");
    let ids = embedder.tokenize(&long).unwrap();
    assert_eq!(ids.len(), 256);
    assert_eq!((ids[0], ids[255]), (101, 102));
    let cut = vec!["word"; 254].join(" ");
    assert_eq!(embedder.tokenize(&cut).unwrap(), ids);
    let e = embedder.embed(&[&long, &cut]).unwrap();
    // The same tokens in two rows of one batch.
    assert_all_close(
        "truncated",
        &e[0],
        &e[1],
        Tol {
            rel: 0.0,
            abs: 1e-6,
        },
    );
    assert_eq!(embedder.compiled(), [(1, 16), (2, 16), (2, 256)]);
}

/// A config whose sizes are zero, negative or huge is a `Config` error
/// naming the key, before anything is sized by it.
#[test]
fn crafted_configs_are_errors() {
    let text = std::fs::read_to_string(minilm_dir().unwrap().join("config.json")).unwrap();
    let real: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (key, value, want) in [
        ("hidden_size", serde_json::json!(0), "hidden_size is 0"),
        (
            "num_attention_heads",
            serde_json::json!(-12),
            "num_attention_heads is -12",
        ),
        (
            "num_hidden_layers",
            serde_json::json!(1u64 << 40),
            "num_hidden_layers is 1099511627776",
        ),
        (
            "layer_norm_eps",
            serde_json::json!(-1.0),
            "layer_norm_eps is -1",
        ),
        (
            "num_attention_heads",
            serde_json::json!(5),
            "not a multiple of num_attention_heads 5",
        ),
    ] {
        let mut cfg = real.clone();
        cfg[key] = value;
        let path = dir.path().join("config.json");
        std::fs::write(&path, cfg.to_string()).unwrap();
        let err = BertConfig::from_file(&path).expect_err(key).to_string();
        assert!(err.contains(want), "{key}: {err}");
    }
}
