//! Module text given to `radix run`: unreadable, not MLIR, types and
//! shardings radix cannot read, partition and device counts no machine has
//! (refused before anything is allocated by them), signatures the inputs do
//! not fit, and outputs an `.npz` cannot hold. Every run has an existing
//! `--output` file, which must stay as it was.

use crate::{Case, check, data, write};

/// A module of one `tensor<3x5xf32>` argument returned as is, with `attrs`
/// on the module, `arg` as the argument's type and attributes.
fn module(attrs: &str, arg: &str) -> String {
    format!(
        "module @m attributes {{{attrs}}} {{\n  func.func public @main(%a: {arg}) -> tensor<3x5xf32> {{\n    \
         return %a : tensor<3x5xf32>\n  }}\n}}\n"
    )
}

#[test]
fn module_text() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let softmax = std::fs::read_to_string(data("softmax.mlir")).unwrap();
    write(d, "softmax.mlir", &softmax);
    write(
        d,
        "in.npz",
        std::fs::read(data("softmax_inputs.npz")).unwrap(),
    );
    write(d, "out.npz", "the user's own results");
    let m = |name: &str, text: &str| {
        write(d, name, text);
    };
    m("empty.mlir", "");
    write(d, "binary.mlir", [0xff, 0xfe, 0x00, 0x01, 0x80]);
    m("garbage.mlir", "this is not MLIR {{{");
    m(
        "unknown_op.mlir",
        "module {\n  func.func @main(%a: tensor<3x5xf32>) -> tensor<3x5xf32> {\n    \
         %0 = stablehlo.frobnicate %a : tensor<3x5xf32>\n    return %0 : tensor<3x5xf32>\n  }\n}\n",
    );
    m("tensorx.mlir", &module("", "tensorx<3x5xf32>"));
    m("dynamic.mlir", &module("", "tensor<?x5xf32>"));
    m(
        "huge_dims.mlir",
        &module("", "tensor<100000000000x100000000000xf32>"),
    );
    m("negative_dim.mlir", &module("", "tensor<-3x5xf32>"));
    m(
        "unbalanced.mlir",
        "module {\n  func.func @main(%a: tensor<3x5xf32> -> tensor<3x5xf32> {\n",
    );
    m(
        "untyped.mlir",
        "module {\n  func.func @main(%a) -> tensor<3x5xf32> {\n    return %a : tensor<3x5xf32>\n  }\n}\n",
    );
    m(
        "no_braces.mlir",
        &module(
            "mhlo.num_partitions = 2 : i32",
            "tensor<3x5xf32> {sdy.sharding = #sdy.sharding<@mesh, [x, y]>}",
        )
        .replace(
            "{\n  func.func",
            "{\n  sdy.mesh @mesh = <[\"x\"=2]>\n  func.func",
        ),
    );
    for (n, name) in [("0", "parts_0.mlir"), ("100000000000", "parts_1e11.mlir")] {
        let text = softmax.replace(
            "mhlo.num_partitions = 1 : i32",
            &format!("mhlo.num_partitions = {n} : i32"),
        );
        assert_ne!(text, softmax);
        m(name, &text);
    }
    m(
        "iota_1e11.mlir",
        &module(
            "mhlo.num_partitions = 4 : i32",
            "tensor<3x5xf32> {mhlo.sharding = \"{devices=[2,2]<=[100000000000]}\"}",
        ),
    );
    m(
        "tile_overflow.mlir",
        &module(
            "mhlo.num_partitions = 4 : i32",
            "tensor<3x5xf32> {mhlo.sharding = \"{devices=[4294967296,4294967296]<=[4]}\"}",
        ),
    );
    let shardy = |mesh: &str| {
        module(
            "mhlo.num_partitions = 2 : i32",
            "tensor<3x5xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}, {}]>}",
        )
        .replace(
            "{\n  func.func",
            &format!("{{\n  sdy.mesh @mesh = {mesh}\n  func.func"),
        )
    };
    // Cutting the text after `mesh` inside a character of several bytes
    // panicked (found by the mlir fuzz target).
    m(
        "mesh_multibyte.mlir",
        &module(
            "mhlo.num_partitions = 2 : i32",
            "tensor<3x5xf32> {sdy.sharding = #sdy.sharding<mesh\u{e9}[\"x\"=2]>, [{\"x\"}, {}]>}",
        ),
    );
    m("mesh_2e40.mlir", &shardy("<[\"x\"=1099511627776]>"));
    m("mesh_negative.mlir", &shardy("<[\"x\"=-2, \"y\"=-1]>"));
    m(
        "mesh_overflow.mlir",
        &shardy("<[\"x\"=4611686018427387905, \"y\"=4]>"),
    );
    m("mesh_zero.mlir", &shardy("<[\"x\"=0]>"));
    m("mesh_ids.mlir", &shardy("<[\"x\"=2], device_ids=[0, 7]>"));
    m(
        "uneven.mlir",
        "module @m attributes {mhlo.num_partitions = 4 : i32} {\n  func.func public @main(\
         %arg0: tensor<6x4xf32> {mhlo.sharding = \"{devices=[4,1]<=[4]}\"}) -> tensor<6x4xf32> {\n    \
         return %arg0 : tensor<6x4xf32>\n  }\n}\n",
    );
    m(
        "f8_output.mlir",
        "module {\n  func.func @main(%a: tensor<3x5xf32>) -> tensor<3x5xf8E4M3FN> {\n    \
         %0 = stablehlo.convert %a : (tensor<3x5xf32>) -> tensor<3x5xf8E4M3FN>\n    \
         return %0 : tensor<3x5xf8E4M3FN>\n  }\n}\n",
    );
    m(
        "generic_sharded.mlir",
        "\"builtin.module\"() ({\n  \"func.func\"() <{sym_name = \"main\"}> ({\n  }) : () -> ()\n}) \
         {mhlo.num_partitions = 2 : i32} : () -> ()\n",
    );
    write(d, "six.npz", six_by_four());
    write(
        d,
        "sharded_shardy.mlir",
        std::fs::read(data("sharded_shardy.mlir")).unwrap(),
    );
    write(
        d,
        "sharded_in.npz",
        std::fs::read(data("sharded_shardy_inputs.npz")).unwrap(),
    );
    write(d, "mlp.mlir", std::fs::read(data("mlp.mlir")).unwrap());

    let run =
        |name: &'static str, module: &str, want: &str| run_case(name, module, "in.npz", &[], want);
    let cases = vec![
        run(
            "a missing module",
            "nope.mlir",
            "cannot read module nope.mlir",
        ),
        run(
            "an empty module",
            "empty.mlir",
            "this is not a StableHLO module",
        ),
        run(
            "a module not UTF-8",
            "binary.mlir",
            "cannot read module binary.mlir",
        ),
        run("not MLIR", "garbage.mlir", "this is not a StableHLO module"),
        run(
            "an unknown op",
            "unknown_op.mlir",
            "cannot compile unknown_op.mlir",
        ),
        run(
            "an unknown type",
            "tensorx.mlir",
            "unsupported type tensorx<3x5xf32>",
        ),
        run(
            "a dynamic shape",
            "dynamic.mlir",
            "dynamic shape tensor<?x5xf32> is not supported",
        ),
        run(
            "dims whose product overflows",
            "huge_dims.mlir",
            "argument 0 of @main: type tensor<100000000000x100000000000xf32>: invalid argument: shape [100000000000, 100000000000] overflows the address space",
        ),
        run(
            "a negative dim",
            "negative_dim.mlir",
            "argument 0 of @main: type tensor<-3x5xf32>: invalid argument: negative dimension in [-3, 5]",
        ),
        run(
            "unbalanced brackets",
            "unbalanced.mlir",
            "unbalanced brackets in @main's arguments",
        ),
        run(
            "an argument without a type",
            "untyped.mlir",
            "an argument without a type",
        ),
        run(
            "a Shardy sharding without braces",
            "no_braces.mlir",
            "dimension sharding x is not a {axes} group",
        ),
        run(
            "zero partitions",
            "parts_0.mlir",
            "mhlo.num_partitions is 0",
        ),
        run(
            "1e11 partitions",
            "parts_1e11.mlir",
            "100000000000 partitions: radix runs at most 4096",
        ),
        run(
            "an iota over 1e11 devices",
            "iota_1e11.mlir",
            "an iota of shape [100000000000] for 4 devices",
        ),
        run(
            "a tile count that overflows",
            "tile_overflow.mlir",
            "bad tile shape",
        ),
        run(
            "a mesh of 2^40 devices",
            "mesh_2e40.mlir",
            "a mesh of [1099511627776] devices: radix runs at most 4096",
        ),
        run(
            "a character of several bytes after `mesh`",
            "mesh_multibyte.mlir",
            "unbalanced mesh",
        ),
        run(
            "a mesh of negative sizes",
            "mesh_negative.mlir",
            "mesh axis x has size -2",
        ),
        run(
            "a mesh whose size overflows",
            "mesh_overflow.mlir",
            "a mesh of [4611686018427387905, 4] devices: radix runs at most 4096",
        ),
        run(
            "a mesh of size 0",
            "mesh_zero.mlir",
            "mesh axis x has size 0",
        ),
        run(
            "a mesh device id out of range",
            "mesh_ids.mlir",
            "device 7 is out of range for 2 partitions",
        ),
        run_case(
            "a sharded axis that does not divide",
            "uneven.mlir",
            "six.npz",
            &["--partitions", "4"],
            "axis 0 of tensor<6x4xf32> is split 4 ways, which does not divide 6",
        ),
        run_case(
            "a mesh of 4 for 2 partitions",
            "sharded_shardy.mlir",
            "sharded_in.npz",
            &["--partitions", "2"],
            "the mesh has 4 devices, the run has 2 partitions",
        ),
        run_case(
            "zero --partitions",
            "softmax.mlir",
            "in.npz",
            &["--partitions", "0"],
            "--partitions must be at least 1",
        ),
        run(
            "too few inputs",
            "mlp.mlir",
            "@main takes 3 arguments, 1 inputs given",
        ),
        run("an f8 output", "f8_output.mlir", "f8E4M3FN"),
        run(
            "a sharded module in generic form",
            "generic_sharded.mlir",
            "cannot read the @main signature of generic_sharded.mlir, which a sharded run needs",
        ),
        Case::new(
            "--output in a missing folder",
            &[
                &"run",
                &"softmax.mlir",
                &"--inputs",
                &"in.npz",
                &"--output",
                &"nodir/out.npz",
            ],
            "nodir",
        ),
    ];
    eprintln!("{} module cases", check(d, cases));
}

/// `radix run MODULE --inputs INPUTS --output out.npz EXTRA`.
pub fn run_case(
    name: &'static str,
    module: &str,
    inputs: &str,
    extra: &[&str],
    want: &str,
) -> Case {
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![
        &"run",
        &module,
        &"--inputs",
        &inputs,
        &"--output",
        &"out.npz",
    ];
    for e in extra {
        args.push(e);
    }
    Case::new(name, &args, want)
}

/// An `.npz` of one zero `f32[6, 4]`.
fn six_by_four() -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("six.npz");
    let a = crate::npy::Array::new(radix_pjrt::ElementType::F32, vec![6, 4], vec![0; 96]).unwrap();
    crate::npy::write_npz(&path, &[("arr_0".to_string(), a)]).unwrap();
    std::fs::read(path).unwrap()
}
