//! 8-bit activations, as llama.cpp's products take them: each token's
//! activations quantized once to Q8_0 blocks, then integer products with
//! the weights' codes. A decode step (and a batch of decoding sequences)
//! takes a dot per token and row, each token's the same bits whichever
//! tokens come with it; a prompt takes tiles of rows decoded once for every
//! token (`prompt_q8.rs`).

use std::sync::Mutex;

use super::split::{RowLayout, joined};
use super::{
    Config, Kind, avx2, avx512, check_matmul, dot_k, dot_vnni, for_row_groups, for_row_tasks,
    for_rows, matmul_with, matvec_with, product, prompt_q8, scalar,
};
use crate::blocks::BlockQ8_0;
use crate::{Error, Format, Isa};

/// [`matvec_with`] with `x` quantized to 8-bit blocks first
/// ([`crate::quantize_q8_0`]), as llama.cpp's decode does: for the block
/// formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) the products
/// are then integer multiply-adds, about
/// twice as fast, but the result is `W·x̃` for the quantized `x̃`: each
/// activation moves by up to 1/254 of its block's largest magnitude (plus
/// the f16 rounding of the block's scale). Other formats compute exactly
/// what [`matvec_with`] does.
pub fn matvec_q8_with(
    config: &Config,
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    matmul_q8_with(config, format, weights, rows, cols, 1, x, y)
}

/// `y[t] = W·x̃[t]` for `t` in `0..n_tokens`, each token quantized to 8-bit
/// blocks first (`x` is `n_tokens × cols`, `y` is `n_tokens × rows`,
/// row-major). Up to [`DOT_MAX_TOKENS`] tokens (a decode step, a batch of
/// decoding sequences), each row's weights are read once for all tokens and
/// every token's products are exactly those [`matvec_q8_with`] computes for
/// it alone (the same quantized activations and the same sums), so a
/// sequence gets the same results in a batch. More tokens (a prompt) are a
/// tiled integer matrix product (`prompt_q8.rs`) where
/// [`Isa::integer_prompts`] says so, the same `W·x̃` summed in another
/// order, and otherwise [`matmul_with`]'s exact products. Formats without
/// integer kernels (F32, F16, BF16) compute exactly what [`matmul_with`]
/// does.
#[allow(clippy::too_many_arguments)] // the matrix, its shape, the tokens: none is optional
pub fn matmul_q8_with(
    config: &Config,
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    n_tokens: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    let weights = (format, RowLayout::Blocks, weights);
    matmul_q8_laid_out_with(config, weights, (rows, cols, n_tokens), x, y)
}

/// [`matmul_q8_with`] of `weights` in `format` and either [`RowLayout`]
/// (`rows × cols`, times `n_tokens` tokens): Q8_0, Q4_0, Q4_1 or Q5_0 rows split at
/// load ([`RowLayout::Split`], [`crate::split_rows`]) give the results
/// their blocks give, bit for bit. Only the AVX-512 VNNI dot reads split
/// rows as they are; elsewhere they are joined back into blocks first (a
/// prompt on an instruction set without integer prompts joins the whole
/// matrix). `Err` for split rows of another format.
pub fn matmul_q8_laid_out_with(
    config: &Config,
    (format, layout, weights): (Format, RowLayout, &[u8]),
    (rows, cols, n_tokens): (usize, usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    layout.check(format)?;
    if n_tokens > DOT_MAX_TOKENS {
        let codes = prompt_q8::Codes::of(format).filter(|_| config.isa.integer_prompts());
        return match (codes, layout) {
            (Some(codes), _) => {
                let weights = (format, codes, layout, weights);
                matmul_q8_tiled(config, weights, rows, cols, n_tokens, x, y)
            }
            (None, RowLayout::Blocks) => {
                matmul_with(config, format, weights, rows, cols, n_tokens, x, y)
            }
            (None, RowLayout::Split) => {
                let row_bytes = check_matmul(format, weights, (rows, cols, n_tokens), x, y)?;
                let blocks = joined(format, weights, row_bytes);
                matmul_with(config, format, &blocks, rows, cols, n_tokens, x, y)
            }
        };
    }
    let weights = (format, layout, weights);
    matmul_q8_dots_laid_out_with(config, weights, (rows, cols, n_tokens), x, y)
}

/// [`matmul_q8_with`]'s products of up to [`DOT_MAX_TOKENS`] tokens, for
/// any number of tokens: each token's are exactly those
/// [`matvec_q8_with`] computes for it alone. For a step of several
/// sequences of a few tokens each, so that each sequence's results are
/// those of a step of it alone, however many run beside it.
#[allow(clippy::too_many_arguments)] // the matrix, its shape, the tokens: none is optional
pub fn matmul_q8_dots_with(
    config: &Config,
    format: Format,
    weights: &[u8],
    rows: usize,
    cols: usize,
    n_tokens: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    let weights = (format, RowLayout::Blocks, weights);
    matmul_q8_dots_laid_out_with(config, weights, (rows, cols, n_tokens), x, y)
}

/// [`matmul_q8_dots_with`] of `weights` in either [`RowLayout`], as
/// [`matmul_q8_laid_out_with`] takes them: split rows give the results
/// their blocks give, bit for bit.
pub fn matmul_q8_dots_laid_out_with(
    config: &Config,
    (format, layout, weights): (Format, RowLayout, &[u8]),
    (rows, cols, n_tokens): (usize, usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    layout.check(format)?;
    if !Q8_FORMATS.contains(&format) {
        return match n_tokens {
            1 => matvec_with(config, format, weights, rows, cols, x, y),
            _ => matmul_with(config, format, weights, rows, cols, n_tokens, x, y),
        };
    }
    let row_bytes = check_matmul(format, weights, (rows, cols, n_tokens), x, y)?;
    let isa = config.isa;
    let quantized = Quantized::new(isa, format, x, cols, n_tokens)?;
    let tokens = quantized.tokens();
    let vnni = isa.0 == Kind::Avx512Vnni && dot_vnni::takes(format);
    let dot = |row: &[u8], out: &mut [f32]| {
        // Split rows joined for the other instruction sets' dots.
        let (row, layout) = match layout {
            RowLayout::Split if !vnni => (&joined(format, row, row_bytes)[..], RowLayout::Blocks),
            _ => (row, layout),
        };
        // With VNNI, the row's codes decoded once for each group of
        // tokens; each token's sum is the same as alone.
        let mut done = 0;
        if vnni {
            for (ys, xs) in out
                .chunks_exact_mut(DOT_GROUP)
                .zip(tokens.chunks_exact(DOT_GROUP))
            {
                let xs: [&Q8Activations; DOT_GROUP] = std::array::from_fn(|t| &xs[t]);
                ys.copy_from_slice(&dot_vnni::dot_laid_out((format, layout), [row], xs)[0]);
                done += DOT_GROUP;
            }
        }
        for (y, x) in out[done..].iter_mut().zip(&tokens[done..]) {
            *y = match layout {
                RowLayout::Blocks => dot_row_q8(isa, format, row, x),
                RowLayout::Split => dot_vnni::dot_laid_out((format, layout), [row], [x])[0][0],
            };
        }
    };
    if n_tokens == 1 {
        // One token: rows in groups whose activations are read once for
        // the group; each row's sum is the same as alone.
        for_row_groups(
            config,
            weights,
            (row_bytes, ROW_GROUP),
            1,
            y,
            &|rows, out| token_rows(isa, (format, layout), &tokens[0], (rows, row_bytes), out),
        );
        return Ok(());
    }
    // By row, then transposed into `y`'s token-major order.
    let mut by_row = vec![0.0f32; y.len()];
    for_rows(config, weights, row_bytes, n_tokens, &mut by_row, &dot);
    for (r, ys) in by_row.chunks_exact(n_tokens).enumerate() {
        for (t, &v) in ys.iter().enumerate() {
            y[t * rows + r] = v;
        }
    }
    Ok(())
}

/// Rows of a matrix that a single token's dots take together
/// (`dot_row_group_q8`): each block of activations is loaded and converted
/// once for all of them, and their sums are independent chains. Measured on
/// a 2-core AMD EPYC (Zen 4), a row of 576 columns (18 blocks) spent more
/// in what every row pays once (the VNNI kernel's gather of its scales, the
/// reductions, the calls) than in its blocks.
pub(super) const ROW_GROUP: usize = 4;

/// Tokens whose dots with a row the VNNI kernel takes together, decoding the
/// row's codes once for all of them: a batch's decode step or a step of
/// several short sequences reads each weight once per group, not per token.
const DOT_GROUP: usize = 4;

/// The most tokens whose 8-bit products [`matmul_q8_with`] computes as a dot
/// per token and row, each token's exactly as alone: a decode step and a
/// batch of decoding sequences. Longer steps (a prompt) are tiled products,
/// which decode a tile of weights once for every token and so run faster.
pub const DOT_MAX_TOKENS: usize = 16;

/// [`matmul_q8_with`] of a prompt as a tiled integer product: activations
/// quantized once, each tile of weight rows decoded to codes once and
/// multiplied by every token.
#[allow(clippy::too_many_arguments)] // the matrix, its shape, the tokens: none is optional
fn matmul_q8_tiled(
    config: &Config,
    (format, codes, layout, weights): (Format, prompt_q8::Codes, RowLayout, &[u8]),
    rows: usize,
    cols: usize,
    n_tokens: usize,
    x: &[f32],
    y: &mut [f32],
) -> Result<(), Error> {
    let row_bytes = check_matmul(format, weights, (rows, cols, n_tokens), x, y)?;
    if cols == 0 {
        y.fill(0.0);
        return Ok(());
    }
    let isa = config.isa;
    // Each group of tokens quantized by a task of its own: on one thread,
    // this took as long as a third of the products.
    let mut acts = prompt_q8::ActLanes::zeros(cols, n_tokens);
    let groups: Vec<Mutex<prompt_q8::Group>> = acts.groups_mut().map(Mutex::new).collect();
    config.parallel.run(groups.len(), &|g| {
        let mut group = groups[g].lock().unwrap_or_else(|e| e.into_inner());
        let tokens = prompt_q8::LANES.min(n_tokens - g * prompt_q8::LANES);
        let x = &x[g * prompt_q8::LANES * cols..][..tokens * cols];
        match isa.0 {
            Kind::Avx512Vnni => avx512::pack_group(&mut group, x),
            _ => group.pack(x),
        }
    });
    drop(groups);
    let align = prompt_q8::TILE_ROWS;
    for_row_tasks(
        config,
        (rows, row_bytes, align),
        n_tokens,
        y,
        &|first, n_rows, out| {
            let mut tile = prompt_q8::CodeTile::new(cols, codes);
            for tile_first in (0..n_rows).step_by(align) {
                let tile_rows = align.min(n_rows - tile_first);
                let bytes = &weights[(first + tile_first) * row_bytes..][..tile_rows * row_bytes];
                // Split rows joined a tile at a time: a few kilobytes,
                // decoded once for every token.
                let tile_blocks;
                let bytes = match layout {
                    RowLayout::Blocks => bytes,
                    RowLayout::Split => {
                        tile_blocks = joined(format, bytes, row_bytes);
                        &tile_blocks
                    }
                };
                let at = (n_rows, tile_first, tile_rows);
                match isa.0 {
                    Kind::Avx512Vnni => {
                        avx512::fill_tile(&mut tile, format, bytes, row_bytes);
                        avx512::tile_products(&tile, &acts, out, at);
                    }
                    _ => {
                        tile.fill(format, bytes, row_bytes);
                        prompt_q8::tile_products(&tile, &acts, out, at);
                    }
                }
            }
        },
    );
    Ok(())
}

/// The formats `matmul_q8_with` has integer kernels for.
pub(super) const Q8_FORMATS: [Format; 8] = [
    Format::Q8_0,
    Format::Q4_0,
    Format::Q4_1,
    Format::Q5_0,
    Format::Q5_1,
    Format::Q4_K,
    Format::Q5_K,
    Format::Q6_K,
];

/// `x` as Q8_0 blocks, and per block its scale and the sum of its values.
pub(super) struct Q8Activations<'a> {
    pub(super) blocks: &'a [BlockQ8_0],
    pub(super) scales: &'a [[f32; 2]],
    /// The blocks' codes in `dot_vnni`'s pair order for the weights'
    /// format, for `Kind::Avx512Vnni` (empty otherwise).
    pub(super) pairs: &'a [u8],
    /// Where the VNNI dot's lanes start for Q8_0 weights
    /// (`dot_vnni::pair_offsets`; empty otherwise).
    pub(super) offsets: &'a [i32],
}

/// Tokens quantized to 8-bit blocks for `format`'s dots: what each
/// [`Q8Activations`] of [`Quantized::tokens`] borrows.
pub(super) struct Quantized {
    blocks: Vec<u8>,
    scales: Vec<[f32; 2]>,
    pairs: Vec<u8>,
    offsets: Vec<i32>,
    n_tokens: usize,
}

impl Quantized {
    /// The `n_tokens` tokens of `x` (`cols` each, whole blocks) quantized
    /// once ([`crate::quantize_q8_0`]), with what `isa`'s dot with
    /// `format`'s rows reads besides.
    pub(super) fn new(
        isa: Isa,
        format: Format,
        x: &[f32],
        cols: usize,
        n_tokens: usize,
    ) -> Result<Quantized, Error> {
        let block_bytes = Format::Q8_0.row_bytes(cols)?;
        let mut bytes = vec![0u8; product("x (bytes)", n_tokens, block_bytes)?];
        for (x, xq) in x
            .chunks_exact(cols.max(1))
            .zip(bytes.chunks_exact_mut(block_bytes.max(1)))
        {
            crate::quantize_q8_0(x, xq)?;
        }
        // Per block, the scale as f32 (converted once, not once per row)
        // and the sum of the dequantized activations, which Q4_1's and
        // Q5_1's minimums multiply.
        let blocks: &[BlockQ8_0] = crate::blocks::blocks(&bytes);
        let scales: Vec<[f32; 2]> = blocks
            .iter()
            .map(|b| {
                let d = b.d.to_f32();
                let sum: i32 = b.qs.iter().map(|&q| i32::from(q as i8)).sum();
                [d, d * sum as f32]
            })
            .collect();
        let n_blocks = block_bytes / size_of::<BlockQ8_0>();
        // The codes again in the order the VNNI dot reads them.
        let pairs_len = match isa.0 {
            Kind::Avx512Vnni if dot_vnni::takes(format) => {
                dot_vnni::pair_codes_len(format, n_blocks)
            }
            _ => 0,
        };
        let mut pairs = vec![0u8; n_tokens * pairs_len];
        if pairs_len > 0 {
            for (xq, out) in blocks
                .chunks_exact(n_blocks.max(1))
                .zip(pairs.chunks_exact_mut(pairs_len))
            {
                dot_vnni::pair_codes(format, xq, out);
            }
        }
        let offsets = dot_vnni::pair_offsets(format, &pairs);
        Ok(Quantized {
            blocks: bytes,
            scales,
            pairs,
            offsets,
            n_tokens,
        })
    }

    /// Each token's activations.
    pub(super) fn tokens(&self) -> Vec<Q8Activations<'_>> {
        let blocks: &[BlockQ8_0] = crate::blocks::blocks(&self.blocks);
        let per_token = |len: usize| len / self.n_tokens.max(1);
        let (n_blocks, pairs_len) = (per_token(blocks.len()), per_token(self.pairs.len()));
        let offsets_len = per_token(self.offsets.len());
        (0..self.n_tokens)
            .map(|t| Q8Activations {
                blocks: &blocks[t * n_blocks..][..n_blocks],
                scales: &self.scales[t * n_blocks..][..n_blocks],
                pairs: &self.pairs[t * pairs_len..][..pairs_len],
                offsets: &self.offsets[t * offsets_len..][..offsets_len],
            })
            .collect()
    }
}

/// One token `x` times consecutive `rows` of `row_bytes` each (one of
/// [`Q8_FORMATS`], in `layout`) into `out`, a result per row: [`ROW_GROUP`]
/// rows at a time, each row's sum the same as alone.
pub(super) fn token_rows(
    isa: Isa,
    (format, layout): (Format, RowLayout),
    x: &Q8Activations,
    (rows, row_bytes): (&[u8], usize),
    out: &mut [f32],
) {
    let whole = out.len() / ROW_GROUP * ROW_GROUP;
    if layout == RowLayout::Split {
        if isa.0 != Kind::Avx512Vnni {
            // Joined for the other instruction sets' dots.
            let blocks = joined(format, rows, row_bytes);
            let layout = (format, RowLayout::Blocks);
            return token_rows(isa, layout, x, (&blocks, row_bytes), out);
        }
        let groups = rows.chunks_exact(ROW_GROUP * row_bytes);
        for (rows, ys) in groups.zip(out.chunks_exact_mut(ROW_GROUP)) {
            let rows: [&[u8]; ROW_GROUP] =
                std::array::from_fn(|r| &rows[r * row_bytes..][..row_bytes]);
            let y = dot_vnni::dot_laid_out((format, RowLayout::Split), rows, [x]);
            ys.copy_from_slice(&y.map(|[y]| y));
        }
        let rest = rows[whole * row_bytes..].chunks_exact(row_bytes);
        for (row, y) in rest.zip(&mut out[whole..]) {
            *y = dot_vnni::dot_laid_out((format, RowLayout::Split), [row], [x])[0][0];
        }
        return;
    }
    let groups = rows.chunks_exact(ROW_GROUP * row_bytes);
    for (rows, ys) in groups.zip(out.chunks_exact_mut(ROW_GROUP)) {
        let rows: [&[u8]; ROW_GROUP] = std::array::from_fn(|r| &rows[r * row_bytes..][..row_bytes]);
        ys.copy_from_slice(&dot_row_group_q8(isa, format, rows, x));
    }
    let rest = rows[whole * row_bytes..].chunks_exact(row_bytes);
    for (row, y) in rest.zip(&mut out[whole..]) {
        *y = dot_row_q8(isa, format, row, x);
    }
}

/// [`ROW_GROUP`] rows in one of [`Q8_FORMATS`] times one token's quantized
/// activations: each row's result is [`dot_row_q8`]'s.
fn dot_row_group_q8(
    isa: Isa,
    format: Format,
    rows: [&[u8]; ROW_GROUP],
    x: &Q8Activations,
) -> [f32; ROW_GROUP] {
    match isa.0 {
        Kind::Scalar => rows.map(|row| scalar::dot_row_q8(format, row, x)),
        _ if is_k_quant(format) => dot_k::dot_rows_q8(format, rows, x),
        Kind::Avx2 | Kind::Avx512 => avx2::dot_row_group_q8(format, rows, x),
        Kind::Avx512Vnni => dot_vnni::dot_row_group_q8(format, rows, x),
    }
}

/// One row in one of [`Q8_FORMATS`] times quantized activations with
/// as many blocks.
fn dot_row_q8(isa: Isa, format: Format, row: &[u8], x: &Q8Activations) -> f32 {
    match isa.0 {
        Kind::Scalar => scalar::dot_row_q8(format, row, x),
        _ if is_k_quant(format) => dot_k::dot_rows_q8(format, [row], x)[0],
        Kind::Avx2 | Kind::Avx512 => avx2::dot_row_q8(format, row, x),
        Kind::Avx512Vnni => dot_vnni::dot_row_q8(format, row, x),
    }
}

/// Q4_K, Q5_K and Q6_K: super-blocks of 256 with sub-blocks, whose dots
/// are `dot_k.rs`'s on every vector instruction set (the VNNI dot takes
/// blocks of 32 in pairs).
pub(super) fn is_k_quant(format: Format) -> bool {
    matches!(format, Format::Q4_K | Format::Q5_K | Format::Q6_K)
}
