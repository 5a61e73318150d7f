//! What the kernel tests share: seeded random blocks and activations, and
//! the f64 reference product on the reference dequantization.

#![allow(dead_code)] // each test file uses its own part

use radix_quant::{Format, Parallel, ScopedThreads, dequantize};

pub use radix_quant::testing::Rng;

/// What the code bytes of a random block hold.
#[derive(Debug, Clone, Copy)]
pub enum Codes {
    Random,
    /// Every code bit set: the largest codes (and K-quant sub-scales).
    AllOnes,
    /// Every code bit clear.
    AllZeros,
}

/// `rows × cols` random weights in `format`: code bytes as `codes` says,
/// scales small random f16 (`scale = 0.0` makes them all zero).
pub fn random_weights(
    format: Format,
    rows: usize,
    cols: usize,
    codes: Codes,
    scale: f32,
    rng: &mut Rng,
) -> Vec<u8> {
    let n_blocks = rows * cols / format.block_len();
    let mut bytes = Vec::with_capacity(n_blocks * format.block_bytes());
    for _ in 0..n_blocks {
        let mut block: Vec<u8> = match format {
            // Trivial formats: random finite values, not random bits.
            Format::F32 => (scale * rng.unit()).to_le_bytes().to_vec(),
            Format::F16 => half::f16::from_f32(scale * rng.unit())
                .to_le_bytes()
                .to_vec(),
            Format::BF16 => half::bf16::from_f32(scale * rng.unit())
                .to_le_bytes()
                .to_vec(),
            _ => (0..format.block_bytes())
                .map(|_| match codes {
                    Codes::Random => rng.next() as u8,
                    Codes::AllOnes => 0xFF,
                    Codes::AllZeros => 0,
                })
                .collect(),
        };
        for at in radix_quant::blocks::f16_offsets(format) {
            let d = half::f16::from_f32(scale * 0.05 * rng.unit());
            block[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
        bytes.extend_from_slice(&block);
    }
    bytes
}

pub fn random_x(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|_| rng.unit()).collect()
}

/// `y[t] = W·x[t]` in f64 from the reference dequantization, and per output
/// the largest |w·x| term (for the tolerance).
pub fn reference(
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let mut w = vec![0.0f32; rows * cols];
    dequantize(format, weights, &mut w).expect("whole blocks");
    let (mut y, mut max_term) = (Vec::new(), Vec::new());
    for x in x.chunks_exact(cols) {
        for w in w.chunks_exact(cols) {
            let terms = w.iter().zip(x).map(|(&w, &x)| f64::from(w) * f64::from(x));
            y.push(terms.clone().sum());
            max_term.push(terms.map(f64::abs).fold(0.0, f64::max));
        }
    }
    (y, max_term)
}

/// Scoped threads that split work finely (tasks of 1 KiB of weights), as a
/// caller's pool may: the kernels must give the same results however rows
/// are split.
pub struct FineGrained(pub ScopedThreads);

impl Parallel for FineGrained {
    fn n_threads(&self) -> usize {
        self.0.n_threads()
    }

    fn run(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.0.run(n_tasks, task)
    }

    fn min_task_bytes(&self) -> usize {
        1024
    }
}
