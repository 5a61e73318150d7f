//! Benchmark: `nn::cached_attention` over an f16 and a Q8_0 cache at the shapes of a
//! server's steps with a long shared prompt (SmolLM2's 9 query and 3
//! key/value heads of width 64, 16 rows, 1,200 positions filled of 2,048):
//! a decode step (one query per row) and a step of 16 prompt tokens per
//! row. Each iteration is one `call` of one layer's attention (inputs
//! already on the device), which returns once the execution is done.

use criterion::{Criterion, criterion_group, criterion_main};
use radix::nn::{CacheType, KvCache, cached_attention};
use radix::{Buffer, Compiled, DType, Shape, Tensor};

const ROWS: i64 = 16;
const HEADS: i64 = 9;
const KV: i64 = 3;
const HD: i64 = 64;
const CAPACITY: i64 = 2048;
/// The positions filled before the step.
const FILLED: i64 = 1200;

type Exe = Compiled<(), (Tensor, Tensor, Tensor, Tensor), Tensor>;

/// The attention of `n_q` queries per row after [`FILLED`] positions over
/// a cache of `ty` (f16 or Q8_0).
fn step(n_q: i64, ty: CacheType) -> (Exe, [Buffer; 4]) {
    let platform = radix::testing::platform();
    let q_shape = Shape::tagged(
        DType::F32,
        &[("b", ROWS), ("q", n_q), ("h", HEADS), ("hd", HD)],
    );
    let cache = KvCache::shape(ROWS, CAPACITY, KV, HD, ty).expect("a cache shape");
    let pos_shape = Shape::tagged(DType::I32, &[("b", ROWS), ("q", n_q)]);
    let exe = radix::compile_fn(
        &platform,
        &(
            Tensor::param(q_shape),
            Tensor::param(cache),
            Tensor::param(cache),
            Tensor::param(pos_shape),
        ),
        |(q, k, v, pos)| cached_attention(q, pos, KvCache { k, v }, None),
    )
    .expect("compile");
    let wave = |n: usize, f: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0 * f)
            .collect()
    };
    let q = wave((ROWS * n_q * HEADS * HD) as usize, 1.0);
    let values = wave((ROWS * CAPACITY * KV * HD) as usize, 0.5);
    let kv: Vec<u8> = match ty {
        CacheType::Q8_0 => {
            let mut blocks = vec![0u8; cache.byte_size()];
            radix_quant::quantize_q8_0(&values, &mut blocks).expect("whole blocks");
            blocks
        }
        _ => values
            .into_iter()
            .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
    };
    let pos: Vec<i32> = (0..ROWS * n_q).map(|i| (FILLED + i % n_q) as i32).collect();
    let buffers = [
        Buffer::from_slice(&platform, &q, q_shape).expect("q"),
        Buffer::from_bytes(&platform, &kv, cache).expect("k"),
        Buffer::from_bytes(&platform, &kv, cache).expect("v"),
        Buffer::from_slice(&platform, &pos, pos_shape).expect("positions"),
    ];
    (exe, buffers)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("cached_attention");
    group.sample_size(20);
    let steps = [
        ("decode, 16 rows", 1, CacheType::F16),
        ("16 tokens, 16 rows", 16, CacheType::F16),
        ("decode, 16 rows, q8_0", 1, CacheType::Q8_0),
        ("16 tokens, 16 rows, q8_0", 16, CacheType::Q8_0),
    ];
    for (name, n_q, ty) in steps {
        let (exe, [q, k, v, pos]) = step(n_q, ty);
        group.bench_function(name, |b| {
            b.iter(|| {
                exe.call_fn((q.clone(), k.clone(), v.clone(), pos.clone()))
                    .expect("call")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
