//! F32 matrices packed in panels of [`PANEL_ROWS`] rows, and their products.
//!
//! In a panel, element `k` of its 16 rows lie side by side
//! (`panel[k * 16 + j]` is row `16p + j`, column `k`), so one vector load
//! takes 16 rows' weights and multiplies one broadcast activation: the
//! layout a BLAS packs its constant operand into once (onnxruntime's MLAS
//! does it when a session is created). Against row-major weights (the
//! [`TokenLanes`](super::TokenLanes) path) nothing is transposed per call,
//! results are stored a vector at a time, and the weights stream through
//! the caches in order, a vector per load rather than one broadcast
//! element per row.
//!
//! Every output is the chain `c = fma(w[k], x[k], c)` for `k` in order from
//! zero, as on the row-major lanes path, so every instruction set (and the
//! scalar reference, `f32::mul_add`) gives the same bits.

use super::{Config, Isa, Kind, check_len, for_row_tasks, for_token_tasks, no_products, product};
use crate::Error;

/// Rows in a panel: one AVX-512 vector of f32, two of AVX2.
pub const PANEL_ROWS: usize = 16;

/// Tokens a task takes at once: their activations (`cols` f32 each) stay in
/// L2 while every panel passes over them.
const TOKENS_PER_CHUNK: usize = 256;

/// `rows × cols` row-major f32 weights (little-endian bytes, as GGUF and
/// safetensors store them) packed into panels of [`PANEL_ROWS`] rows: the
/// same bytes in another order. `Err` unless `rows` is a multiple of
/// [`PANEL_ROWS`] and `row_major` holds `rows × cols` f32s.
pub fn pack_panels(rows: usize, cols: usize, row_major: &[u8]) -> Result<Vec<u8>, Error> {
    check_panels(rows, cols, row_major.len())?;
    let (values, _) = row_major.as_chunks::<4>();
    let mut out = vec![[0u8; 4]; values.len()];
    pack(cols, values, &mut out);
    Ok(out.into_flattened())
}

/// [`pack_panels`] undone: the row-major bytes of packed `panels`.
pub fn unpack_panels(rows: usize, cols: usize, panels: &[u8]) -> Result<Vec<u8>, Error> {
    check_panels(rows, cols, panels.len())?;
    let (values, _) = panels.as_chunks::<4>();
    let mut out = vec![[0u8; 4]; values.len()];
    for (p, panel) in values.chunks_exact(PANEL_ROWS * cols).enumerate() {
        for j in 0..PANEL_ROWS {
            let row = &mut out[(p * PANEL_ROWS + j) * cols..][..cols];
            for (k, w) in row.iter_mut().enumerate() {
                *w = panel[k * PANEL_ROWS + j];
            }
        }
    }
    Ok(out.into_flattened())
}

/// [`pack_panels`] of f32s: the panels of the row-major `rows × cols`
/// matrix `row_major` written into `out` (of the same length).
pub fn pack_panels_f32(
    rows: usize,
    cols: usize,
    row_major: &[f32],
    out: &mut [f32],
) -> Result<(), Error> {
    check_panels(rows, cols, row_major.len() * 4)?;
    check_len("panels", out.len(), row_major.len())?;
    pack(cols, row_major, out);
    Ok(())
}

/// The panels of whole panels of rows `row_major` (each `cols` long) into
/// `out`, element by element.
fn pack<T: Copy>(cols: usize, row_major: &[T], out: &mut [T]) {
    for (p, panel) in out.chunks_exact_mut(PANEL_ROWS * cols).enumerate() {
        for j in 0..PANEL_ROWS {
            let row = &row_major[(p * PANEL_ROWS + j) * cols..][..cols];
            for (k, &w) in row.iter().enumerate() {
                panel[k * PANEL_ROWS + j] = w;
            }
        }
    }
}

fn check_panels(rows: usize, cols: usize, bytes: usize) -> Result<(), Error> {
    if !rows.is_multiple_of(PANEL_ROWS) {
        return Err(Error::PartialPanel { rows });
    }
    check_len(
        "panels (bytes)",
        bytes,
        product("panels", product("panels", rows, cols)?, 4)?,
    )
}

/// `y[t] = W·x[t]` for `t` in `0..n_tokens`, `W` `rows × cols` f32 packed by
/// [`pack_panels`]: `x` is `n_tokens × cols` and `y` `n_tokens × rows`,
/// row-major. A few tokens are split over the threads by panels, a prompt
/// by tokens.
pub fn matmul_panels_with(
    config: &Config,
    panels: &[u8],
    rows: usize,
    cols: usize,
    n_tokens: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    check_panels(rows, cols, panels.len())?;
    matmul_panels_f32_with(config, &as_f32(panels), rows, cols, n_tokens, x, y)
}

/// [`matmul_panels_with`] of panels held as f32s.
pub fn matmul_panels_f32_with(
    config: &Config,
    weights: &[f32],
    rows: usize,
    cols: usize,
    n_tokens: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    check_panels(rows, cols, weights.len() * 4)?;
    check_len("x", x.len(), product("x", n_tokens, cols)?)?;
    check_len("y", y.len(), product("y", n_tokens, rows)?)?;
    if no_products(rows, cols, n_tokens, y) {
        return Ok(());
    }
    let isa = config.isa;
    if n_tokens >= TOKENS_PER_CHUNK * config.parallel.n_threads() {
        // By tokens: each task writes whole rows of `y`.
        let n_tasks = config.parallel.n_threads() * config.parallel.tasks_per_thread().max(1);
        let per_task = n_tokens.div_ceil(n_tasks.max(1));
        for_token_tasks(config, (x, cols), (y, rows), per_task, &|x, y| {
            run(isa, weights, cols, x, y, rows, 0)
        });
        return Ok(());
    }
    // By panels: each task a band of whole panels.
    let row_bytes = cols * 4;
    for_row_tasks(
        config,
        (rows, row_bytes, PANEL_ROWS),
        n_tokens,
        y,
        &|first, n_rows, out| {
            let w = &weights[first * cols..][..n_rows * cols];
            run(isa, w, cols, x, out, n_rows, 0)
        },
    );
    Ok(())
}

/// The panels as f32s: in place where the bytes are aligned (as a device
/// buffer's are), else copied.
fn as_f32(panels: &[u8]) -> std::borrow::Cow<'_, [f32]> {
    // SAFETY: every bit pattern is an f32; `align_to` puts in the middle
    // only whole, aligned f32s.
    let (head, mid, tail) = unsafe { panels.align_to::<f32>() };
    if head.is_empty() && tail.is_empty() && cfg!(target_endian = "little") {
        return std::borrow::Cow::Borrowed(mid);
    }
    std::borrow::Cow::Owned(
        panels
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

/// `out[t * stride + first + r] = W[r]·x[t]` for the panels `w` (`out_rows`
/// rows) and every token of `x`, in chunks of [`TOKENS_PER_CHUNK`] tokens.
/// `cols` is not zero.
fn run(isa: Isa, w: &[f32], cols: usize, x: &[f32], out: &mut [f32], stride: usize, first: usize) {
    let n_tokens = x.len() / cols;
    for t0 in (0..n_tokens).step_by(TOKENS_PER_CHUNK) {
        let n = TOKENS_PER_CHUNK.min(n_tokens - t0);
        let x = &x[t0 * cols..][..n * cols];
        let out = &mut out[t0 * stride..];
        match isa.0 {
            Kind::Scalar => scalar(w, cols, x, out, stride, first),
            Kind::Avx2 => simd::avx2(w, cols, x, out, stride, first),
            Kind::Avx512 | Kind::Avx512Vnni => simd::avx512(w, cols, x, out, stride, first),
        }
    }
}

/// The reference: each output one `mul_add` chain along its row.
fn scalar(w: &[f32], cols: usize, x: &[f32], out: &mut [f32], stride: usize, first: usize) {
    for (p, panel) in w.chunks_exact(PANEL_ROWS * cols).enumerate() {
        for (t, x) in x.chunks_exact(cols).enumerate() {
            for j in 0..PANEL_ROWS {
                let mut c = 0.0f32;
                for (k, &x) in x.iter().enumerate() {
                    c = panel[k * PANEL_ROWS + j].mul_add(x, c);
                }
                out[t * stride + first + p * PANEL_ROWS + j] = c;
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    pub(super) fn avx2(_: &[f32], _: usize, _: &[f32], _: &mut [f32], _: usize, _: usize) {
        unreachable!("AVX2 is never detected off x86-64")
    }
    pub(super) fn avx512(_: &[f32], _: usize, _: &[f32], _: &mut [f32], _: usize, _: usize) {
        unreachable!("AVX-512 is never detected off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::PANEL_ROWS;

    /// Columns ahead of the step at which the panels' weights are asked for:
    /// measured in criterion over MiniLM's 36 matrices at 16 tokens (42 MB,
    /// from L3), 1.82 ms without, 1.66 at 8, 1.77 at 32 columns.
    const PREFETCH_K: usize = 8;

    /// Defines `$name(w, cols, x, out, stride, first)`: every panel of `w`
    /// times every token of `x`, in steps of up to `$panels` panels ×
    /// `$tokens` tokens (`$panels × (16 / $width) × $tokens` accumulators,
    /// the panels' vectors and a broadcast must fit the registers).
    macro_rules! panels_kernel {
        ($name:ident, $step:ident, $features:literal, $vec:ty, $width:literal, $panels:literal,
         $tokens:literal, $setzero:ident, $loadu:ident, $set1:ident, $fmadd:ident,
         $storeu:ident) => {
            pub(super) fn $name(
                w: &[f32],
                cols: usize,
                x: &[f32],
                out: &mut [f32],
                stride: usize,
                first: usize,
            ) {
                let panel = PANEL_ROWS * cols;
                let n_panels = w.len() / panel;
                let n_tokens = x.len() / cols;
                assert!(w.len() == n_panels * panel && x.len() == n_tokens * cols);
                assert!(
                    n_tokens == 0
                        || out.len() >= (n_tokens - 1) * stride + first + n_panels * PANEL_ROWS
                );
                let mut p = 0;
                while p < n_panels {
                    // Two panels where three do not fit (a head's 32
                    // values in attention): twice the accumulators of one.
                    let np = match n_panels - p {
                        left if left >= $panels => $panels,
                        left if left >= 2 && $panels > 2 => 2,
                        _ => 1,
                    };
                    let w = &w[p * panel..(p + np) * panel];
                    let at = first + p * PANEL_ROWS;
                    let mut t = 0;
                    while t < n_tokens {
                        let left = n_tokens - t;
                        let nt = [$tokens, 4, 2, 1]
                            .into_iter()
                            .find(|&n| n <= left)
                            .unwrap_or(1);
                        let x = &x[t * cols..(t + nt) * cols];
                        let out = &mut out[t * stride..];
                        // SAFETY: the caller detected the target features;
                        // `$step` asserts the lengths it reads and writes.
                        #[allow(unreachable_patterns)] // where `$panels` is 1 or 2
                        unsafe {
                            match (np, nt) {
                                ($panels, $tokens) => {
                                    $step::<$panels, $tokens>(w, x, out, stride, at)
                                }
                                ($panels, 4) => $step::<$panels, 4>(w, x, out, stride, at),
                                ($panels, 2) => $step::<$panels, 2>(w, x, out, stride, at),
                                ($panels, _) => $step::<$panels, 1>(w, x, out, stride, at),
                                (2, $tokens) => $step::<2, $tokens>(w, x, out, stride, at),
                                (2, 4) => $step::<2, 4>(w, x, out, stride, at),
                                (2, 2) => $step::<2, 2>(w, x, out, stride, at),
                                (2, _) => $step::<2, 1>(w, x, out, stride, at),
                                (_, $tokens) => $step::<1, $tokens>(w, x, out, stride, at),
                                (_, 4) => $step::<1, 4>(w, x, out, stride, at),
                                (_, 2) => $step::<1, 2>(w, x, out, stride, at),
                                (_, _) => $step::<1, 1>(w, x, out, stride, at),
                            }
                        }
                        t += nt;
                    }
                    p += np;
                }
            }

            /// `NP` panels times `NT` tokens: for each element `k`, the
            /// panels' `16 / $width` vectors each, one broadcast per token.
            #[target_feature(enable = $features)]
            #[allow(clippy::needless_range_loop)] // (t, v) index tokens, vectors and accumulators at once
            fn $step<const NP: usize, const NT: usize>(
                w: &[f32],
                x: &[f32],
                out: &mut [f32],
                stride: usize,
                at: usize,
            ) {
                const PER_PANEL: usize = PANEL_ROWS / $width;
                let cols = x.len() / NT;
                let panel = PANEL_ROWS * cols;
                assert!(w.len() == NP * panel && x.len() == NT * cols);
                assert!(out.len() >= (NT - 1) * stride + at + NP * PANEL_ROWS);
                let mut acc = [[[$setzero(); PER_PANEL]; NP]; NT];
                for k in 0..cols {
                    for p in 0..NP {
                        let ahead = p * panel + (k + PREFETCH_K) * PANEL_ROWS;
                        if ahead < w.len() {
                            // SAFETY: in bounds; a prefetch reads nothing.
                            unsafe { _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().add(ahead).cast()) };
                        }
                    }
                    let mut wv = [[$setzero(); PER_PANEL]; NP];
                    for p in 0..NP {
                        for v in 0..PER_PANEL {
                            // SAFETY: p * panel + k * 16 + (v + 1) * $width <= NP * panel = w.len().
                            wv[p][v] = unsafe {
                                $loadu(w.as_ptr().add(p * panel + k * PANEL_ROWS + v * $width))
                            };
                        }
                    }
                    for t in 0..NT {
                        // SAFETY: t * cols + k < NT * cols = x.len().
                        let xb = $set1(unsafe { *x.get_unchecked(t * cols + k) });
                        for p in 0..NP {
                            for v in 0..PER_PANEL {
                                acc[t][p][v] = $fmadd(wv[p][v], xb, acc[t][p][v]);
                            }
                        }
                    }
                }
                for t in 0..NT {
                    for p in 0..NP {
                        for v in 0..PER_PANEL {
                            let o = t * stride + at + p * PANEL_ROWS + v * $width;
                            // SAFETY: o + $width <= (NT - 1) * stride + at + NP * 16 <= out.len().
                            unsafe { $storeu(out.as_mut_ptr().add(o), acc[t][p][v]) };
                        }
                    }
                }
            }
        };
    }

    // 3 panels × 8 tokens: 24 accumulators, 3 weight vectors and a
    // broadcast of AVX-512's 32 registers; 24 multiply-adds per 11 loads.
    panels_kernel!(
        avx512,
        step512,
        "avx512f",
        __m512,
        16,
        3,
        8,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps
    );

    // 1 panel (2 vectors) × 6 tokens: 12 accumulators, 2 weight vectors
    // and a broadcast of AVX2's 16 registers.
    panels_kernel!(
        avx2,
        step256,
        "avx2,fma",
        __m256,
        8,
        1,
        6,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_storeu_ps
    );
}
