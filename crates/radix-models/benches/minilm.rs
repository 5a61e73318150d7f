//! all-MiniLM-L6-v2 sentence embeddings through radix on the CPU plugin:
//! sentences per second at batch 1 x 16 tokens and batch 32 x 128 tokens
//! (every token real, so no padding; tokenization and the host copies of
//! inputs and embeddings included). Compilation happens before timing.
//!
//! Run with `cargo bench -p radix-models --bench minilm`; criterion's
//! `thrpt` line is in sentences/s.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use radix::Platform;
use radix_models::bert::Embedder;

/// A sentence of exactly `n_tokens` tokens with `[CLS]` and `[SEP]`.
fn sentence(embedder: &Embedder, n_tokens: usize) -> String {
    let text = vec!["hello"; n_tokens - 2].join(" ");
    assert_eq!(embedder.tokenize(&text).unwrap().len(), n_tokens);
    text
}

fn minilm(c: &mut Criterion) {
    let platform = Platform::cpu().expect("a CPU plugin");
    let mut embedder = Embedder::minilm(&platform).expect("MiniLM loads");
    let mut group = c.benchmark_group("minilm");
    group.sample_size(10);
    for (batch, len) in [(1, 16), (32, 128)] {
        let text = sentence(&embedder, len);
        let texts = vec![text.as_str(); batch];
        embedder.embed(&texts).expect("compiles and runs");
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_function(format!("embed {batch}x{len}"), |b| {
            b.iter(|| black_box(embedder.embed(&texts).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, minilm);
criterion_main!(benches);
