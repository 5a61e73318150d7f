//! Model configurations: a decoder's `config.json` (the tiny Qwen3 folder,
//! `radix generate`) and a BERT folder's `config.json`, `modules.json` and
//! `1_Pooling/config.json` (MiniLM, `radix embed`) that are not JSON, name
//! an architecture or module radix does not run, or hold sizes that cannot
//! describe the weights beside them (zero, negative, a billion layers).

use std::path::Path;

use serde_json::{Value, json};

use crate::gguf::generate;
use crate::safetensors::embed;
use crate::{Case, check, copy_dir, minilm, tiny, write};

/// `folder/file` (JSON) changed by `change`.
fn with_json(folder: &Path, file: &str, change: impl FnOnce(&mut Value)) {
    let path = folder.join(file);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn model_configs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let qwen3 = |name: &str, change: &dyn Fn(&mut Value)| {
        let f = copy_dir(&tiny("qwen3"), &d.join(name));
        with_json(&f, "config.json", change);
    };
    let decoder_cases: [(&'static str, &str, Value, &str); 11] = [
        ("an unknown model_type", "model_type", json!("rwkv"), "rwkv"),
        ("zero width", "hidden_size", json!(0), "hidden_size"),
        ("a negative width", "hidden_size", json!(-32), "hidden_size"),
        (
            "zero heads",
            "num_attention_heads",
            json!(0),
            "num_attention_heads",
        ),
        (
            "zero key-value heads",
            "num_key_value_heads",
            json!(0),
            "num_key_value_heads",
        ),
        (
            "a billion layers",
            "num_hidden_layers",
            json!(1_000_000_000),
            "num_hidden_layers",
        ),
        ("a head_dim of 0", "head_dim", json!(0), "head_dim"),
        (
            "a width that does not fit the weights",
            "hidden_size",
            json!(64),
            "model.embed_tokens.weight",
        ),
        (
            "a vocabulary that does not fit the weights",
            "vocab_size",
            json!(1u64 << 40),
            "vocab_size",
        ),
        (
            "a context of 0",
            "max_position_embeddings",
            json!(0),
            "max_position_embeddings",
        ),
        (
            "a string for a size",
            "intermediate_size",
            json!("big"),
            "intermediate_size",
        ),
    ];
    for (i, (_, key, value, _)) in decoder_cases.iter().enumerate() {
        qwen3(&format!("qwen3_{i}"), &|c| c[key] = value.clone());
    }
    let f = copy_dir(&tiny("qwen3"), &d.join("qwen3_not_json"));
    write(&f, "config.json", "{\"model_type\": \"qwen3\",");

    let bert = |name: &str, file: &str, change: &dyn Fn(&mut Value)| {
        let f = minilm(d, name);
        with_json(&f, file, change);
    };
    bert("bert_width", "config.json", &|c| {
        c["hidden_size"] = json!(0)
    });
    bert("bert_heads", "config.json", &|c| {
        c["num_attention_heads"] = json!(0)
    });
    bert("bert_heads_5", "config.json", &|c| {
        c["num_attention_heads"] = json!(5)
    });
    bert("bert_layers", "config.json", &|c| {
        c["num_hidden_layers"] = json!(1_000_000_000)
    });
    bert("bert_positions", "config.json", &|c| {
        c["max_position_embeddings"] = json!(-1)
    });
    let f = minilm(d, "bert_not_json");
    write(&f, "config.json", "[");
    let f = minilm(d, "modules_not_json");
    write(&f, "modules.json", "{");
    bert("modules_dense", "modules.json", &|m| {
        m.as_array_mut().unwrap().push(json!({
            "idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"
        }))
    });
    bert("pooling_unknown", "1_Pooling/config.json", &|p| {
        p["pooling_mode_weightedmean_tokens"] = json!(true)
    });
    bert("pooling_two", "1_Pooling/config.json", &|p| {
        p["pooling_mode_cls_token"] = json!(true)
    });
    write(d, "config_only/config.json", "{}");
    let f = minilm(d, "pooling_not_json");
    write(&f, "1_Pooling/config.json", "pooling");

    let mut cases: Vec<_> = decoder_cases
        .iter()
        .enumerate()
        .map(|(i, (name, _, _, want))| generate(name, &format!("qwen3_{i}"), want))
        .collect();
    cases.push(generate(
        "a config.json that is not JSON",
        "qwen3_not_json",
        "qwen3_not_json/config.json",
    ));
    cases.push(Case::new(
        "a folder with only config.json",
        &[&"embed", &"--model", &"config_only", &"hi"],
        "config_only is not a model folder: it has no model.safetensors, tokenizer.json",
    ));
    for (name, folder) in [
        ("a BERT width of 0", "bert_width"),
        ("zero BERT heads", "bert_heads"),
        ("BERT heads that do not divide the width", "bert_heads_5"),
        ("a billion BERT layers", "bert_layers"),
        ("negative BERT positions", "bert_positions"),
        ("a BERT config.json that is not JSON", "bert_not_json"),
        ("a modules.json that is not JSON", "modules_not_json"),
        ("a Dense module", "modules_dense"),
        ("an unknown pooling mode", "pooling_unknown"),
        ("two pooling modes", "pooling_two"),
        ("a pooling config that is not JSON", "pooling_not_json"),
    ] {
        cases.push(embed(name, folder));
    }
    eprintln!("{} config cases", check(d, cases));
}
