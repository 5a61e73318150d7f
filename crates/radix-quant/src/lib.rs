//! GGUF quantized weights without leaving them quantized: the block formats,
//! a scalar reference dequantizer equal bit for bit to ggml's (and the `gguf`
//! Python package's), and CPU kernels that multiply raw blocks by f32
//! activations: [`matvec`] for decoding one token, [`matmul`] for several,
//! on a [`Parallel`] such as the spinning [`SpinPool`]. F32 matrices may be
//! packed once in panels of 16 rows ([`pack_panels`]) for
//! [`matmul_panels_with`], a vector of weights per load; Q8_0, Q4_0, Q4_1
//! and Q5_0 rows may be split at load into their codes, then their scales
//! ([`split_rows`]), for [`matmul_q8_laid_out_with`].
//!
//! Pure Rust on byte slices: nothing here knows radix, PJRT or tracing, so
//! radix can wrap the kernels as XLA custom calls and pass its thread pool as
//! a [`Parallel`].
//!
//! A weight matrix is `rows × cols`, row-major, each row a whole number of
//! blocks along `cols`, as GGUF stores a linear layer's weight `[out, in]`.
//! The kernels decode every weight exactly as [`dequantize`] does and
//! accumulate in f32, so they differ from "dequantize, then an f32 dot" only
//! in the order of their sums. [`matvec_q8_with`] trades that for speed as
//! llama.cpp does: activations quantized to 8 bits, integer products.
//!
//! Instruction sets are detected at run time ([`Isa`]): AVX2 with FMA and
//! F16C on x86-64, portable scalar code everywhere; `tests/dequantize.rs`
//! checks every detected instruction set bit for bit against the `gguf`
//! package. AVX-512 pays only where compute, not memory, bounds a kernel: a
//! prompt's products (16 tokens a vector, and with VNNI integer products of
//! 8-bit activations). A decode token's matrices with two threads run at the
//! memory bandwidth with AVX2 already (measured on a 2-core Xeon with
//! AVX-512: 9 ms for 96 MB, `benches/matvec.rs`'s `token` group).

mod activations;
pub mod blocks;
mod dequantize;
mod error;
mod format;
mod kernels;
pub mod testing;
mod threads;

pub use activations::quantize_q8_0;
pub use dequantize::dequantize;
pub use error::Error;
pub use format::{Format, QK_K};
pub use kernels::{
    Config, DOT_MAX_TOKENS, Isa, PANEL_ROWS, RowLayout, Stacked, join_rows, matmul,
    matmul_panels_f32_with, matmul_panels_with, matmul_q8_dots_laid_out_with, matmul_q8_dots_with,
    matmul_q8_laid_out_with, matmul_q8_with, matmul_with, matvec, matvec_q8_stacked_with,
    matvec_q8_with, matvec_with, pack_panels, pack_panels_f32, split_parts, split_rows,
    unpack_panels,
};
pub use threads::{Parallel, ScopedThreads, Serial, SpinPool};
