//! A prompt's products with 8-bit activations: [`crate::matmul_q8_with`]
//! for more tokens than a batch of decoding sequences, as a tiled integer
//! matrix product.
//!
//! Each token is quantized once to Q8_0 blocks (the codes and scales
//! [`crate::quantize_q8_0`] gives), and each tile of weight rows is decoded
//! once to 8-bit codes with a scale and a minimum per sub-block: `w = d·q +
//! m`, `q` in `-128..128`. Every format's codes fit (Q4_0's are `nibble -
//! 8`, Q6_K's `code - 32`, Q4_1's and the K-quants' minimums go to `m`), so
//! one inner kernel serves them all. Its output for row `r` and token `t` is
//! the chain, over the row's sub-blocks `s` in order,
//!
//! ```text
//! acc = fma(S as f32, d[r,s]·dx[t,s], acc)      S = Σ q[r,k]·xq[t,k] over s (exact, i32)
//! acc = fma(m[r,s], dx[t,s]·Σ xq[t,k], acc)     only for formats with minimums
//! ```
//!
//! so the result is `W·x̃` for the quantized `x̃`, and every instruction set
//! computes the same bits: the integer sums are exact in any order, and the
//! f32 steps are the same operations in the same order. The scalar code here
//! is the reference the vector kernels are tested against.
//!
//! The vector kernel (`avx512.rs`, AVX-512 VNNI) holds 16 tokens in the
//! lanes of a vector, the layout of [`TokenLanes`](super::TokenLanes) with
//! four consecutive codes per 32-bit lane: one `vpdpbusd` multiplies four
//! codes of one row, broadcast, by those of 16 tokens and adds them to 16
//! integer sums. `vpdpbusd` multiplies unsigned by signed bytes, so the
//! activation codes are stored plus 128 and each sub-block's integer sum
//! starts at `-128·Σq` (exact) to take that back.

use crate::Format;
use crate::blocks::{
    Block, BlockQ4_0, BlockQ4_1, BlockQ4_K, BlockQ5_0, BlockQ5_1, BlockQ5_K, BlockQ6_K, BlockQ8_0,
    F16, blocks,
};
use crate::dequantize::k_scale_min;

/// Rows of a weight tile, all multiplied at once by the inner kernel.
pub(super) const TILE_ROWS: usize = 8;

/// Tokens per group: the 16 lanes of an AVX-512 vector of i32 or f32.
pub(super) const LANES: usize = 16;

/// How a format's weights become codes: sub-blocks of `sub` elements with
/// one scale each, and whether they also have a minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Codes {
    pub sub: usize,
    pub min: bool,
}

impl Codes {
    /// The codes of `format`, or `None` for the formats without integer
    /// prompt products (F32, F16, BF16).
    pub(super) fn of(format: Format) -> Option<Codes> {
        let (sub, min) = match format {
            Format::Q8_0 | Format::Q4_0 | Format::Q5_0 => (32, false),
            Format::Q4_1 | Format::Q5_1 | Format::Q4_K | Format::Q5_K => (32, true),
            Format::Q6_K => (16, false),
            Format::F32 | Format::F16 | Format::BF16 => return None,
        };
        Some(Codes { sub, min })
    }
}

/// The tokens of a prompt quantized to 8 bits, in groups of [`LANES`].
pub(super) struct ActLanes {
    /// `(g * cols + k / 4 * 4) * LANES + lane * 4 + k % 4`: code `k` plus 128
    /// of token `g * LANES + lane` (128, a zero code, past the last token).
    pub xu: Vec<u8>,
    /// `(g * cols / 32 + b) * LANES + lane`: block `b`'s scale.
    pub dx: Vec<f32>,
    /// Same index: the scale times the sum of the block's codes (the sum of
    /// its quantized values), which minimums multiply.
    pub sx: Vec<f32>,
    pub cols: usize,
    pub n_tokens: usize,
}

impl ActLanes {
    /// Room for `n_tokens` tokens of `cols` (a multiple of 32), every code
    /// zero; [`Group::pack`] fills each group.
    pub(super) fn zeros(cols: usize, n_tokens: usize) -> ActLanes {
        let n_groups = n_tokens.div_ceil(LANES);
        let n_blocks = cols / 32;
        ActLanes {
            xu: vec![128; n_groups * cols * LANES],
            dx: vec![0.0; n_groups * n_blocks * LANES],
            sx: vec![0.0; n_groups * n_blocks * LANES],
            cols,
            n_tokens,
        }
    }

    /// Each group's share, to fill apart (and in parallel).
    pub(super) fn groups_mut(&mut self) -> impl Iterator<Item = Group<'_>> {
        let (cols, n_blocks) = (self.cols, self.cols / 32);
        self.xu
            .chunks_mut(cols * LANES)
            .zip(self.dx.chunks_mut(n_blocks * LANES))
            .zip(self.sx.chunks_mut(n_blocks * LANES))
            .map(move |((xu, dx), sx)| Group { xu, dx, sx, cols })
    }

    pub(super) fn n_groups(&self) -> usize {
        self.n_tokens.div_ceil(LANES)
    }
}

/// One group of [`LANES`] tokens of an [`ActLanes`].
pub(super) struct Group<'a> {
    xu: &'a mut [u8],
    dx: &'a mut [f32],
    sx: &'a mut [f32],
    cols: usize,
}

impl Group<'_> {
    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// The codes plus 128, the scales and the scaled sums, as [`ActLanes`]
    /// lays them out for one group.
    pub(super) fn parts(&mut self) -> (&mut [u8], &mut [f32], &mut [f32]) {
        (self.xu, self.dx, self.sx)
    }

    /// `x` (at most [`LANES`] tokens of `cols`) quantized as
    /// [`crate::quantize_q8_0`] does, into the group's lanes. Inlined into
    /// each instruction set's caller, to be vectorized for it.
    #[inline(always)]
    pub(super) fn pack(&mut self, x: &[f32]) {
        let cols = self.cols;
        let mut bytes = vec![0u8; cols / 32 * size_of::<BlockQ8_0>()];
        for (lane, x) in x.chunks_exact(cols).enumerate() {
            crate::activations::quantize_blocks(x, &mut bytes);
            for (b, block) in blocks::<BlockQ8_0>(&bytes).iter().enumerate() {
                let d = block.d.to_f32();
                let codes = &block.qs;
                self.dx[b * LANES + lane] = d;
                self.sx[b * LANES + lane] =
                    d * codes.iter().map(|&q| i32::from(q as i8)).sum::<i32>() as f32;
                for (i, four) in codes.chunks_exact(4).enumerate() {
                    let at = (32 * b + 4 * i) * LANES + lane * 4;
                    for (u, &q) in self.xu[at..at + 4].iter_mut().zip(four) {
                        *u = q ^ 0x80; // the i8 code plus 128, as u8
                    }
                }
            }
        }
    }
}

/// [`TILE_ROWS`] weight rows decoded to codes (rows past the matrix's last
/// are zeros and give zeros).
pub(super) struct CodeTile {
    /// `r * cols + k`.
    pub q: Vec<i8>,
    /// `r * n_sub + s`: the scale, the minimum and `-128·Σq` of sub-block `s`.
    pub d: Vec<f32>,
    pub m: Vec<f32>,
    pub corr: Vec<i32>,
    pub cols: usize,
    pub codes: Codes,
}

impl CodeTile {
    pub(super) fn new(cols: usize, codes: Codes) -> CodeTile {
        let n_sub = cols / codes.sub;
        CodeTile {
            q: vec![0; TILE_ROWS * cols],
            d: vec![0.0; TILE_ROWS * n_sub],
            m: vec![0.0; TILE_ROWS * n_sub],
            corr: vec![0; TILE_ROWS * n_sub],
            cols,
            codes,
        }
    }

    pub(super) fn n_sub(&self) -> usize {
        self.cols / self.codes.sub
    }

    /// Decodes `rows` (at most [`TILE_ROWS`] whole rows of `format`) into
    /// the tile, and zeros in the rows after them. Inlined into each
    /// instruction set's caller, to be vectorized for it.
    #[inline(always)]
    pub(super) fn fill(&mut self, format: Format, rows: &[u8], row_bytes: usize) {
        let (cols, n_sub, sub) = (self.cols, self.n_sub(), self.codes.sub);
        let n_rows = rows.len() / row_bytes;
        for r in 0..TILE_ROWS {
            let q = &mut self.q[r * cols..][..cols];
            let (d, m) = (
                &mut self.d[r * n_sub..][..n_sub],
                &mut self.m[r * n_sub..][..n_sub],
            );
            if r < n_rows {
                decode_row(format, &rows[r * row_bytes..][..row_bytes], q, d, m);
            } else {
                q.fill(0);
                d.fill(0.0);
                m.fill(0.0);
            }
            for (corr, q) in self.corr[r * n_sub..][..n_sub]
                .iter_mut()
                .zip(q.chunks_exact(sub))
            {
                *corr = -128 * q.iter().map(|&q| i32::from(q)).sum::<i32>();
            }
        }
    }
}

/// One row of `format` as codes `q` and, per sub-block, scales `d` and
/// minimums `m` (zero for formats without), with `w = d·q + m` for every
/// weight as [`crate::dequantize`] decodes it (up to its rounding of `d·q + m`).
/// One loop per format, so each is compiled (and vectorized) for its own
/// block layout.
#[inline(always)]
fn decode_row(format: Format, row: &[u8], q: &mut [i8], d: &mut [f32], m: &mut [f32]) {
    match format {
        Format::Q8_0 => each_block(row, q, d, m, |b: &BlockQ8_0, q, d, m| {
            (d[0], m[0]) = (b.d.to_f32(), 0.0);
            for (q, &c) in q.iter_mut().zip(&b.qs) {
                *q = c as i8;
            }
        }),
        Format::Q4_0 => each_block(row, q, d, m, |b: &BlockQ4_0, q, d, m| {
            (d[0], m[0]) = (b.d.to_f32(), 0.0);
            nibbles(&b.qs, q, 8);
        }),
        Format::Q4_1 => each_block(row, q, d, m, |b: &BlockQ4_1, q, d, m| {
            (d[0], m[0]) = (b.d.to_f32(), b.m.to_f32());
            nibbles(&b.qs, q, 0);
        }),
        Format::Q5_0 => each_block(row, q, d, m, |b: &BlockQ5_0, q, d, m| {
            (d[0], m[0]) = (b.d.to_f32(), 0.0);
            five_bit_codes(&b.qs, &b.qh, q, 16);
        }),
        Format::Q5_1 => each_block(row, q, d, m, |b: &BlockQ5_1, q, d, m| {
            (d[0], m[0]) = (b.d.to_f32(), b.m.to_f32());
            five_bit_codes(&b.qs, &b.qh, q, 0);
        }),
        Format::Q4_K => each_block(row, q, d, m, |b: &BlockQ4_K, q, d, m| {
            k_scales((b.d, b.dmin, &b.scales), d, m);
            k_nibbles(&b.qs, q);
        }),
        Format::Q5_K => each_block(row, q, d, m, |b: &BlockQ5_K, q, d, m| {
            k_scales((b.d, b.dmin, &b.scales), d, m);
            k_nibbles(&b.qs, q);
            let qh = &b.qh;
            for (s, q) in q.chunks_exact_mut(32).enumerate() {
                for (q, &h) in q.iter_mut().zip(qh) {
                    *q |= (((h >> s) & 1) << 4) as i8;
                }
            }
        }),
        Format::Q6_K => each_block(row, q, d, m, |b: &BlockQ6_K, q, d, m| {
            let (ql, qh, scales) = (&b.ql, &b.qh, &b.scales);
            let dd = b.d.to_f32();
            for ((d, m), &sc) in d.iter_mut().zip(m.iter_mut()).zip(scales) {
                (*d, *m) = (dd * f32::from(sc as i8), 0.0);
            }
            // `q6_code` a quarter of a half (32 codes) at a time, so each
            // loop is one shift and mask across 32 bytes.
            for (e, q) in q.chunks_exact_mut(32).enumerate() {
                let (h, c) = (e / 4, e % 4);
                let low = &ql[64 * h + 32 * (c % 2)..][..32];
                for ((q, &lo), &hi) in q.iter_mut().zip(low).zip(&qh[32 * h..32 * h + 32]) {
                    let code = (lo >> (4 * (c / 2))) & 0xF | ((hi >> (2 * c)) & 3) << 4;
                    *q = code as i8 - 32;
                }
            }
        }),
        Format::F32 | Format::F16 | Format::BF16 => {
            unreachable!("Codes::of has no codes for {format:?}")
        }
    }
}

/// `decode(block, q, d, m)` for each block of the row and its share of the
/// codes, scales and minimums.
#[inline(always)]
fn each_block<B: Block>(
    row: &[u8],
    q: &mut [i8],
    d: &mut [f32],
    m: &mut [f32],
    decode: impl Fn(&B, &mut [i8], &mut [f32], &mut [f32]),
) {
    let format = B::FORMAT;
    let per_block = format.block_len() / Codes::of(format).map_or(1, |c| c.sub);
    for ((b, q), (d, m)) in blocks::<B>(row)
        .iter()
        .zip(q.chunks_exact_mut(format.block_len()))
        .zip(
            d.chunks_exact_mut(per_block)
                .zip(m.chunks_exact_mut(per_block)),
        )
    {
        decode(b, q, d, m);
    }
}

/// A 4-bit block's codes minus `zero`: low nibbles first, then high.
#[inline(always)]
fn nibbles(qs: &[u8], q: &mut [i8], zero: i8) {
    let (lo, hi) = q.split_at_mut(16);
    for ((lo, hi), &c) in lo.iter_mut().zip(hi).zip(qs) {
        *lo = (c & 0xF) as i8 - zero;
        *hi = (c >> 4) as i8 - zero;
    }
}

/// A 5-bit block's codes (16 bytes of nibbles `qs` and the fifth bits
/// `qh`) minus `zero`: the nibbles as in [`nibbles`], and bit 4 of eight
/// codes at a time from one byte of `qh` through [`SPREAD`], instead of a
/// shift per code.
#[inline(always)]
fn five_bit_codes(qs: &[u8; 16], qh: &[u8; 4], q: &mut [i8], zero: i8) {
    let mut codes = [0i8; 32];
    nibbles(qs, &mut codes, 0);
    for (eight, &h) in codes.chunks_exact_mut(8).zip(qh) {
        for (c, bit) in eight.iter_mut().zip(SPREAD[usize::from(h)].to_le_bytes()) {
            *c |= bit as i8;
        }
    }
    for (q, c) in q.iter_mut().zip(codes) {
        *q = c - zero;
    }
}

/// For each byte `h`, eight bytes whose byte `i` is bit `i` of `h` moved to
/// bit 4: the fifth bits of eight consecutive codes of a Q5_0/Q5_1 block.
const SPREAD: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut h = 0;
    while h < 256 {
        let mut i = 0;
        while i < 8 {
            table[h] |= (((h >> i) & 1) as u64) << (8 * i + 4);
            i += 1;
        }
        h += 1;
    }
    table
};

/// The low 4 bits of a Q4_K or Q5_K super-block's 256 codes (`k_nibble`
/// of every element): each 32 bytes hold a sub-block in their low nibbles
/// and the next in their high ones.
#[inline(always)]
fn k_nibbles(qs: &[u8], q: &mut [i8]) {
    for (qs, q) in qs.chunks_exact(32).zip(q.chunks_exact_mut(64)) {
        let (lo, hi) = q.split_at_mut(32);
        for ((lo, hi), &c) in lo.iter_mut().zip(hi).zip(qs) {
            *lo = (c & 0xF) as i8;
            *hi = (c >> 4) as i8;
        }
    }
}

/// A Q4_K or Q5_K super-block's 8 sub-block scales `d·sc` and minimums
/// `-dmin·m`.
#[inline(always)]
fn k_scales((dd, dmin, scales): (F16, F16, &[u8; 12]), d: &mut [f32], m: &mut [f32]) {
    let (dd, dmin) = (dd.to_f32(), dmin.to_f32());
    for (s, (d, m)) in d.iter_mut().zip(m.iter_mut()).enumerate() {
        let (sc, mn) = k_scale_min(scales, s);
        (*d, *m) = (dd * f32::from(sc), -(dmin * f32::from(mn)));
    }
}

/// The scalar reference of the inner kernel: for the tile's first `n_rows`
/// rows and every token, `out[t * stride + first + r]` as the module's
/// chain computes it.
pub(super) fn tile_products(
    tile: &CodeTile,
    x: &ActLanes,
    out: &mut [f32],
    (stride, first, n_rows): (usize, usize, usize),
) {
    let (cols, n_sub, sub) = (tile.cols, tile.n_sub(), tile.codes.sub);
    let n_blocks = cols / 32;
    for t in 0..x.n_tokens {
        let (g, lane) = (t / LANES, t % LANES);
        for r in 0..n_rows {
            let mut acc = 0.0f32;
            for s in 0..n_sub {
                let mut sum = tile.corr[r * n_sub + s];
                for k in s * sub..(s + 1) * sub {
                    let xu = x.xu[(g * cols + k / 4 * 4) * LANES + lane * 4 + k % 4];
                    sum += i32::from(tile.q[r * cols + k]) * i32::from(xu);
                }
                let at = (g * n_blocks + s * sub / 32) * LANES + lane;
                acc = (sum as f32).mul_add(tile.d[r * n_sub + s] * x.dx[at], acc);
                if tile.codes.min {
                    acc = tile.m[r * n_sub + s].mul_add(x.sx[at], acc);
                }
            }
            out[t * stride + first + r] = acc;
        }
    }
}
