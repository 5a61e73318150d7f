//! Sharding: programs partitioned over a mesh of 4 CPU devices, buffers
//! split onto the devices and gathered back, sharding constraints; each
//! partitioned by Shardy (the default) and by GSPMD, with the same results.

use std::sync::OnceLock;

use expect_test::expect;
use radix::sharding::{Mesh, Partitioner};
use radix::{
    Buffer, CacheMode, CompileConfig, DType, Error, Executable, Platform, Program, Shape, Tensor,
};
use radix_pjrt::OpenOptions;
use radix_pjrt::provision::Target;

/// A CPU client with 4 devices (no mesh yet).
fn cpu4() -> Platform {
    static PLATFORM: OnceLock<Platform> = OnceLock::new();
    PLATFORM
        .get_or_init(|| {
            Platform::open(&OpenOptions {
                cpu_devices: Some(4),
                ..OpenOptions::target(Target::Cpu)
            })
            .unwrap_or_else(|e| panic!("no 4-device CPU platform: {e}"))
        })
        .clone()
}

/// `cpu4()` partitioned over a mesh of `dims`.
fn meshed(dims: &[usize]) -> Platform {
    cpu4().with_mesh(Mesh::new(dims)).unwrap()
}

/// Both partitioners, the default first.
const PARTITIONERS: [Partitioner; 2] = [Partitioner::Shardy, Partitioner::Gspmd];

/// Compiles `program` for `platform` without the executable cache, with
/// the default partitioner.
fn build(platform: &Platform, program: Program) -> radix::Result<Executable> {
    build_with(platform, program, Partitioner::default())
}

/// [`build`] with `partitioner`.
fn build_with(
    platform: &Platform,
    program: Program,
    partitioner: Partitioner,
) -> radix::Result<Executable> {
    let mut config = CompileConfig::new(platform);
    config.cache = CacheMode::Disabled;
    config.partitioner = partitioner;
    radix::compile_program_with(platform, program, &config)
}

/// Runs `f` on `x` (values `0, 1, ..`) on `platform`, partitioned by each
/// partitioner: the result's values and shape, the same both ways.
fn run(platform: &Platform, x: Shape, f: impl FnOnce(Tensor) -> Tensor) -> (Vec<f32>, Shape) {
    let program = radix::trace_fn(&Tensor::param(x), f).unwrap();
    let values: Vec<f32> = (0..x.count()).map(|v| v as f32).collect();
    let xb = Buffer::from_slice(platform, &values, x).unwrap();
    let runs: Vec<(Vec<f32>, Shape)> = PARTITIONERS
        .iter()
        .map(|&p| {
            let exe = build_with(platform, program.clone(), p).unwrap();
            let y = exe.call(&[&xb]).unwrap();
            (y[0].to_vec::<f32>().unwrap(), y[0].shape())
        })
        .collect();
    assert_eq!(runs[0], runs[1], "Shardy's run against GSPMD's");
    runs.into_iter().next().unwrap()
}

fn rows() -> Shape {
    Shape::tagged(DType::F32, &[("b", 8), ("d", 4)])
}

#[test]
fn four_device_matmul_equals_the_unsharded_one() {
    let w: Vec<f32> = (0..12).map(|v| (v % 5) as f32 - 2.0).collect();
    let w_shape = Shape::tagged(DType::F32, &[("d", 4), ("o", 3)]);
    let matmul = |platform: &Platform, x_shape: Shape| {
        let w_param = Tensor::param(w_shape);
        let program =
            radix::trace(&w_param, &Tensor::param(x_shape), |w, x| x.dot(*w, "d")).unwrap();
        let wb = Buffer::from_slice(platform, &w, w_shape).unwrap();
        let x: Vec<f32> = (0..32).map(|v| v as f32 * 0.5).collect();
        let xb = Buffer::from_slice(platform, &x, x_shape).unwrap();
        let runs: Vec<Vec<f32>> = PARTITIONERS
            .iter()
            .map(|&p| {
                let exe = build_with(platform, program.clone(), p).unwrap();
                assert_eq!(xb.shards().len(), exe.n_partitions());
                let y = exe.call(&[&wb, &xb]).unwrap();
                y[0].to_vec::<f32>().unwrap()
            })
            .collect();
        assert_eq!(runs[0], runs[1], "Shardy's product against GSPMD's");
        runs[0].clone()
    };
    let whole = matmul(&radix::testing::platform(), rows());
    let sharded = meshed(&[4]);
    // Rows of x over 4 devices (2 each), the weights on every device.
    let x_shape = rows().shard("b", 0).unwrap();
    let xb = Buffer::from_slice(&sharded, &[0f32; 32], x_shape).unwrap();
    let shard_dims: Vec<_> = xb
        .shards()
        .iter()
        .map(|s| s.dims().unwrap().to_vec())
        .collect();
    assert_eq!(shard_dims, vec![vec![2, 4]; 4]);
    assert_eq!(matmul(&sharded, x_shape), whole);
    assert_eq!(whole.len(), 24);
}

#[test]
fn a_two_by_two_mesh_splits_both_axes() {
    let platform = meshed(&[2, 2]);
    // Axis a over mesh axis 0, b over mesh axis 1: each device holds 2x3.
    let x = Shape::tagged(DType::F32, &[("a", 4), ("b", 6)])
        .shard("a", 0)
        .and_then(|s| s.shard("b", 1))
        .unwrap();
    let want: Vec<f32> = (0..24).map(|v| v as f32 * 2.0 + 1.0).collect();
    let (got, shape) = run(&platform, x, |x| x * 2.0 + 1.0);
    assert_eq!(got, want);
    expect!["{a=4@0, b=6@1, f32}"].assert_eq(&shape.to_string());
    // A sum over b: the result is split over mesh axis 0, replicated over 1.
    let (sums, shape) = run(&platform, x, |x| x.sum("b"));
    let want: Vec<f32> = (0..4)
        .map(|r| (0..6).map(|c| (r * 6 + c) as f32).sum())
        .collect();
    assert_eq!(sums, want);
    expect!["{a=4@0, f32}"].assert_eq(&shape.to_string());
    // Uploads and downloads round-trip with the mesh axes transposed too.
    let t = Shape::tagged(DType::I32, &[("a", 4), ("b", 6)])
        .shard("a", 1)
        .and_then(|s| s.shard("b", 0))
        .unwrap();
    let values: Vec<i32> = (0..24).collect();
    let b = Buffer::from_slice(&platform, &values, t).unwrap();
    assert_eq!(b.to_vec::<i32>().unwrap(), values);
}

#[test]
fn sharded_text_has_partition_attributes() {
    let x = rows().shard("b", 0).unwrap();
    let program = radix::trace_fn(&Tensor::param(x), |x| {
        let y = (x * 2.0).shard("d", 0);
        (y.sum("d").shard("b", 0), y.replicate())
    })
    .unwrap();
    // Without a mesh the text is the unpartitioned one.
    assert!(
        !program
            .stablehlo_without_locations()
            .contains("mhlo.sharding = \"{dev")
    );
    let program = program.with_mesh(Mesh::new(&[4])).unwrap();
    expect![[r#"
        module @radix attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
          "sdy.mesh"() {mesh = #sdy.mesh<["m0"=4]>, sym_name = "mesh"} : () -> ()
          func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"m0"}, {}]>, mhlo.layout_mode = "default"}) -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"m0"}]>, mhlo.layout_mode = "default"}, tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>, mhlo.layout_mode = "default"}) {
            %0 = "stablehlo.constant"() {value = dense<"0x00000040"> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
            %1 = "stablehlo.multiply"(%arg0, %0) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
            %2 = "sdy.sharding_constraint"(%1) {sharding = #sdy.sharding<@mesh, [{}, {"m0"}]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
            %3 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
            %4 = "stablehlo.reduce"(%2, %3) ({
              ^bb0(%r4_0_a0: tensor<f32>, %r4_0_a1: tensor<f32>):
            %r4_0_0 = "stablehlo.add"(%r4_0_a0, %r4_0_a1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
            "stablehlo.return"(%r4_0_0) : (tensor<f32>) -> ()
            }) {dimensions = array<i64: 1>} : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
            %5 = "sdy.sharding_constraint"(%4) {sharding = #sdy.sharding<@mesh, [{"m0"}]>} : (tensor<8xf32>) -> tensor<8xf32>
            %6 = "sdy.sharding_constraint"(%2) {sharding = #sdy.sharding<@mesh, [{}, {}]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
            "func.return"(%5, %6) : (tensor<8xf32>, tensor<8x4xf32>) -> ()
          }
        }
    "#]]
    .assert_eq(&program.stablehlo_without_locations());
    let program = program.with_partitioner(Partitioner::Gspmd);
    expect![[r#"
        module @radix attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
          func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}", mhlo.layout_mode = "default"}) -> (tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}", mhlo.layout_mode = "default"}, tensor<8x4xf32> {mhlo.sharding = "{replicated}", mhlo.layout_mode = "default"}) {
            %0 = "stablehlo.constant"() {value = dense<"0x00000040"> : tensor<8x4xf32>} : () -> tensor<8x4xf32>
            %1 = "stablehlo.multiply"(%arg0, %0) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
            %2 = "stablehlo.custom_call"(%1) {call_target_name = "Sharding", mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
            %3 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
            %4 = "stablehlo.reduce"(%2, %3) ({
              ^bb0(%r4_0_a0: tensor<f32>, %r4_0_a1: tensor<f32>):
            %r4_0_0 = "stablehlo.add"(%r4_0_a0, %r4_0_a1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
            "stablehlo.return"(%r4_0_0) : (tensor<f32>) -> ()
            }) {dimensions = array<i64: 1>} : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
            %5 = "stablehlo.custom_call"(%4) {call_target_name = "Sharding", mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<8xf32>) -> tensor<8xf32>
            %6 = "stablehlo.custom_call"(%2) {call_target_name = "Sharding", mhlo.sharding = "{replicated}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
            "func.return"(%5, %6) : (tensor<8xf32>, tensor<8x4xf32>) -> ()
          }
        }
    "#]]
    .assert_eq(&program.stablehlo_without_locations());
}

#[test]
fn a_split_that_does_not_divide_is_an_error() {
    let platform = meshed(&[4]);
    let x = Shape::tagged(DType::F32, &[("b", 6)])
        .shard("b", 0)
        .unwrap();
    let err = Buffer::from_slice(&platform, &[0f32; 6], x).unwrap_err();
    expect!["sharding: {b=6@0, f32} on mesh [4]: axis 0 of size 6 does not split 4 ways"]
        .assert_eq(&err.to_string());
    let program = radix::trace_fn(&Tensor::param(x), |x| x + 1.0).unwrap();
    let err = build(&platform, program).err().unwrap();
    assert!(matches!(err, Error::Sharding(_)), "{err}");
    expect!["sharding: argument 0 (input): {b=6@0, f32} on mesh [4]: axis 0 of size 6 does not split 4 ways"]
        .assert_eq(&err.to_string());
    // A mesh axis the mesh lacks, and a mesh larger than the platform.
    let y = Shape::tagged(DType::F32, &[("b", 8)])
        .shard("b", 1)
        .unwrap();
    let err = Buffer::from_slice(&platform, &[0f32; 8], y).unwrap_err();
    expect!["sharding: {b=8@1, f32} on mesh [4]: no mesh axis 1 in [4]"]
        .assert_eq(&err.to_string());
    let err = cpu4().with_mesh(Mesh::new(&[4, 2])).unwrap_err();
    expect!["sharding: a mesh [4, 2] needs 8 devices, the platform has 4"]
        .assert_eq(&err.to_string());
}

#[test]
fn a_sharding_constraint_compiles_and_runs() {
    let platform = meshed(&[4]);
    // A replicated input, split by rows inside the function.
    let (got, shape) = run(&platform, rows(), |x| (x * 2.0).shard("b", 0).sum("d"));
    let want: Vec<f32> = (0..8)
        .map(|r| (0..4).map(|c| 2.0 * (r * 4 + c) as f32).sum())
        .collect();
    assert_eq!(got, want);
    expect!["{b=8@0, f32}"].assert_eq(&shape.to_string());
    // And back to whole on every device.
    let (got, _) = run(&platform, rows().shard("b", 0).unwrap(), |x| {
        x.replicate() + 1.0
    });
    assert_eq!(got, (0..32).map(|v| v as f32 + 1.0).collect::<Vec<_>>());
}

#[test]
fn a_buffer_split_another_way_is_refused() {
    let platform = meshed(&[4]);
    let x = rows().shard("b", 0).unwrap();
    let program = radix::trace_fn(&Tensor::param(x), |x| x + 1.0).unwrap();
    let exe = build(&platform, program).unwrap();
    let whole = Buffer::from_slice(&platform, &[0f32; 32], rows()).unwrap();
    let err = exe.call(&[&whole]).unwrap_err();
    expect!["sharding: argument 0 (input): expected {b=8@0, d=4, f32} on 4 devices, got {b=8, d=4, f32} on 4 devices"]
        .assert_eq(&err.to_string());
    let single = Buffer::from_slice(&radix::testing::platform(), &[0f32; 32], x).unwrap();
    assert!(matches!(exe.call(&[&single]), Err(Error::Sharding(_))));
}

#[test]
fn a_sharded_executable_loads_from_the_cache() {
    let platform = meshed(&[4]);
    let dir = tempfile::tempdir().unwrap();
    let mut config = CompileConfig::new(&platform);
    config.cache = CacheMode::Dir(dir.path().to_path_buf());
    let x = rows().shard("b", 0).unwrap();
    let values: Vec<f32> = (0..32).map(|v| v as f32).collect();
    let xb = Buffer::from_slice(&platform, &values, x).unwrap();
    let mut origins = vec![];
    for _ in 0..2 {
        let program = radix::trace_fn(&Tensor::param(x), |x| x * 3.0).unwrap();
        let exe = radix::compile_program_with(&platform, program, &config).unwrap();
        origins.push(exe.origin());
        let y = exe.call(&[&xb]).unwrap();
        let want: Vec<f32> = values.iter().map(|v| v * 3.0).collect();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
    }
    assert_eq!(origins, [radix::Origin::Compiled, radix::Origin::Cache]);
}
