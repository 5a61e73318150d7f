//! `radix run` against modules exported by JAX (`tests/data`, made by
//! `tests/data/make_jax_modules.py`): the outputs equal JAX's. Bad module
//! text and inputs are the bad-input suite's (`tests/bad_input`).

mod common;

use common::radix;

use std::path::{Path, PathBuf};

use radix::DType;
use radix::testing::{Tol, compare};
use radix_pjrt::ElementType;

#[allow(dead_code)]
#[path = "../src/npy.rs"]
mod npy;

use npy::Array;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Runs module `name` on its inputs (with `extra` options) and compares each
/// output with JAX's: exact for integers and booleans, within the output's
/// tolerance from [`tolerances`] for floats.
fn check(name: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.npz");
    let inputs = data(&format!("{name}_inputs.npz"));
    radix()
        .arg("run")
        .arg(data(&format!("{name}.mlir")))
        .arg("--inputs")
        .arg(&inputs)
        .arg("--output")
        .arg(&out)
        .args(extra)
        .assert()
        .success();
    let got = npy::read_npz(&out).unwrap();
    let want = npy::read_npz(&data(&format!("{name}_expected.npz"))).unwrap();
    assert_eq!(names(&got), names(&want), "{name}");
    let tols = tolerances(name);
    assert_eq!(tols.len(), want.len(), "{name}: one tolerance per output");
    for (((key, g), (_, w)), tol) in got.iter().zip(&want).zip(tols) {
        assert_close(&format!("{name} {key}"), g, w, tol);
    }
}

/// The tolerance of each output of module `name`, sized by what it
/// computes (`make_jax_modules.py`; inputs are standard normal, so terms
/// are of magnitude about 1). The expected files were made by JAX on an
/// AVX-512 machine (a Zen 5 EPYC); XLA emits other code for AVX2, which
/// sums dot products in another order.
fn tolerances(name: &str) -> Vec<Tol> {
    let f32_ops = |k| Tol::ulps(DType::F32, k);
    match name {
        // tanh(x @ w + b): 8 products and a bias per output.
        "mlp" => vec![Tol::sum(DType::F32, 9, 1.0).plus(f32_ops(4.0))],
        // softmax over 5 (exp, a sum of 5, a division), and a sum of 5.
        "softmax" => vec![
            Tol::sum(DType::F32, 5, 1.0).plus(f32_ops(8.0)),
            Tol::sum(DType::F32, 5, 1.0),
        ],
        "ints" => vec![Tol::EXACT; 4],
        // 6 steps of h = tanh(h * 0.5 + x), which shrinks earlier errors,
        // and the sum of h's 4 elements per step.
        "scan" => vec![
            f32_ops(16.0),
            Tol::sum(DType::F32, 4, 1.0).plus(f32_ops(16.0)),
        ],
        // x * 2 + n in f64; n + 1; an f16 times 2 in f32: one rounding each.
        "wide" => vec![Tol::ulps(DType::F64, 1.0), Tol::EXACT, f32_ops(1.0)],
        // x * y + 1 rounded to bf16 (once, or twice where the product is
        // rounded first), and x * y to bf16 then f32.
        "bf16" => vec![Tol::ulps(DType::BF16, 2.0), Tol::ulps(DType::BF16, 1.0)],
        // tanh(x @ w) over 4 products, and the sum of its 48 elements.
        "sharded_gspmd" | "sharded_shardy" => vec![
            Tol::sum(DType::F32, 4, 1.0).plus(f32_ops(4.0)),
            Tol::sum(DType::F32, 48, 1.0).plus(f32_ops(4.0)),
        ],
        // x * 2 + 1.
        "sharded2d_gspmd" | "sharded2d_shardy" => vec![f32_ops(1.0)],
        _ => panic!("no tolerances for module {name}"),
    }
}

fn names(arrays: &[(String, Array)]) -> Vec<&str> {
    arrays.iter().map(|(n, _)| n.as_str()).collect()
}

/// The values of a float array as f64s; `None` for other types.
fn floats(a: &Array) -> Option<Vec<f64>> {
    let d = a.data();
    Some(match a.ty() {
        ElementType::F32 => d
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()).into())
            .collect(),
        ElementType::F64 => d
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        ElementType::F16 => d
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        ElementType::BF16 => d
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
        _ => return None,
    })
}

fn assert_close(what: &str, got: &Array, want: &Array, tol: Tol) {
    assert_eq!((got.ty(), got.dims()), (want.ty(), want.dims()), "{what}");
    match (floats(got), floats(want)) {
        (Some(g), Some(w)) => {
            if let Err(msg) = compare(&g, &w, tol) {
                panic!("{what}: {msg}");
            }
        }
        _ => assert_eq!(got.data(), want.data(), "{what}"),
    }
}

#[test]
fn jax_modules() {
    for name in ["mlp", "softmax", "ints", "scan", "wide", "bf16"] {
        check(name, &[]);
    }
}

#[test]
fn jax_sharded_gspmd() {
    check("sharded_gspmd", &["--partitions", "4"]);
    check("sharded2d_gspmd", &["--partitions", "4"]);
}

#[test]
fn jax_sharded_shardy() {
    check("sharded_shardy", &["--partitions", "4"]);
    check("sharded2d_shardy", &["--partitions", "4"]);
}

#[test]
fn sharded_partitions_default_to_the_module() {
    // `mhlo.num_partitions = 4` in the module; the CPU client gets 4 devices.
    check("sharded2d_shardy", &["--devices", "4"]);
    check("sharded_gspmd", &[]);
}

#[test]
fn npy_inputs_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = npy::read_npz(&data("mlp_inputs.npz")).unwrap();
    let mut cmd = radix();
    cmd.arg("run").arg(data("mlp.mlir"));
    for (name, a) in &inputs {
        let path = dir.path().join(format!("{name}.npy"));
        std::fs::write(&path, npy::npy_bytes(a).unwrap()).unwrap();
        cmd.arg(path);
    }
    let out = cmd
        .arg("--json")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let out0 = &json["outputs"][0];
    assert_eq!(out0["name"], "out0");
    assert_eq!(out0["dtype"], "f32");
    assert_eq!(out0["shape"], serde_json::json!([4, 16]));
    let got: Vec<f32> = out0["data"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    let bytes: Vec<u8> = got.iter().flat_map(|v| v.to_le_bytes()).collect();
    let got = Array::new(ElementType::F32, vec![4, 16], bytes).unwrap();
    let want = npy::read_npz(&data("mlp_expected.npz")).unwrap();
    assert_close("mlp --json", &got, &want[0].1, tolerances("mlp")[0]);
}

#[test]
fn summary_without_output() {
    let out = radix()
        .arg("run")
        .arg(data("softmax.mlir"))
        .arg("--inputs")
        .arg(data("softmax_inputs.npz"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("out0: tensor<3x5xf32> [0.04798"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("out1: tensor<3xf32> [-2.82445"),
        "{text}"
    );
}
