//! Benchmark: compiling a 30-layer transformer-block stack (SmolLM2-shaped:
//! d=576, 9 heads, FFN 1536, 128 tokens) from cold versus loading it from the
//! on-disk executable cache. Both go through `compile_program_with` from a
//! traced program (the passes, printing and hashing are in both); the
//! difference is `PJRT_Client_Compile` versus reading the entry and
//! `PJRT_Executable_DeserializeAndLoad`.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use radix::{CacheMode, CompileConfig, Origin};

mod stack;

const LAYERS: usize = 30;

fn bench_compile_cache(c: &mut Criterion) {
    let platform = radix::testing::platform();
    let (layers, x) = stack::stack(LAYERS);
    let forward = stack::forward;
    let program = radix::trace(&layers, &x, forward).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut cold = CompileConfig::new(&platform);
    cold.cache = CacheMode::Disabled;
    cold.dump = None;
    let mut cached = cold.clone();
    cached.cache = CacheMode::Dir(dir.path().to_path_buf());
    // Fill the cache (and hash the plugin file once).
    let exe = radix::compile_program_with(&platform, program.clone(), &cached).unwrap();
    assert_eq!(exe.origin(), Origin::Compiled);

    let mut group = c.benchmark_group(format!("compile {LAYERS}-layer stack d={}", stack::D));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("cold (PJRT compile)", |b| {
        b.iter(|| radix::compile_program_with(&platform, program.clone(), &cold).unwrap())
    });
    group.bench_function("cached (load from disk)", |b| {
        b.iter(|| {
            let exe = radix::compile_program_with(&platform, program.clone(), &cached).unwrap();
            assert_eq!(exe.origin(), Origin::Cache);
            exe
        })
    });
    group.finish();
    c.bench_function(format!("trace+passes {LAYERS}-layer stack").as_str(), |b| {
        b.iter(|| radix::trace(&layers, &x, forward).unwrap().optimize())
    });
}

criterion_group!(benches, bench_compile_cache);
criterion_main!(benches);
