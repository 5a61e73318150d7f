//! Benchmarks: tracing and printing a 32-layer transformer-block stack
//! (d=576, SmolLM2-shaped) to StableHLO, and the per-call overhead of
//! `Executable::call` on a tiny function versus raw PJRT execute.

use criterion::{Criterion, criterion_group, criterion_main};
use radix::{Buffer, DType, Shape, Tensor};

mod stack;

fn bench_trace(c: &mut Criterion) {
    let (layers, x) = stack::stack(32);
    let forward = stack::forward;
    let text = radix::trace(&layers, &x, forward)
        .unwrap()
        .optimize()
        .stablehlo();
    println!(
        "32-layer stack: {} lines of StableHLO",
        text.lines().count()
    );
    c.bench_function("trace+print 32 blocks d=576", |b| {
        b.iter(|| {
            radix::trace(&layers, &x, forward)
                .unwrap()
                .optimize()
                .stablehlo()
        })
    });
}

fn bench_call(c: &mut Criterion) {
    let platform = radix::testing::platform();
    let shape = Shape::new(DType::F32, &[4]);
    let exe = radix::compile_fn(
        &platform,
        &(Tensor::param(shape), Tensor::param(shape)),
        |(x, y)| x + y,
    )
    .unwrap();
    let raw = platform
        .client()
        .compile(&exe.program().stablehlo(), &Default::default())
        .unwrap();
    let a = Buffer::from_slice(&platform, &[1f32, 2., 3., 4.], shape).unwrap();
    let b = Buffer::from_slice(&platform, &[1f32, 2., 3., 4.], shape).unwrap();
    c.bench_function("Executable::call tiny add", |bench| {
        bench.iter(|| exe.call_fn((a.clone(), b.clone())).unwrap())
    });
    let options = radix_pjrt::ExecuteOptions::default();
    c.bench_function("raw PJRT execute tiny add", |bench| {
        bench.iter(|| raw.execute(&[[a.raw(), b.raw()]], &options).unwrap())
    });
}

criterion_group!(benches, bench_trace, bench_call);
criterion_main!(benches);
