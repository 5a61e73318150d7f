//! A 4-partition SPMD program over 4 CPU devices.

mod common;

use common::{f32_bytes, f32_values};
use radix_pjrt::{Buffer, CompileOptions, ElementType, ExecuteOptions};

const SHARDED: &str = r#"
module @sharded attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @main(%x: tensor<8x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}", mhlo.layout_mode = "default"},
                  %y: tensor<8x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}", mhlo.layout_mode = "default"})
      -> (tensor<8x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}", mhlo.layout_mode = "default"},
          tensor<2xf32> {mhlo.sharding = "{replicated}", mhlo.layout_mode = "default"}) {
    %p = stablehlo.multiply %x, %y : tensor<8x2xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0]
        : (tensor<8x2xf32>, tensor<f32>) -> tensor<2xf32>
    return %p, %s : tensor<8x2xf32>, tensor<2xf32>
  }
}"#;

#[test]
fn four_partitions_give_the_right_shards() {
    let client = common::cpu_client(4);
    let devices = client.addressable_devices();
    assert_eq!(devices.len(), 4);
    let options = CompileOptions {
        num_partitions: 4,
        spmd: true,
        device_assignment: Some(devices.iter().map(|d| d.id() as i64).collect()),
        ..CompileOptions::default()
    };
    let exe = client.compile(SHARDED, &options).unwrap();
    assert_eq!(exe.num_partitions(), 4);
    assert_eq!(exe.num_outputs(), 2);
    assert_eq!(exe.devices(), devices);
    assert_eq!(exe.num_parameters(), Some(2));

    // x = 0..16 as 8x2, y = all 2s; device i holds rows 2i and 2i+1.
    let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let shard = |values: &[f32], i: usize| -> Buffer {
        let rows = &values[i * 4..(i + 1) * 4];
        client
            .buffer_from_host(&f32_bytes(rows), ElementType::F32, &[2, 2], &devices[i])
            .unwrap()
    };
    let xs: Vec<Buffer> = (0..4).map(|i| shard(&x, i)).collect();
    let ys: Vec<Buffer> = (0..4).map(|i| shard(&[2.0; 16], i)).collect();
    let args: Vec<Vec<&Buffer>> = (0..4).map(|i| vec![&xs[i], &ys[i]]).collect();
    let out = exe.execute(&args, &ExecuteOptions::default()).unwrap();
    assert_eq!(out.len(), 4);
    let column_sums = [
        (0..8).map(|r| 2 * r).sum::<i32>() as f32,
        (0..8).map(|r| 2 * r + 1).sum::<i32>() as f32,
    ];
    for (i, outputs) in out.iter().enumerate() {
        assert_eq!(outputs[0].dims().unwrap(), &[2, 2]);
        assert_eq!(outputs[0].device().unwrap(), &devices[i]);
        let expected: Vec<f32> = x[i * 4..(i + 1) * 4].iter().map(|v| v * 2.0).collect();
        assert_eq!(f32_values(&outputs[0]), expected, "shard {i}");
        assert_eq!(
            f32_values(&outputs[1]),
            column_sums,
            "replicated sum on device {i}"
        );
    }

    // A shard of the wrong shape is caught before the plugin.
    let whole = client
        .buffer_from_host(&f32_bytes(&x), ElementType::F32, &[8, 2], &devices[0])
        .unwrap();
    let mut bad = args.clone();
    bad[0][0] = &whole;
    assert!(exe.execute(&bad, &ExecuteOptions::default()).is_err());
}
