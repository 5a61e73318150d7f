//! Benchmarks: tracing and printing a 32-layer transformer-block stack
//! (d=576, SmolLM2-shaped) to StableHLO, and the per-call overhead of
//! `Executable::call` on a tiny function versus raw PJRT execute.

use criterion::{Criterion, criterion_group, criterion_main};
use radix::{Buffer, DType, Module, Shape, Tensor};

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

fn bench_trace(c: &mut Criterion) {
    let layers: Vec<Block> = (0..32).map(|_| Block::new()).collect();
    let x = Tensor::param(Shape::tagged(DType::F32, &[("s", SEQ), ("d", D)]));
    let forward = |m: &Vec<Block>, x: Tensor| m.iter().fold(x, |x, b| b.forward(x));
    let text = radix::trace(&layers, &x, forward).unwrap().stablehlo();
    println!(
        "32-layer stack: {} lines of StableHLO",
        text.lines().count()
    );
    c.bench_function("trace+print 32 blocks d=576", |b| {
        b.iter(|| radix::trace(&layers, &x, forward).unwrap().stablehlo())
    });
}

fn bench_call(c: &mut Criterion) {
    let platform = radix::testing::platform();
    let shape = Shape::new(DType::F32, &[4]);
    let exe = radix::compile(
        &platform,
        &(),
        &(Tensor::param(shape), Tensor::param(shape)),
        |_, (x, y)| x + y,
    )
    .unwrap();
    let raw = platform
        .client()
        .compile(&exe.program().stablehlo(), &Default::default())
        .unwrap();
    let a = Buffer::from_slice(&platform, &[1f32, 2., 3., 4.], shape).unwrap();
    let b = Buffer::from_slice(&platform, &[1f32, 2., 3., 4.], shape).unwrap();
    c.bench_function("Executable::call tiny add", |bench| {
        bench.iter(|| exe.call(&[&a, &b]).unwrap())
    });
    let options = radix_pjrt::ExecuteOptions::default();
    c.bench_function("raw PJRT execute tiny add", |bench| {
        bench.iter(|| raw.execute(&[[a.raw(), b.raw()]], &options).unwrap())
    });
}

criterion_group!(benches, bench_trace, bench_call);
criterion_main!(benches);
