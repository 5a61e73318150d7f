//! Several matrices times one token, as one product: the projections of a
//! layer that read the same activations (a transformer's query, key and
//! value; its gate and up projections).
//!
//! Apart, each product quantizes the token again and hands its rows to the
//! workers once; a decode step of SmolLM2 makes 211 products, and each
//! hand-off costs a few microseconds of one thread's work while the other
//! waits. Here the token is quantized once (once per block format among
//! the matrices) and the rows of every matrix are one job. Measured on a
//! 2-core AMD EPYC (Zen 4, AVX-512 VNNI) with SmolLM2's Q4_1 shapes, a
//! layer's query, key and value took 29–34 µs as three products and 25 µs
//! as one job; its gate and up 74 µs as two and 61 µs as one.

use std::sync::Mutex;

use super::q8::{Q8_FORMATS, Quantized, ROW_GROUP, token_rows};
use super::split::RowLayout;
use super::{Config, check_matvec, row_groups_task, rows_per_task};
use crate::{Error, Format, matvec_q8_with};

/// One matrix of [`matvec_q8_stacked_with`]: `rows` rows of its `format`'s
/// blocks.
#[derive(Debug, Clone, Copy)]
pub struct Stacked<'a> {
    /// The block format of `weights`.
    pub format: Format,
    /// The rows' blocks, row after row.
    pub weights: &'a [u8],
    /// How many rows `weights` holds.
    pub rows: usize,
    /// The order of each row's bytes ([`RowLayout::Split`]: Q8_0 only).
    pub layout: RowLayout,
}

/// [`matvec_q8_with`] for every matrix of `matrices` (each of `cols`
/// columns) times the same `x`, into the matching output of `ys` (one per
/// matrix, as long as its rows). Each matrix's results are exactly those
/// [`matvec_q8_with`] gives it alone; `x` is quantized once per block
/// format, and the rows of all the matrices are one job for
/// `config.parallel`. A matrix in a format without 8-bit kernels takes
/// [`matvec_q8_with`] on its own.
pub fn matvec_q8_stacked_with(
    config: &Config,
    matrices: &[Stacked],
    cols: usize,
    x: &[f32],
    ys: &mut [&mut [f32]],
) -> Result<(), Error> {
    if ys.len() != matrices.len() {
        return Err(Error::Length {
            what: "ys (outputs)",
            expected: matrices.len(),
            got: ys.len(),
        });
    }
    let mut row_bytes = Vec::with_capacity(matrices.len());
    for (m, y) in matrices.iter().zip(ys.iter()) {
        m.layout.check(m.format)?;
        row_bytes.push(check_matvec(m.format, m.weights, m.rows, cols, x, y)?);
    }
    // Matrices without rows or columns, and formats without 8-bit
    // kernels, go on their own.
    let (together, apart): (Vec<usize>, Vec<usize>) = (0..matrices.len()).partition(|&i| {
        Q8_FORMATS.contains(&matrices[i].format) && row_bytes[i] > 0 && matrices[i].rows > 0
    });
    for &i in &apart {
        let m = &matrices[i];
        matvec_q8_with(config, m.format, m.weights, m.rows, cols, x, ys[i])?;
    }
    // The token once per format among the others.
    let mut formats: Vec<Format> = vec![];
    for &i in &together {
        if !formats.contains(&matrices[i].format) {
            formats.push(matrices[i].format);
        }
    }
    let quantized = formats
        .iter()
        .map(|&f| Quantized::new(config.isa, f, x, cols, 1))
        .collect::<Result<Vec<_>, Error>>()?;
    let tokens: Vec<_> = quantized.iter().map(Quantized::tokens).collect();
    // Tasks of whole row groups, each matrix cut as it would be alone.
    let mut tasks: Vec<(usize, usize)> = vec![];
    let mut parts: Vec<Mutex<&mut [f32]>> = vec![];
    for (i, out) in ys.iter_mut().enumerate() {
        if !together.contains(&i) {
            continue;
        }
        let per_task = rows_per_task(config, matrices[i].rows, row_bytes[i], ROW_GROUP);
        for (k, part) in out.chunks_mut(per_task).enumerate() {
            tasks.push((i, k * per_task));
            parts.push(Mutex::new(part));
        }
    }
    let isa = config.isa;
    config.parallel.run(tasks.len(), &|t| {
        let (i, first) = tasks[t];
        let (m, row_bytes) = (&matrices[i], row_bytes[i]);
        let x = &tokens[formats
            .iter()
            .position(|&f| f == m.format)
            .expect("quantized")][0];
        let mut part = parts[t].lock().unwrap_or_else(|e| e.into_inner());
        row_groups_task(
            m.weights,
            (row_bytes, ROW_GROUP),
            1,
            first,
            &mut part,
            &|rows, out| token_rows(isa, (m.format, m.layout), x, (rows, row_bytes), out),
        );
    });
    Ok(())
}
