//! `radix run` against modules exported by JAX (`tests/data`, made by
//! `tests/data/make_jax_modules.py`): the outputs equal JAX's, and bad input
//! gives one error line and a failing exit, never a panic.

mod common;

use common::{fails_with_one_error, radix, radix_process};

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

/// Runs `radix run ARGS` and checks that it fails with exactly one error line,
/// the last on stderr, containing `want`, and no panic.
fn fails(args: &[&std::ffi::OsStr], want: &str) {
    fails_with_one_error(radix_process().arg("run").args(args), want);
}

/// Writes `arrays` as an `.npz` in `dir`.
fn npz(dir: &Path, arrays: Vec<Array>) -> PathBuf {
    let path = dir.join("in.npz");
    let named: Vec<_> = arrays
        .into_iter()
        .enumerate()
        .map(|(i, a)| (format!("arr_{i}"), a))
        .collect();
    npy::write_npz(&path, &named).unwrap();
    path
}

fn zeros(ty: ElementType, dims: &[i64]) -> Array {
    let n = radix_pjrt::byte_len(ty, dims).unwrap();
    Array::new(ty, dims.to_vec(), vec![0; n]).unwrap()
}

#[test]
fn bad_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let module = data("softmax.mlir");
    let inputs = data("softmax_inputs.npz");

    let nope = d.join("nope.mlir");
    fails(&[nope.as_ref()], "cannot read module");
    let missing = d.join("nope.npz");
    fails(
        &[module.as_ref(), "--inputs".as_ref(), missing.as_ref()],
        "cannot read",
    );

    let garbage = d.join("garbage.mlir");
    std::fs::write(&garbage, "this is not MLIR {{{").unwrap();
    fails(
        &[garbage.as_ref(), "--inputs".as_ref(), inputs.as_ref()],
        "not a StableHLO module",
    );
    let unknown_op = d.join("unknown_op.mlir");
    std::fs::write(
        &unknown_op,
        "module {\n  func.func @main(%a: tensor<3x5xf32>) -> tensor<3x5xf32> {\n    \
         %0 = stablehlo.frobnicate %a : tensor<3x5xf32>\n    return %0 : tensor<3x5xf32>\n  }\n}\n",
    )
    .unwrap();
    fails(
        &[unknown_op.as_ref(), "--inputs".as_ref(), inputs.as_ref()],
        "cannot compile",
    );

    let tensorx = d.join("tensorx.mlir");
    std::fs::write(
        &tensorx,
        "module {\n  func.func @main(%a: tensorx<3x5xf32>) -> tensor<3x5xf32> {\n    \
         return %a : tensor<3x5xf32>\n  }\n}\n",
    )
    .unwrap();
    fails(
        &[tensorx.as_ref(), "--inputs".as_ref(), inputs.as_ref()],
        "unsupported type tensorx<3x5xf32>",
    );

    let no_braces = d.join("no_braces.mlir");
    std::fs::write(
        &no_braces,
        "module @m attributes {mhlo.num_partitions = 2 : i32} {\n  sdy.mesh @mesh = <[\"x\"=2]>\n  \
         func.func @main(%a: tensor<3x5xf32> {sdy.sharding = #sdy.sharding<@mesh, [x, y]>}) \
         -> tensor<3x5xf32> {\n    return %a : tensor<3x5xf32>\n  }\n}\n",
    )
    .unwrap();
    fails(
        &[no_braces.as_ref(), "--inputs".as_ref(), inputs.as_ref()],
        "dimension sharding x is not a {axes} group",
    );

    // Partition counts no machine has are refused before any client.
    let softmax = std::fs::read_to_string(&module).unwrap();
    for (n, want) in [
        ("0", "mhlo.num_partitions is 0"),
        (
            "100000000000",
            "100000000000 partitions: radix runs at most",
        ),
    ] {
        let path = d.join(format!("parts_{n}.mlir"));
        let text = softmax.replace(
            "mhlo.num_partitions = 1 : i32",
            &format!("mhlo.num_partitions = {n} : i32"),
        );
        assert_ne!(text, softmax);
        std::fs::write(&path, text).unwrap();
        fails(&[path.as_ref(), "--inputs".as_ref(), inputs.as_ref()], want);
    }

    let not_npz = data("softmax.mlir");
    fails(
        &[module.as_ref(), "--inputs".as_ref(), not_npz.as_ref()],
        "not a .npz",
    );

    let mlp = data("mlp.mlir");
    fails(
        &[mlp.as_ref(), "--inputs".as_ref(), inputs.as_ref()],
        "@main takes 3 arguments, 1 inputs given",
    );

    let wrong_dtype = npz(d, vec![zeros(ElementType::S32, &[3, 5])]);
    fails(
        &[module.as_ref(), "--inputs".as_ref(), wrong_dtype.as_ref()],
        "argument 0 of @main is tensor<3x5xf32>, input arr_0 of",
    );
    let wrong_shape = npz(d, vec![zeros(ElementType::F32, &[3, 4])]);
    fails(
        &[module.as_ref(), "--inputs".as_ref(), wrong_shape.as_ref()],
        "is tensor<3x4xf32>",
    );

    // A sharded axis of 6 rows cannot be split 4 ways.
    let uneven = d.join("uneven.mlir");
    std::fs::write(
        &uneven,
        "module @m attributes {mhlo.num_partitions = 4 : i32} {\n  func.func public @main(\
         %arg0: tensor<6x4xf32> {mhlo.sharding = \"{devices=[4,1]<=[4]}\"}) -> tensor<6x4xf32> {\n    \
         return %arg0 : tensor<6x4xf32>\n  }\n}\n",
    )
    .unwrap();
    let six = npz(d, vec![zeros(ElementType::F32, &[6, 4])]);
    fails(
        &[
            uneven.as_ref(),
            "--inputs".as_ref(),
            six.as_ref(),
            "--partitions".as_ref(),
            "4".as_ref(),
        ],
        "axis 0 of tensor<6x4xf32> is split 4 ways, which does not divide 6",
    );
    let sharded = data("sharded_shardy.mlir");
    let sharded_inputs = data("sharded_shardy_inputs.npz");
    fails(
        &[
            sharded.as_ref(),
            "--inputs".as_ref(),
            sharded_inputs.as_ref(),
            "--partitions".as_ref(),
            "2".as_ref(),
        ],
        "the mesh has 4 devices, the run has 2 partitions",
    );
}

/// An output `.npz` cannot hold (f8) fails the run and leaves an existing
/// `--output` file as it was.
#[test]
fn a_failed_output_keeps_the_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("f8.mlir");
    std::fs::write(
        &module,
        "module {\n  func.func @main(%a: tensor<3x5xf32>) -> tensor<3x5xf8E4M3FN> {\n    \
         %0 = stablehlo.convert %a : (tensor<3x5xf32>) -> tensor<3x5xf8E4M3FN>\n    \
         return %0 : tensor<3x5xf8E4M3FN>\n  }\n}\n",
    )
    .unwrap();
    let out = dir.path().join("precious.npz");
    std::fs::write(&out, b"the user's own file").unwrap();
    let inputs = data("softmax_inputs.npz");
    fails(
        &[
            module.as_ref(),
            "--inputs".as_ref(),
            inputs.as_ref(),
            "--output".as_ref(),
            out.as_ref(),
        ],
        "",
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"the user's own file");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 2, "no temporary file is left behind");
}

/// A small `.npz` whose one array inflates to 64 MiB of zeros: for a module
/// whose arguments are a few bytes it is refused before it is read whole,
/// with one error line naming the array.
#[test]
fn a_zip_bomb_is_refused_before_it_is_read() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bomb.npz");
    let n: usize = 16 << 20;
    let header = npy::npy_bytes(&zeros(ElementType::F32, &[0])).unwrap();
    // The header of an empty array, its shape patched to `n` elements.
    let header = String::from_utf8_lossy(&header).replace("(0,)", &format!("({n},)"));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    zip.start_file("arr_0.npy", options).unwrap();
    zip.write_all(header.as_bytes()).unwrap();
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..n * 4 / chunk.len() {
        zip.write_all(&chunk).unwrap();
    }
    zip.finish().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size < 1 << 20, "{size} bytes");
    let module = data("softmax.mlir");
    fails(
        &[module.as_ref(), "--inputs".as_ref(), path.as_ref()],
        "more than any argument takes",
    );
}
