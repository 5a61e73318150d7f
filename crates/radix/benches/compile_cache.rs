//! Benchmark: compiling a 30-layer transformer-block stack (SmolLM2-shaped:
//! d=576, 9 heads, FFN 1536, 128 tokens) from cold versus loading it from the
//! on-disk executable cache. Both go through `compile_program_with` from a
//! traced program (the passes, printing and hashing are in both); the
//! difference is `PJRT_Client_Compile` versus reading the entry and
//! `PJRT_Executable_DeserializeAndLoad`.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use radix::{CacheMode, CompileConfig, DType, Module, Origin, Shape, Tensor};

const LAYERS: usize = 30;
const D: i64 = 576;
const HEADS: i64 = 9;
const FFN: i64 = 1536;
const SEQ: i64 = 128;

#[derive(Clone, Module)]
struct Linear {
    weight: Tensor,
}

impl Linear {
    fn new(d_in: i64, d_out: i64) -> Linear {
        Linear {
            weight: Tensor::param(Shape::tagged(DType::F32, &[("dout", d_out), ("d", d_in)])),
        }
    }

    fn forward(&self, x: Tensor) -> Tensor {
        x.dot(self.weight, "d").rename("dout", "d")
    }
}

#[derive(Clone, Module)]
struct Block {
    norm1: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    norm2: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

fn rms_norm(x: Tensor, scale: Tensor) -> Tensor {
    let ms = (x * x).mean("d").broadcast(x.shape());
    x * (ms + 1e-5).rsqrt() * scale.broadcast(x.shape())
}

impl Block {
    fn new() -> Block {
        let norm = || Tensor::param(Shape::tagged(DType::F32, &[("d", D)]));
        Block {
            norm1: norm(),
            q: Linear::new(D, D),
            k: Linear::new(D, D),
            v: Linear::new(D, D),
            o: Linear::new(D, D),
            norm2: norm(),
            gate: Linear::new(D, FFN),
            up: Linear::new(D, FFN),
            down: Linear::new(FFN, D),
        }
    }

    fn forward(&self, x: Tensor) -> Tensor {
        let h = rms_norm(x, self.norm1);
        let heads = |l: &Linear, s: &str| {
            l.forward(h)
                .split_axis("d", &[("h", HEADS), ("hd", -1)])
                .rename("s", s)
        };
        let (q, k, v) = (
            heads(&self.q, "q"),
            heads(&self.k, "k"),
            heads(&self.v, "k"),
        );
        let scores = q.dot(k, "hd") * (1.0 / 8.0);
        let attn = scores
            .softmax("k")
            .dot(v, "k")
            .transpose(["q", "h", "hd"])
            .merge_axes(["h", "hd"], "d")
            .rename("q", "s");
        let x = x + self.o.forward(attn);
        let h = rms_norm(x, self.norm2);
        let gate = self.gate.forward(h).rename("d", "f").silu();
        let up = self.up.forward(h).rename("d", "f");
        x + self.down.forward((gate * up).rename("f", "d"))
    }
}

fn bench_compile_cache(c: &mut Criterion) {
    let platform = radix::testing::platform();
    let layers: Vec<Block> = (0..LAYERS).map(|_| Block::new()).collect();
    let x = Tensor::param(Shape::tagged(DType::F32, &[("s", SEQ), ("d", D)]));
    let forward = |m: &Vec<Block>, x: Tensor| m.iter().fold(x, |x, b| b.forward(x));
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

    let mut group = c.benchmark_group(format!("compile {LAYERS}-layer stack d={D}"));
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
        b.iter(|| radix::trace(&layers, &x, forward).unwrap())
    });
}

criterion_group!(benches, bench_compile_cache);
criterion_main!(benches);
