//! Attention of every query of a row over that row's first keys, the rest
//! padding (an encoder's batch of sentences, BERT's padding mask): the
//! custom call `radix.padded_attention`, whose kernel multiplies each
//! (row, head) as two matrix products on radix-quant's panels, and whose
//! fallback is [`attention`] with a [`padding_mask`](super::padding_mask).
//!
//! In the kernel a head's keys are packed in panels of 16 (the "weights"
//! of the scores `q·kᵀ`) and its values transposed into panels (the weights
//! of `p·v`), so both products run the same multiply-add chains as a linear
//! layer's, and the softmax between them is one pass of vectorized
//! exponentials. In XLA the same attention is a dozen small operations
//! (transposes, two batched dots, four for the softmax), each a dispatch
//! of its own: for one sentence of 16 tokens, that dispatch cost more than
//! the arithmetic.

use std::sync::{LazyLock, Mutex};

use radix_quant::{Config, Isa, PANEL_ROWS, Serial, matmul_panels_f32_with};

use crate::custom_call::{Attrs, CustomCall, Kernel};
use crate::nn::attention;
use crate::nn::has_axes;
use crate::nn::tags::{B, H, HD, K, Q, QKV, S};
use crate::nn::vector_math::{exp, vectorized};
use crate::tensor::fail;
use crate::{DType, Shape, Tensor};

/// `q [b, q, h, hd] f32`, `k` and `v` `[b, k, kv, hd] f32` and each row's
/// count of valid keys `[b] i32`: `[b, q, h, hd] f32`. Or, for
/// self-attention, the queries, keys and values packed in one operand
/// `qkv [b, s, 3, h, hd] f32` (as one product of a layer's three
/// projections writes them) and the lengths: `[b, s, h, hd] f32`.
static PADDED_ATTENTION: LazyLock<CustomCall> = LazyLock::new(|| {
    CustomCall::builder("radix.padded_attention", 1, shape_rule, kernel)
        .fallback(|x, _| match x {
            [qkv, lengths] => {
                let (q, k, v) = unpack(*qkv);
                vec![masked(q, k, v, *lengths).rename(Q, S)]
            }
            _ => vec![masked(x[0], x[1], x[2], x[3])],
        })
        .derivative(|x, _, g, _| {
            // The fallback's: the kernel computes the same function.
            if let [qkv, lengths] = x {
                let f = |qkv: &Tensor, lengths: &Tensor| {
                    let (q, k, v) = unpack(*qkv);
                    masked(q, k, v, *lengths).rename(Q, S)
                };
                let (_, dqkv) = crate::vjp(f, qkv, lengths, &g[0]);
                return vec![dqkv, Tensor::zeros(lengths.shape())];
            }
            let (q, k, v, lengths) = (x[0], x[1], x[2], x[3]);
            let f = |qkv: &(Tensor, Tensor, Tensor), lengths: &Tensor| {
                masked(qkv.0, qkv.1, qkv.2, *lengths)
            };
            let (_, (dq, dk, dv)) = crate::vjp(f, &(q, k, v), &lengths, &g[0]);
            vec![dq, dk, dv, Tensor::zeros(lengths.shape())]
        })
        .register()
        .expect("radix.padded_attention is declared once")
});

/// Attention of queries `q` `(b, q, h, hd)` over keys and values `(b, k,
/// h, hd)` where row `b` has `lengths[b]` valid keys, the first ones (the
/// rest is padding, as a batch of sentences padded at their ends): every
/// query of a row reads that row's valid keys, with the scores scaled by
/// `1 / sqrt(hd)`. `lengths` is tagged `(b)`, any integer dtype; a row with
/// no valid key gets the mean of all values, as [`attention`] gives a query
/// that may read no key. The result has `q`'s shape.
///
/// On the CPU plugin this is one kernel; elsewhere it is [`attention`] with
/// the keys past each row's length masked.
#[track_caller]
pub fn padded_attention(q: Tensor, k: Tensor, v: Tensor, lengths: Tensor) -> Tensor {
    let (qs, ks, ls) = (q.shape(), k.shape(), lengths.shape());
    let lengths_ok = has_axes(ls, &[B]) && ls.dtype().is_integer();
    if !has_axes(qs, &[B, Q, H, HD]) || !has_axes(ks, &[B, K, H, HD]) || !lengths_ok {
        let msg = format!(
            "wants q (b, q, h, hd), keys and values (b, k, h, hd) and integer lengths (b), got {qs}, {ks} and {ls}"
        );
        return fail("padded_attention", msg, &[q, k, v, lengths], qs);
    }
    let q = q.transpose([B, Q, H, HD]);
    let (k, v) = (k.transpose([B, K, H, HD]), v.transpose([B, K, H, HD]));
    PADDED_ATTENTION.call(&[q, k, v, lengths.convert(DType::I32)], &Attrs::new())[0]
}

/// [`padded_attention`] of a sequence over itself, with its queries, keys
/// and values packed in one tensor `qkv` `(b, s, qkv, h, hd)`, the axis
/// [`QKV`](super::tags::QKV) of size 3 holding the query, the key and the value in that
/// order (what one product with the three projections' weights stacked
/// gives): the result is `(b, s, h, hd)`. On the CPU plugin the kernel
/// reads the three where the product wrote them, so the projections take
/// one call instead of three and nothing is sliced in between.
#[track_caller]
pub fn padded_self_attention(qkv: Tensor, lengths: Tensor) -> Tensor {
    let (s, ls) = (qkv.shape(), lengths.shape());
    let packed = has_axes(s, &[B, S, QKV, H, HD]) && s.axis(QKV).is_some_and(|a| s.dims()[a] == 3);
    if !packed || !has_axes(ls, &[B]) || !ls.dtype().is_integer() {
        let msg =
            format!("wants qkv (b, s, qkv = 3, h, hd) and integer lengths (b), got {s} and {ls}");
        let out = s.remove_axis(s.axis(QKV).unwrap_or(0)).unwrap_or(s);
        return fail("padded_attention", msg, &[qkv, lengths], out);
    }
    let qkv = qkv.transpose([B, S, QKV, H, HD]);
    PADDED_ATTENTION.call(&[qkv, lengths.convert(DType::I32)], &Attrs::new())[0]
}

/// The query, key and value of a packed `qkv` (the fallback's operands),
/// tagged as [`padded_attention`] takes them.
fn unpack(qkv: Tensor) -> (Tensor, Tensor, Tensor) {
    let part = |i: i64, s: &str| qkv.slice(QKV, i..i + 1).squeeze(QKV).rename(S, s);
    (part(0, Q), part(1, K), part(2, K))
}

/// The fallback: [`attention`] with the keys at or past each row's length
/// hidden.
fn masked(q: Tensor, k: Tensor, v: Tensor, lengths: Tensor) -> Tensor {
    let k_pos = Tensor::iota(
        Shape::tagged(DType::I32, &[(B, k.dim(B)), (K, k.dim(K))]),
        K,
    );
    let mask = k_pos.lt(lengths.broadcast(k_pos.shape()));
    attention(q, k, v, Some(mask))
}

fn shape_rule(s: &[Shape], _: &Attrs) -> Result<Vec<Shape>, String> {
    if let [qkv, lengths] = s {
        let d = qkv.dims();
        if qkv.rank() != 5 || qkv.dtype() != DType::F32 || d[2] != 3 {
            return Err(format!("wants f32 qkv [b, s, 3, h, hd], got {qkv}"));
        }
        if lengths.dtype() != DType::I32 || lengths.dims() != [d[0]] {
            return Err(format!("wants i32 lengths [{}], got {lengths}", d[0]));
        }
        return Ok(vec![qkv.remove_axis(2).ok_or("qkv has an axis 2")?]);
    }
    let [q, k, v, lengths] = s else {
        return Err(format!(
            "wants q, k, v and lengths, or qkv and lengths, got {} operands",
            s.len()
        ));
    };
    let f32_rank4 = |s: &Shape| s.rank() == 4 && s.dtype() == DType::F32;
    if !f32_rank4(q) || !f32_rank4(k) || k != v {
        return Err(format!(
            "wants f32 q, k and v of rank 4, k and v alike, got {q}, {k} and {v}"
        ));
    }
    let (qd, kd) = (q.dims(), k.dims());
    if kd[0] != qd[0] || kd[3] != qd[3] || kd[2] == 0 || qd[2] % kd[2] != 0 {
        return Err(format!(
            "q {q} does not fit the keys {k}: rows, head width, or heads not a multiple of the keys'"
        ));
    }
    if lengths.dtype() != DType::I32 || lengths.dims() != [qd[0]] {
        return Err(format!("wants i32 lengths [{}], got {lengths}", qd[0]));
    }
    Ok(vec![*q])
}

/// The sizes of one call.
#[derive(Clone, Copy)]
struct Dims {
    n_q: usize,
    n_k: usize,
    heads: usize,
    kv_heads: usize,
    hd: usize,
}

/// Where one of the queries, keys and values lies in its buffer: the
/// heads of token `t` (of all rows, row after row) start at `base + t *
/// stride`, a head's `hd` values side by side.
#[derive(Clone, Copy)]
struct Operand<'a> {
    data: &'a [f32],
    base: usize,
    stride: usize,
}

impl Operand<'_> {
    /// Head `head` of token `token`.
    fn head(&self, token: usize, head: usize, hd: usize) -> &[f32] {
        &self.data[self.base + token * self.stride + head * hd..][..hd]
    }
}

fn kernel(k: &Kernel<'_>) -> Result<(), String> {
    let (d, [q, keys, values], lengths) = if k.n_inputs() == 2 {
        // One operand `[b, s, 3, h, hd]`: a token's queries, then its keys,
        // then its values.
        let shape = k.input_shape(0).ok_or("no qkv")?;
        let qd = shape.dims();
        let (heads, hd) = (qd[3] as usize, qd[4] as usize);
        let d = Dims {
            n_q: qd[1] as usize,
            n_k: qd[1] as usize,
            heads,
            kv_heads: heads,
            hd,
        };
        let data = k.input::<f32>(0)?;
        let part = |i: usize| Operand {
            data,
            base: i * heads * hd,
            stride: 3 * heads * hd,
        };
        (d, [part(0), part(1), part(2)], k.input::<i32>(1)?)
    } else {
        let (qs, ks) = (
            k.input_shape(0).ok_or("no q")?,
            k.input_shape(1).ok_or("no keys")?,
        );
        let (qd, kd) = (qs.dims(), ks.dims());
        let d = Dims {
            n_q: qd[1] as usize,
            n_k: kd[1] as usize,
            heads: qd[2] as usize,
            kv_heads: kd[2] as usize,
            hd: qd[3] as usize,
        };
        let operand = |i: usize, heads: usize| {
            Ok::<_, String>(Operand {
                data: k.input::<f32>(i)?,
                base: 0,
                stride: heads * d.hd,
            })
        };
        let operands = [
            operand(0, d.heads)?,
            operand(1, d.kv_heads)?,
            operand(2, d.kv_heads)?,
        ];
        (d, operands, k.input::<i32>(3)?)
    };
    let out = k.output::<f32>(0)?;
    if out.is_empty() {
        return Ok(());
    }
    // A task per (row, head); its outputs are one `hd` chunk per query,
    // strided by the heads, so each chunk has its lock.
    let parts: Vec<Mutex<&mut [f32]>> = out.chunks_exact_mut(d.hd).map(Mutex::new).collect();
    let run = |task: usize| {
        let (row, head) = (task / d.heads, task % d.heads);
        let kv_head = head / (d.heads / d.kv_heads);
        let seen = usize::try_from(lengths[row]).unwrap_or(0).min(d.n_k);
        let o = attend(&d, (row, head, kv_head), seen, q, keys, values);
        for (j, o) in o
            .chunks_exact(d.hd.next_multiple_of(PANEL_ROWS))
            .enumerate()
        {
            let mut part = parts[(row * d.n_q + j) * d.heads + head]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            part.copy_from_slice(&o[..d.hd]);
        }
    };
    radix_quant::SpinPool::global().try_run(lengths.len() * d.heads, &run)
}

/// One head of one row: `softmax(q kᵀ / sqrt(hd)) v` over the first `seen`
/// keys, `[n_q, hd rounded up to a panel]` (the padding columns zero). A
/// row with no valid key (`seen == 0`) gets the mean of all values, as a
/// query that may read no key does in [`attention`].
fn attend(
    d: &Dims,
    (row, head, kv_head): (usize, usize, usize),
    seen: usize,
    q: Operand<'_>,
    keys: Operand<'_>,
    values: Operand<'_>,
) -> Vec<f32> {
    let (uniform, seen) = match seen {
        0 => (true, d.n_k),
        n => (false, n),
    };
    let config = Config {
        isa: Isa::best(),
        parallel: &Serial,
    };
    let (hd, n_q) = (d.hd, d.n_q);
    let n_keys = seen.next_multiple_of(PANEL_ROWS);
    let hd_rows = hd.next_multiple_of(PANEL_ROWS);
    // The keys as panels of a `n_keys × hd` matrix (zero past `seen`), and
    // the values transposed as panels of a `hd_rows × n_keys` one: element
    // (r, c) of a `cols`-wide matrix lies at `(r / 16) * 16 * cols + c * 16
    // + r % 16`.
    let at = |r: usize, c: usize, cols: usize| {
        (r / PANEL_ROWS) * PANEL_ROWS * cols + c * PANEL_ROWS + r % PANEL_ROWS
    };
    let mut k_panels = vec![0.0f32; n_keys * hd];
    let mut v_panels = vec![0.0f32; hd_rows * n_keys];
    for p in 0..seen {
        let token = row * d.n_k + p;
        let (k, v) = (
            keys.head(token, kv_head, hd),
            values.head(token, kv_head, hd),
        );
        for c in 0..hd {
            k_panels[at(p, c, hd)] = k[c];
            v_panels[at(c, p, n_keys)] = v[c];
        }
    }
    let mut x = vec![0.0f32; n_q * hd];
    for (j, x) in x.chunks_exact_mut(hd).enumerate() {
        x.copy_from_slice(q.head(row * n_q + j, head, hd));
    }
    let mut scores = vec![0.0f32; n_q * n_keys];
    if !uniform {
        matmul_panels_f32_with(&config, &k_panels, n_keys, hd, n_q, &x, &mut scores)
            .expect("the panels' shapes are built here");
    }
    let scale = (1.0 / (hd as f64).sqrt()) as f32;
    for s in scores.chunks_exact_mut(n_keys) {
        let (valid, padding) = s.split_at_mut(seen);
        softmax_best(valid, scale);
        padding.fill(0.0);
    }
    let mut o = vec![0.0f32; n_q * hd_rows];
    matmul_panels_f32_with(&config, &v_panels, hd_rows, n_keys, n_q, &scores, &mut o)
        .expect("the panels' shapes are built here");
    o
}

vectorized! {
    /// [`softmax`] compiled for AVX-512 where the CPU has it (its loops then
    /// run sixteen lanes at a time: a prompt's exponentials are a tenth of
    /// its attention), else for AVX2 and FMA (eight lanes), else as portable
    /// code; the same bits every way.
    fn softmax_best, softmax_paths = softmax(s: &mut [f32], scale: f32);
}

/// `s` scaled by `scale`, then softmax: `exp(s − max) / Σ`. The max and
/// the sum are taken in [`LANES`] partial results, so that every loop runs
/// in vector lanes (a single running sum would order every addition).
#[inline(always)]
fn softmax(s: &mut [f32], scale: f32) {
    let mut max = [f32::NEG_INFINITY; LANES];
    let (chunks, tail) = s.as_chunks::<LANES>();
    for c in chunks {
        for l in 0..LANES {
            let v = c[l] * scale;
            max[l] = if v > max[l] { v } else { max[l] };
        }
    }
    let max = tail
        .iter()
        .map(|&v| v * scale)
        .chain(max)
        .fold(f32::NEG_INFINITY, f32::max);
    for v in s.iter_mut() {
        *v = exp(*v * scale - max);
    }
    let mut sum = [0.0f32; LANES];
    let (chunks, tail) = s.as_chunks::<LANES>();
    for c in chunks {
        for l in 0..LANES {
            sum[l] += c[l];
        }
    }
    let sum: f32 = sum.iter().sum::<f32>() + tail.iter().sum::<f32>();
    let inv = 1.0 / sum;
    s.iter_mut().for_each(|v| *v *= inv);
}

/// Partial results of [`softmax`]'s max and sum: two AVX2 vectors.
const LANES: usize = 16;

#[cfg(test)]
mod tests {
    /// Every compiled copy of the softmax gives the portable loop's bits,
    /// over rows of a length that leaves a tail past the lanes.
    #[test]
    fn every_softmax_path_gives_the_same_bits() {
        let row: Vec<f32> = (0..77)
            .map(|i| ((i * 37) % 101) as f32 * 0.173 - 8.0)
            .collect();
        let run = |f: fn(&mut [f32], f32)| {
            let mut s = row.clone();
            f(&mut s, 0.125);
            s.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let portable = run(super::softmax);
        for (name, f) in super::softmax_paths() {
            assert_eq!(portable, run(f), "{name}");
        }
    }
}
