//! `matvec` on raw Q4_1 and Q8_0 blocks against the f32 paths, at the shapes
//! of SmolLM2-135M's linear layers (rows × cols = out × in).
//!
//! Throughput is the quantized weight bytes per second for every variant, so
//! figures within a shape compare as times do:
//! - `quant`: `matvec` on the raw blocks, one thread;
//! - `dequantize+dot`: `dequantize` the whole matrix, then an f32 `matvec`
//!   (what dequantizing on every call would cost);
//! - `f32`: an f32 `matvec` on weights dequantized beforehand (what radix does
//!   today: f32 weights in memory, four to seven times the bytes);
//! - `quant q8x`: `matvec_q8_with`, activations quantized to 8 bits per
//!   call (as llama.cpp does) and integer products, one thread;
//! - `quant/2 threads`: `matvec` with two scoped threads.
//!
//! The `matmul` group times a prefill of 128 tokens through one 1536×576
//! matrix, `matmul` (exact f32 tiles) and `matmul q8` (8-bit activations,
//! integer tiles where the CPU has AVX-512 VNNI) against 128 `matvec` calls
//! (throughput in multiply-adds per second).
//!
//! The `f32` group times `matmul` on f32 weights at all-MiniLM-L6-v2's
//! shapes (its up and down projections) for one sentence of 16 tokens and
//! a batch of 512 tokens, on one thread (multiply-adds per second).
//!
//! The `token` group times every matrix product of one SmolLM2 decode
//! token (30 layers of Q4_1 projections and the Q8_0 tied head, 96 MB: more
//! than the caches hold), `token Q8_0` those of the Q8_0 file (138 MB),
//! and `token Q4_K_M K-quants` the K-quant products of a Gemma 3 270M
//! Q4_K_M token (18 Q4_K 640×1024, 9 Q4_K and 9 Q6_K 640×2048: 23 MB; its
//! Q5_0 layers and Q8_0 head are formats the groups before time),
//! with 8-bit activations, on one thread and on the spinning [`SpinPool`],
//! in each instruction set this CPU runs, and (`q8 split`) with the rows
//! of every format that splits (Q8_0, Q4_0, Q4_1, Q5_0) split at load, on the
//! best instruction set.
//!
//! Weights are random blocks with finite scales; the speed of these kernels
//! does not depend on the values.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use radix_quant::blocks::f16_offsets;
use radix_quant::testing::Rng;
use radix_quant::{
    Config, DOT_MAX_TOKENS, Format, Isa, Parallel, RowLayout, ScopedThreads, Serial, SpinPool,
    dequantize, matmul_panels_with, matmul_q8_laid_out_with, matmul_q8_with, matmul_with,
    matvec_q8_with, matvec_with, pack_panels, split_rows,
};

const SHAPES: [(usize, usize); 4] = [(576, 576), (1536, 576), (576, 1536), (49152, 576)];

/// Random blocks whose f16 fields (scales and minimums) hold small finite
/// values.
fn random_blocks(format: Format, n_blocks: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut next = move || (rng.next() >> 32) as u32;
    let mut bytes = Vec::with_capacity(n_blocks * format.block_bytes());
    for _ in 0..n_blocks {
        let mut block: Vec<u8> = (0..format.block_bytes()).map(|_| next() as u8).collect();
        for at in f16_offsets(format) {
            let scale = half::f16::from_f32((next() % 1000) as f32 * 1e-5 - 5e-3);
            block[at..at + 2].copy_from_slice(&scale.to_le_bytes());
        }
        bytes.extend_from_slice(&block);
    }
    bytes
}

fn bench(c: &mut Criterion) {
    let serial = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    let two = ScopedThreads::new(2);
    let threaded = Config {
        isa: Isa::best(),
        parallel: &two,
    };
    for format in [Format::Q4_1, Format::Q8_0] {
        let mut group = c.benchmark_group(format!("matvec {format:?} ({})", Isa::best().name()));
        for (rows, cols) in SHAPES {
            let n_blocks = rows * cols / format.block_len();
            let weights = random_blocks(format, n_blocks, (rows * cols) as u64);
            let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut y = vec![0.0f32; rows];
            let mut dense = vec![0.0f32; rows * cols];
            dequantize(format, &weights, &mut dense).expect("whole blocks");
            let dense_bytes: Vec<u8> = dense.iter().flat_map(|v| v.to_le_bytes()).collect();
            let shape = format!("{rows}x{cols}");
            group.throughput(Throughput::Bytes(weights.len() as u64));

            group.bench_function(BenchmarkId::new("quant", &shape), |b| {
                b.iter(|| {
                    matvec_with(&serial, format, &weights, rows, cols, &x, &mut y).expect("shapes")
                })
            });
            group.bench_function(BenchmarkId::new("quant q8x", &shape), |b| {
                b.iter(|| {
                    matvec_q8_with(&serial, format, &weights, rows, cols, &x, &mut y)
                        .expect("shapes")
                })
            });
            group.bench_function(BenchmarkId::new("dequantize+dot", &shape), |b| {
                b.iter(|| {
                    dequantize(format, &weights, &mut dense).expect("whole blocks");
                    let bytes: &[u8] = &dense_bytes; // the f32 dot reads bytes, as GGUF F32 rows
                    matvec_with(&serial, Format::F32, bytes, rows, cols, &x, &mut y)
                        .expect("shapes")
                })
            });
            group.bench_function(BenchmarkId::new("f32", &shape), |b| {
                b.iter(|| {
                    matvec_with(&serial, Format::F32, &dense_bytes, rows, cols, &x, &mut y)
                        .expect("shapes")
                })
            });
            group.bench_function(BenchmarkId::new("quant/2 threads", &shape), |b| {
                b.iter(|| {
                    matvec_with(&threaded, format, &weights, rows, cols, &x, &mut y)
                        .expect("shapes")
                })
            });
        }
        group.finish();
    }
}

fn bench_matmul(c: &mut Criterion) {
    let serial = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    let (rows, cols) = (1536, 576);
    // 2 to 7 tokens (a batch of decoding sequences) multiply decoded tiles
    // a token at a time; from 8, the tokens sit in vector lanes.
    let cases = [
        (Format::Q4_1, 128),
        (Format::Q8_0, 128),
        (Format::Q4_K, 128),
        (Format::Q6_K, 128),
        (Format::Q4_1, 16),
        (Format::Q4_1, 7),
        (Format::Q4_1, 4),
        (Format::Q4_1, 2),
        (Format::Q4_K, 2),
    ];
    for (format, n_tokens) in cases {
        let mut group = c.benchmark_group(format!("matmul {format:?} ({})", Isa::best().name()));
        let weights = random_blocks(format, rows * cols / 32, 7);
        let x: Vec<f32> = (0..n_tokens * cols)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let mut y = vec![0.0f32; n_tokens * rows];
        let shape = format!("{rows}x{cols}x{n_tokens}");
        group.throughput(Throughput::Elements((rows * cols * n_tokens) as u64));
        group.bench_function(BenchmarkId::new("matmul", &shape), |b| {
            b.iter(|| {
                matmul_with(&serial, format, &weights, rows, cols, n_tokens, &x, &mut y)
                    .expect("shapes")
            })
        });
        if n_tokens > DOT_MAX_TOKENS {
            group.bench_function(BenchmarkId::new("matmul q8", &shape), |b| {
                b.iter(|| {
                    matmul_q8_with(&serial, format, &weights, rows, cols, n_tokens, &x, &mut y)
                        .expect("shapes")
                })
            });
            let mut split = vec![0u8; weights.len()];
            if split_rows(format, cols, &weights, &mut split).is_ok() {
                group.bench_function(BenchmarkId::new("matmul q8 split", &shape), |b| {
                    b.iter(|| {
                        let w = (format, RowLayout::Split, &split[..]);
                        matmul_q8_laid_out_with(&serial, w, (rows, cols, n_tokens), &x, &mut y)
                            .expect("shapes")
                    })
                });
            }
        }
        group.bench_function(BenchmarkId::new("matvec per token", &shape), |b| {
            b.iter(|| {
                for (x, y) in x.chunks_exact(cols).zip(y.chunks_exact_mut(rows)) {
                    matvec_with(&serial, format, &weights, rows, cols, x, y).expect("shapes")
                }
            })
        });
        group.finish();
    }
}

fn bench_f32(c: &mut Criterion) {
    let serial = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    let mut group = c.benchmark_group(format!("f32 ({})", Isa::best().name()));
    for (rows, cols) in [(1536, 384), (384, 1536)] {
        let weights: Vec<u8> = (0..rows * cols)
            .flat_map(|i| ((i as f32 * 0.61).sin() * 0.05).to_le_bytes())
            .collect();
        for n_tokens in [16, 512] {
            let x: Vec<f32> = (0..n_tokens * cols)
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let mut y = vec![0.0f32; n_tokens * rows];
            group.throughput(Throughput::Elements((rows * cols * n_tokens) as u64));
            let shape = format!("{rows}x{cols}x{n_tokens}");
            let panels = pack_panels(rows, cols, &weights).expect("whole panels");
            group.bench_function(BenchmarkId::new("panels", &shape), |b| {
                b.iter(|| {
                    matmul_panels_with(&serial, &panels, rows, cols, n_tokens, &x, &mut y)
                        .expect("shapes")
                })
            });
            group.bench_function(BenchmarkId::new("matmul", &shape), |b| {
                b.iter(|| {
                    matmul_with(
                        &serial,
                        Format::F32,
                        &weights,
                        rows,
                        cols,
                        n_tokens,
                        &x,
                        &mut y,
                    )
                    .expect("shapes")
                })
            });
        }
    }
    group.finish();
}

/// SmolLM2-135M's matrices of one layer (rows × cols).
const LAYER: [(usize, usize); 7] = [
    (576, 576),
    (192, 576),
    (192, 576),
    (576, 576),
    (1536, 576),
    (1536, 576),
    (576, 1536),
];

fn bench_token(c: &mut Criterion) {
    // The shipped Q4_1 file's layers, and llama-quantize's Q8_0 file's;
    // both tie the head to a Q8_0 embedding.
    for layers in [Format::Q4_1, Format::Q8_0] {
        let mut matrices: Vec<(Format, usize, usize, Vec<u8>)> = vec![];
        for layer in 0..30 {
            for (i, &(rows, cols)) in LAYER.iter().enumerate() {
                let seed = (layer * 16 + i) as u64 + 1;
                let w = random_blocks(layers, rows * cols / 32, seed);
                matrices.push((layers, rows, cols, w));
            }
        }
        matrices.push((
            Format::Q8_0,
            49152,
            576,
            random_blocks(Format::Q8_0, 49152 * 18, 99),
        ));
        let name = match layers {
            Format::Q4_1 => "token",
            _ => "token Q8_0",
        };
        bench_products(c, name, &matrices);
    }
    // Gemma 3 270M Q4_K_M's K-quant matrices (rows × cols = 640 × in).
    let mut matrices: Vec<(Format, usize, usize, Vec<u8>)> = vec![];
    for layer in 0..18 {
        let seed = layer as u64 * 4 + 1;
        let cols = 1024;
        matrices.push((
            Format::Q4_K,
            640,
            cols,
            random_blocks(Format::Q4_K, 640 * cols / 256, seed),
        ));
        let down = if layer % 2 == 0 {
            Format::Q4_K
        } else {
            Format::Q6_K
        };
        let cols = 2048;
        matrices.push((
            down,
            640,
            cols,
            random_blocks(down, 640 * cols / 256, seed + 1),
        ));
    }
    bench_products(c, "token Q4_K_M K-quants", &matrices);
}

/// Times `matrices` (format, rows, cols, blocks) each times one token, with
/// 8-bit activations, in every instruction set, on one thread and the pool.
fn bench_products(c: &mut Criterion, name: &str, matrices: &[(Format, usize, usize, Vec<u8>)]) {
    let bytes: usize = matrices.iter().map(|m| m.3.len()).sum();
    let max_cols = matrices.iter().map(|m| m.2).max().unwrap_or(0);
    let max_rows = matrices.iter().map(|m| m.1).max().unwrap_or(0);
    let x: Vec<f32> = (0..max_cols).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut y = vec![0.0f32; max_rows];
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(bytes as u64));
    group.sample_size(20);
    let pool = SpinPool::global();
    let pools: [(&str, &dyn Parallel); 2] = [("1 thread", &Serial), ("spin pool", pool)];
    for isa in Isa::available() {
        for (name, parallel) in pools {
            let config = Config { isa, parallel };
            let id = BenchmarkId::new(format!("q8 {} {name}", isa.name()), pool.n_threads());
            group.bench_function(id, |b| {
                b.iter(|| {
                    for (format, rows, cols, w) in matrices {
                        let (x, y) = (&x[..*cols], &mut y[..*rows]);
                        matvec_q8_with(&config, *format, w, *rows, *cols, x, y).expect("shapes");
                    }
                })
            });
        }
    }
    // The rows of every format that splits, split at load
    // (`RowLayout::Split`), as radix loads them where the VNNI dot reads
    // them.
    let split: Vec<Option<Vec<u8>>> = matrices
        .iter()
        .map(|(format, _, cols, w)| {
            let mut out = vec![0u8; w.len()];
            split_rows(*format, *cols, w, &mut out).ok().map(|()| out)
        })
        .collect();
    for (name, parallel) in pools {
        let config = Config {
            isa: Isa::best(),
            parallel,
        };
        let id = BenchmarkId::new(format!("q8 split {name}"), pool.n_threads());
        group.bench_function(id, |b| {
            b.iter(|| {
                for ((format, rows, cols, w), split) in matrices.iter().zip(&split) {
                    let (x, y) = (&x[..*cols], &mut y[..*rows]);
                    match split {
                        Some(s) => {
                            let w = (*format, RowLayout::Split, &s[..]);
                            matmul_q8_laid_out_with(&config, w, (*rows, *cols, 1), x, y)
                        }
                        None => matvec_q8_with(&config, *format, w, *rows, *cols, x, y),
                    }
                    .expect("shapes");
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, bench_matmul, bench_f32, bench_token);
criterion_main!(benches);
