//! safetensors loading: the real MiniLM file, sharded checkpoints, host array
//! views, and corrupt or truncated files.

mod common;

use std::path::Path;

use common::{minilm_dir, write};
use radix_io::DType;
use radix_io::{Error, HostTensor, Safetensors, TensorSource, WeightStore};
use radix_quant::testing::Rng;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// Serializes `(name, dtype, shape, bytes)` tensors to safetensors bytes.
fn serialize(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A small file with a few dtypes.
fn small() -> Vec<u8> {
    serialize(&[
        (
            "a",
            Dtype::F32,
            vec![2, 3],
            f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        ),
        (
            "b",
            Dtype::I64,
            vec![3],
            [7i64, -8, 9].iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        (
            "c",
            Dtype::BF16,
            vec![2],
            [half::bf16::from_f32(1.5), half::bf16::from_f32(-2.0)]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        ),
        ("d", Dtype::BOOL, vec![2], vec![1, 0]),
        ("fp8", Dtype::F8_E4M3, vec![4], vec![0x38; 4]),
    ])
}

/// Checks that opening `path` fails with an error naming `name`.
fn check_err(path: &Path, name: &str) {
    let msg = Safetensors::open(path)
        .expect_err("corrupt safetensors opened")
        .to_string();
    assert!(msg.contains(name), "{msg}");
}

#[test]
fn minilm_names_dtypes_and_shapes() {
    let st = Safetensors::open(&minilm_dir().join("model.safetensors")).unwrap();
    let names = TensorSource::names(&st);
    assert_eq!(names.len(), 104);
    let info = st.info("embeddings.word_embeddings.weight").unwrap();
    assert_eq!(
        (info.dtype.as_str(), info.dims.as_slice()),
        ("F32", &[30522, 384][..])
    );
    let t = st.tensor("embeddings.position_ids").unwrap().unwrap();
    assert_eq!((t.dtype(), t.dims()), (DType::I64, &[1, 512][..]));
    assert!(t.is_mapped());
    assert_eq!(t.as_slice::<i64>().unwrap(), (0..512).collect::<Vec<i64>>());
    let w = st
        .tensor("encoder.layer.0.attention.self.query.weight")
        .unwrap()
        .unwrap();
    assert_eq!(w.dims(), [384, 384]);
    assert_eq!(w.as_slice::<f32>().unwrap(), &w.to_f32_vec()[..]);
    assert!(
        w.as_slice::<f32>()
            .unwrap()
            .iter()
            .all(|x| x.is_finite() && x.abs() < 100.0)
    );
    assert!(st.tensor("absent").unwrap().is_none());
}

#[test]
fn host_tensor_views() {
    let dir = tempfile::tempdir().unwrap();
    let st = Safetensors::open(&write(dir.path(), "s.safetensors", &small())).unwrap();
    let a = st.tensor("a").unwrap().unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(a.n_elements(), 6);
    let msg = a.as_slice::<i32>().unwrap_err().to_string();
    assert!(msg.contains("f32") && msg.contains("i32"), "{msg}");
    let b = st.tensor("b").unwrap().unwrap();
    assert_eq!(b.to_vec::<i64>().unwrap(), [7, -8, 9]);
    assert_eq!(b.to_f32_vec(), [7.0, -8.0, 9.0]);
    assert_eq!(st.tensor("c").unwrap().unwrap().to_f32_vec(), [1.5, -2.0]);
    assert_eq!(
        st.tensor("d").unwrap().unwrap().to_vec::<bool>().unwrap(),
        [true, false]
    );
    let msg = st.tensor("fp8").unwrap_err().to_string();
    assert!(
        msg.contains("F8_E4M3") && msg.contains("`fp8`") && msg.contains("s.safetensors"),
        "{msg}"
    );
    let owned = HostTensor::from_slice(&[2], &[1u16, 2]);
    assert_eq!(
        (owned.as_slice::<u16>().unwrap(), owned.bytes()),
        (&[1u16, 2][..], &[1u8, 0, 2, 0][..])
    );
}

#[test]
fn sharded_checkpoints_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let one = serialize(&[("x", Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0]))]);
    let two = serialize(&[
        ("y", Dtype::F32, vec![1, 1], f32_bytes(&[3.0])),
        ("z", Dtype::U8, vec![3], vec![4, 5, 6]),
    ]);
    write(dir.path(), "m-00001-of-00002.safetensors", &one);
    write(dir.path(), "m-00002-of-00002.safetensors", &two);
    let index = r#"{"metadata": {"total_size": 15}, "weight_map": {
        "x": "m-00001-of-00002.safetensors", "y": "m-00002-of-00002.safetensors",
        "z": "m-00002-of-00002.safetensors"}}"#;
    let path = write(dir.path(), "m.safetensors.index.json", index.as_bytes());
    let st = Safetensors::open(&path).unwrap();
    assert_eq!(st.shard_paths().count(), 2);
    assert_eq!(TensorSource::names(&st), ["x", "y", "z"]);
    assert_eq!(st.tensor("y").unwrap().unwrap().to_f32_vec(), [3.0]);
    assert_eq!(
        st.tensor("z").unwrap().unwrap().to_vec::<u8>().unwrap(),
        [4, 5, 6]
    );

    // Through a store with a name mapping.
    let store = WeightStore::open(&[path.as_path()])
        .unwrap()
        .with_name_map(|n: &str| n.trim_start_matches("model.").to_string());
    assert_eq!(store.get("model.x", &[2]).unwrap().to_f32_vec(), [1.0, 2.0]);
    let msg = store.get("model.y", &[1]).unwrap_err().to_string();
    assert!(
        msg.contains("model.y")
            && msg.contains("[1, 1]")
            && msg.contains("[1]")
            && msg.contains("m-00002"),
        "{msg}"
    );
    assert!(matches!(
        store.get_any_shape("model.w"),
        Err(Error::MissingTensor { .. })
    ));

    // An index naming a tensor no shard has, or a missing shard.
    let bad = index.replace("\"z\":", "\"w\": \"m-00001-of-00002.safetensors\", \"z\":");
    check_err(
        &write(dir.path(), "bad.safetensors.index.json", bad.as_bytes()),
        "`w`",
    );
    let bad = index.replace("m-00002-of-00002", "m-00003-of-00002");
    check_err(
        &write(dir.path(), "bad2.safetensors.index.json", bad.as_bytes()),
        "m-00003-of-00002",
    );
    check_err(
        &write(
            dir.path(),
            "bad3.safetensors.index.json",
            b"{\"weight_map\": 3}",
        ),
        "bad3",
    );
    check_err(
        &write(dir.path(), "bad4.safetensors.index.json", b"{"),
        "bad4",
    );
}

#[test]
fn truncated_and_corrupt_files_are_errors() {
    let bytes = small();
    let dir = tempfile::tempdir().unwrap();
    for len in 0..bytes.len() {
        let path = write(dir.path(), "t.safetensors", &bytes[..len]);
        check_err(&path, "t.safetensors");
    }
    let mut rng = Rng(7);
    for i in 0..400 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(b.len());
            b[at] = if rng.below(2) == 0 {
                rng.next() as u8
            } else {
                b[at] ^ 0x20
            };
        }
        let path = write(dir.path(), &format!("c{i}.safetensors"), &b);
        if let Ok(st) = Safetensors::open(&path) {
            // Flipped data bytes leave a valid file; whatever opened must read.
            for name in TensorSource::names(&st) {
                let _ = st.tensor(&name).map(|t| t.map(|t| t.to_f32_vec()));
            }
        } else {
            check_err(&path, &format!("c{i}.safetensors"));
        }
    }
    // A header claiming a huge length.
    let mut b = bytes.clone();
    b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    check_err(
        &write(dir.path(), "huge.safetensors", &b),
        "huge.safetensors",
    );
    check_err(&dir.path().join("absent.safetensors"), "absent.safetensors");
}

#[test]
fn truncated_minilm_is_an_error() {
    let bytes = std::fs::read(minilm_dir().join("model.safetensors")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, len) in [4, 8, 100, 11_000, 11_416, 1_000_000, bytes.len() - 1]
        .into_iter()
        .enumerate()
    {
        let path = write(dir.path(), &format!("cut{i}.safetensors"), &bytes[..len]);
        check_err(&path, &format!("cut{i}.safetensors"));
    }
}
