//! Runtime latencies: execute + wait of a tiny add, 1 MiB host to device,
//! 1 MiB device to host. Needs a CPU plugin (`RADIX_PJRT_PLUGIN` or the
//! provisioning cache).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use radix_pjrt::provision::{Target, locate};
use radix_pjrt::{Client, ClientOptions, CompileOptions, ElementType, ExecuteOptions, Plugin};

const ADD: &str = r#"
func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}"#;

fn runtime(c: &mut Criterion) {
    let plugin =
        Plugin::load(&locate(Target::Cpu, None).expect("a CPU plugin")).expect("plugin loads");
    let options = ClientOptions {
        cpu_device_count: Some(1),
        ..ClientOptions::default()
    };
    let client = Client::new(plugin, &options).unwrap();
    let device = &client.addressable_devices()[0];
    let exe = client.compile(ADD, &CompileOptions::default()).unwrap();
    let small = [1f32, 2., 3., 4.]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>();
    let a = client
        .buffer_from_host(&small, ElementType::F32, &[4], device)
        .unwrap();
    let b = client
        .buffer_from_host(&small, ElementType::F32, &[4], device)
        .unwrap();
    let exec = ExecuteOptions::default();
    c.bench_function("execute tiny add + wait", |bench| {
        bench.iter(|| black_box(exe.execute(&[[&a, &b]], &exec).unwrap()))
    });

    c.bench_function("buffer element type + dims", |bench| {
        bench.iter(|| {
            (
                black_box(a.element_type().unwrap()),
                black_box(a.dims().unwrap().len()),
            )
        })
    });

    let mib = vec![1u8; 1 << 20];
    c.bench_function("host to device 1 MiB", |bench| {
        bench.iter(|| {
            black_box(
                client
                    .buffer_from_host(&mib, ElementType::F32, &[1 << 18], device)
                    .unwrap(),
            )
        })
    });

    let on_device = client
        .buffer_from_host(&mib, ElementType::F32, &[1 << 18], device)
        .unwrap();
    let mut out = vec![0u8; 1 << 20];
    c.bench_function("device to host 1 MiB", |bench| {
        bench.iter(|| on_device.to_host(black_box(&mut out)).unwrap())
    });

    let mut out4 = [0u8; 16];
    let sum = &exe.execute(&[[&a, &b]], &exec).unwrap()[0][0];
    c.bench_function("device to host 16 B", |bench| {
        bench.iter(|| sum.to_host(black_box(&mut out4)).unwrap())
    });
}

criterion_group!(benches, runtime);
criterion_main!(benches);
