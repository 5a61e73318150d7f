//! Ops that move elements without computing (reshape, transpose,
//! broadcast, slice, concatenate, pad, reverse): their specs, the reshape
//! shape rule, printing and reference semantics.

use crate::Shape;
use crate::ir::Op;
use crate::ir::print::{OpPrinter, i64_array};
use crate::literal::{Literal, strides, unravel};

/// The bounds `slice` takes along one axis: `a..b`, `a..`, `..b`
/// or `..`, where a negative bound counts from the end.
pub trait SliceRange {
    /// `(start, end)` on an axis of `size` elements (negative bounds are
    /// kept; the slice resolves them).
    fn bounds(&self, size: i64) -> (i64, i64);
}

impl SliceRange for std::ops::Range<i64> {
    fn bounds(&self, _: i64) -> (i64, i64) {
        (self.start, self.end)
    }
}

impl SliceRange for std::ops::RangeFrom<i64> {
    fn bounds(&self, size: i64) -> (i64, i64) {
        (self.start, size)
    }
}

impl SliceRange for std::ops::RangeTo<i64> {
    fn bounds(&self, _: i64) -> (i64, i64) {
        (0, self.end)
    }
}

impl SliceRange for std::ops::RangeFull {
    fn bounds(&self, size: i64) -> (i64, i64) {
        (0, size)
    }
}

/// Where a `stablehlo.slice` starts, stops (exclusive) and its steps, per axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SliceSpec {
    /// First index per axis.
    pub start: Vec<i64>,
    /// One past the last index per axis.
    pub limit: Vec<i64>,
    /// Step per axis (>= 1).
    pub strides: Vec<i64>,
}

/// Padding of a `stablehlo.pad` per axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PadSpec {
    /// Elements added before (negative removes).
    pub low: Vec<i64>,
    /// Elements added after (negative removes).
    pub high: Vec<i64>,
    /// Elements added between neighbours (>= 0).
    pub interior: Vec<i64>,
}

pub(crate) fn infer_dims(s: Shape, dims: &[i64]) -> Result<Vec<i64>, String> {
    let known: i64 = dims.iter().filter(|&&d| d != -1).product();
    let n_infer = dims.iter().filter(|&&d| d == -1).count();
    let count = s.count() as i64;
    let ok = dims.len() <= crate::shape::MAX_RANK
        && dims.iter().all(|&d| d >= -1)
        && match n_infer {
            0 => known == count,
            1 => known != 0 && count % known == 0,
            _ => false,
        };
    if !ok {
        return Err(format!("cannot reshape {s} to {dims:?}"));
    }
    Ok(dims
        .iter()
        .map(|&d| if d == -1 { count / known } else { d })
        .collect())
}

pub(crate) fn print(op: &Op, p: &mut OpPrinter<'_>) {
    let arr = |v: &[usize]| i64_array(v.iter().map(|&x| x as i64));
    match op {
        Op::Reshape => p.generic("stablehlo.reshape", ""),
        Op::Transpose(perm) => p.generic(
            "stablehlo.transpose",
            &format!("permutation = {}", arr(perm)),
        ),
        Op::Broadcast(axes) => p.generic(
            "stablehlo.broadcast_in_dim",
            &format!("broadcast_dimensions = {}", arr(axes)),
        ),
        Op::Slice(s) => {
            let attrs = format!(
                "start_indices = {}, limit_indices = {}, strides = {}",
                i64_array(s.start.iter().copied()),
                i64_array(s.limit.iter().copied()),
                i64_array(s.strides.iter().copied())
            );
            p.generic("stablehlo.slice", &attrs)
        }
        Op::Concatenate(a) => p.generic("stablehlo.concatenate", &format!("dimension = {a} : i64")),
        Op::Pad(s) => {
            let attrs = format!(
                "edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
                i64_array(s.low.iter().copied()),
                i64_array(s.high.iter().copied()),
                i64_array(s.interior.iter().copied())
            );
            p.generic("stablehlo.pad", &attrs)
        }
        Op::Reverse(axes) => p.generic("stablehlo.reverse", &format!("dimensions = {}", arr(axes))),
        _ => unreachable!(),
    }
}

/// Fills a result of `shape` by mapping each output index to an input value.
pub(crate) fn gather_by_index(shape: Shape, mut f: impl FnMut(&[usize]) -> f64) -> Literal {
    let data = (0..shape.count())
        .map(|i| f(&unravel(i, shape.dims())))
        .collect();
    Literal::new(shape, data)
}

fn offset(idx: &[usize], st: &[usize]) -> usize {
    idx.iter().zip(st).map(|(a, b)| a * b).sum()
}

pub(crate) fn eval(op: &Op, args: &[&Literal], shape: Shape) -> Literal {
    let x = args[0];
    let xs = x.shape();
    let st = strides(xs.dims());
    let mut ii = vec![0usize; xs.rank()];
    match op {
        Op::Reshape => Literal::new(shape, x.data().to_vec()),
        Op::Transpose(perm) => gather_by_index(shape, |oi| {
            for (k, &p) in perm.iter().enumerate() {
                ii[p] = oi[k];
            }
            x.data()[offset(&ii, &st)]
        }),
        Op::Broadcast(axes) => gather_by_index(shape, |oi| {
            for (k, &a) in axes.iter().enumerate() {
                ii[k] = if xs.dims()[k] == 1 { 0 } else { oi[a] };
            }
            x.data()[offset(&ii, &st)]
        }),
        Op::Slice(s) => gather_by_index(shape, |oi| {
            for k in 0..ii.len() {
                ii[k] = (s.start[k] + oi[k] as i64 * s.strides[k]) as usize;
            }
            x.data()[offset(&ii, &st)]
        }),
        Op::Concatenate(a) => gather_by_index(shape, |oi| {
            let mut pos = oi[*a] as i64;
            for t in args {
                let d = t.shape().dims()[*a];
                if pos < d {
                    let mut ti = oi.to_vec();
                    ti[*a] = pos as usize;
                    return t.data()[offset(&ti, &strides(t.shape().dims()))];
                }
                pos -= d;
            }
            unreachable!()
        }),
        Op::Pad(s) => gather_by_index(shape, |oi| {
            for k in 0..ii.len() {
                let p = oi[k] as i64 - s.low[k];
                let step = s.interior[k] + 1;
                if p < 0 || p % step != 0 || p / step >= xs.dims()[k] {
                    return args[1].data()[0];
                }
                ii[k] = (p / step) as usize;
            }
            x.data()[offset(&ii, &st)]
        }),
        Op::Reverse(axes) => gather_by_index(shape, |oi| {
            for k in 0..ii.len() {
                ii[k] = if axes.contains(&k) {
                    xs.dims()[k] as usize - 1 - oi[k]
                } else {
                    oi[k]
                };
            }
            x.data()[offset(&ii, &st)]
        }),
        _ => unreachable!(),
    }
}
