//! Serialized executables load back and give the same results.

mod common;

use common::{compile, f32_buffer, f32_values, run};
use radix_pjrt::{CompileOptions, ElementType, ExecuteOptions};

#[test]
fn serialize_then_deserialize_gives_the_same_results() {
    let client = common::cpu_client(1);
    let exe = compile(
        &client,
        r#"
func.func @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<f32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%0 init: %zero) applies stablehlo.add across dimensions = [0, 1]
      : (tensor<2x2xf32>, tensor<f32>) -> tensor<f32>
  return %0, %s : tensor<2x2xf32>, tensor<f32>
}"#,
    );
    let bytes = exe.serialize().unwrap();
    assert!(!bytes.is_empty());
    let loaded = client.deserialize_and_load(&bytes).unwrap();
    assert_eq!(loaded.num_outputs(), 2);
    assert_eq!(loaded.num_parameters(), exe.num_parameters());
    let a = f32_buffer(&client, &[1., 2., 3., 4.], &[2, 2]);
    let b = f32_buffer(&client, &[5., 6., 7., 8.], &[2, 2]);
    let fresh = run(&exe, &[&a, &b]);
    let reloaded = run(&loaded, &[&a, &b]);
    assert_eq!(f32_values(&fresh[0]), [19., 22., 43., 50.]);
    assert_eq!(f32_values(&fresh[1]), [134.]);
    for (x, y) in fresh.iter().zip(&reloaded) {
        assert_eq!(x.to_host_vec().unwrap(), y.to_host_vec().unwrap());
    }
    // FIXME(plugin): re-serializing a *deserialized* executable gives bytes
    // that load but lack compiled kernels (the CPU plugins 0.81 and 0.115 say
    // "Function dot.1_kernel not found"). Caches must store the bytes of the
    // executable they compiled. What matters here: a clean error, no abort.
    let again = client
        .deserialize_and_load(&loaded.serialize().unwrap())
        .unwrap();
    match again.execute(&[[&a, &b]], &ExecuteOptions::default()) {
        Ok(out) => assert_eq!(f32_values(&out[0][0]), [19., 22., 43., 50.]),
        Err(radix_pjrt::Error::Pjrt { code, message, .. }) => {
            assert_eq!(code, "NOT_FOUND", "{message}");
            assert!(message.contains("kernel"), "{message}");
        }
        Err(e) => panic!("unexpected error {e}"),
    }
    // The argument checks survive the round trip.
    let int = client
        .buffer_from_host(
            &[0u8; 16],
            ElementType::S32,
            &[2, 2],
            &client.addressable_devices()[0],
        )
        .unwrap();
    assert!(
        loaded
            .execute(&[[&int, &b]], &ExecuteOptions::default())
            .is_err()
    );
}

#[test]
fn spmd_executable_round_trips() {
    let client = common::cpu_client(2);
    let options = CompileOptions {
        num_partitions: 2,
        spmd: true,
        ..CompileOptions::default()
    };
    let exe = client
        .compile(
            r#"
module @m attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @main(%x: tensor<4xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) -> (tensor<4xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) {
    %0 = stablehlo.negate %x : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"#,
            &options,
        )
        .unwrap();
    let loaded = client
        .deserialize_and_load(&exe.serialize().unwrap())
        .unwrap();
    assert_eq!(loaded.num_partitions(), 2);
    assert_eq!(loaded.devices().len(), 2);
    let d = loaded.devices().to_vec();
    let x0 = client
        .buffer_from_host(&common::f32_bytes(&[1., 2.]), ElementType::F32, &[2], &d[0])
        .unwrap();
    let x1 = client
        .buffer_from_host(&common::f32_bytes(&[3., 4.]), ElementType::F32, &[2], &d[1])
        .unwrap();
    let out = loaded
        .execute(&[[&x0], [&x1]], &ExecuteOptions::default())
        .unwrap();
    assert_eq!(f32_values(&out[0][0]), [-1., -2.]);
    assert_eq!(f32_values(&out[1][0]), [-3., -4.]);
}
