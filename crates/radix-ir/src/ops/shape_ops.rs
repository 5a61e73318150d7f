//! Ops that move elements without computing (reshape, transpose,
//! broadcast, slice, concatenate, pad, reverse): their specs, the reshape
//! shape rule, printing and reference semantics.

use crate::Shape;
use crate::literal::{Literal, strides};
use crate::print::{OpPrinter, i64_array};

/// The ops that move elements without computing. `reshape` and
/// `broadcast_in_dim` state their result type; the others give their
/// operand's tags to the axes they keep.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Movement {
    /// `stablehlo.reshape`.
    Reshape,
    /// `stablehlo.transpose` with a permutation.
    Transpose(Vec<usize>),
    /// `stablehlo.broadcast_in_dim`: where each operand axis goes.
    Broadcast(Vec<usize>),
    /// `stablehlo.slice`.
    Slice(SliceSpec),
    /// `stablehlo.concatenate` along an axis.
    Concatenate(usize),
    /// `stablehlo.pad` (operand, padding value).
    Pad(PadSpec),
    /// `stablehlo.reverse` of some axes.
    Reverse(Vec<usize>),
}

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

/// `dims` for a reshape of `s`, one `-1` inferred from the count, or why
/// they do not fit.
pub fn infer_dims(s: Shape, dims: &[i64]) -> Result<Vec<i64>, String> {
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

/// `s` with axis `i` resized to `n` (its tag kept).
pub fn resized(s: Shape, i: usize, n: i64) -> Shape {
    let tag = s.tag(i).map_or("", |t| t.as_str());
    s.remove_axis(i)
        .and_then(|o| o.insert_axis(i, n, tag))
        .unwrap_or(s)
}

/// The shape rules of the ops that move elements. `reshape` and
/// `broadcast_in_dim` state their result type (`declared`): a reshape keeps
/// the count and dtype; a broadcast sends operand axis `k` to `axes[k]`,
/// where it has the target's size or stretches from 1. The others give
/// their operand's tags to the axes they keep.
fn infer_op(op: &Movement, args: &[Shape], declared: Shape) -> Result<Shape, String> {
    let s = *args.first().ok_or("no operand")?;
    match op {
        Movement::Reshape => {
            super::arity(args, 1)?;
            if s.count() != declared.count() || s.dtype() != declared.dtype() {
                return Err(format!("cannot reshape {s} to {declared}"));
            }
            Ok(declared)
        }
        Movement::Broadcast(axes) => {
            super::arity(args, 1)?;
            broadcast(s, axes, declared).map(|()| declared)
        }
        Movement::Transpose(perm) => {
            super::arity(args, 1)?;
            let mut sorted = perm.clone();
            sorted.sort();
            if sorted != (0..s.rank()).collect::<Vec<_>>() {
                return Err(format!("{perm:?} is not a permutation of the axes of {s}"));
            }
            let mut out = Shape::scalar(s.dtype());
            for (k, &p) in perm.iter().enumerate() {
                let tag = s.tag(p).map_or("", |t| t.as_str());
                out = out.insert_axis(k, s.dims()[p], tag).unwrap_or(out);
            }
            Ok(out)
        }
        Movement::Slice(spec) => {
            super::arity(args, 1)?;
            slice(s, spec)
        }
        Movement::Concatenate(a) => concatenate(args, *a),
        Movement::Pad(spec) => {
            super::arity(args, 2)?;
            super::scalar(args[1], Some(s.dtype()), "the padding value")?;
            pad(s, spec)
        }
        Movement::Reverse(axes) => {
            super::arity(args, 1)?;
            match axes.iter().find(|&&a| a >= s.rank()) {
                Some(a) => Err(format!("no axis {a} in {s}")),
                None => Ok(s),
            }
        }
    }
}

fn broadcast(s: Shape, axes: &[usize], target: Shape) -> Result<(), String> {
    if s.dtype() != target.dtype() {
        return Err(format!("broadcast of {s} to {target}"));
    }
    if axes.len() != s.rank() {
        return Err(format!("{} axes given for rank {}", axes.len(), s.rank()));
    }
    for (k, &a) in axes.iter().enumerate() {
        if a >= target.rank() || axes[..k].contains(&a) {
            return Err(format!("bad target axis {a}"));
        }
        if s.dims()[k] != 1 && s.dims()[k] != target.dims()[a] {
            return Err(format!(
                "axis {k} of size {} cannot stretch to {}",
                s.dims()[k],
                target.dims()[a]
            ));
        }
    }
    Ok(())
}

/// The shape rule of `stablehlo.slice`.
pub fn slice(s: Shape, spec: &SliceSpec) -> Result<Shape, String> {
    let r = s.rank();
    if spec.start.len() != r || spec.limit.len() != r || spec.strides.len() != r {
        return Err(format!("slice spec of the wrong rank for {s}"));
    }
    let mut out = s;
    for i in 0..r {
        let (st, li, step) = (spec.start[i], spec.limit[i], spec.strides[i]);
        if st < 0 || li > s.dims()[i] || st > li || step < 1 {
            return Err(format!(
                "slice {st}..{li} by {step} out of range for axis {i} of size {}",
                s.dims()[i]
            ));
        }
        out = resized(out, i, (li - st + step - 1) / step);
    }
    Ok(out)
}

/// The shape rule of `stablehlo.concatenate` along axis `a`.
pub fn concatenate(args: &[Shape], a: usize) -> Result<Shape, String> {
    let s = *args.first().ok_or("no tensors")?;
    if a >= s.rank() {
        return Err(format!("no axis {a} in {s}"));
    }
    let mut total = 0;
    for &t in args {
        let same = t.rank() == s.rank()
            && t.dtype() == s.dtype()
            && (0..s.rank()).all(|i| i == a || t.dims()[i] == s.dims()[i]);
        if !same {
            return Err(format!("{t} does not fit {s} along axis {a}"));
        }
        total += t.dims()[a];
    }
    Ok(resized(s, a, total))
}

/// The shape rule of `stablehlo.pad`.
pub fn pad(s: Shape, spec: &PadSpec) -> Result<Shape, String> {
    let r = s.rank();
    if spec.low.len() != r || spec.high.len() != r || spec.interior.len() != r {
        return Err(format!("pad spec of the wrong rank for {s}"));
    }
    let mut out = s;
    for i in 0..r {
        let d = s.dims()[i];
        let n = spec.low[i] + spec.high[i] + d + (d - 1).max(0) * spec.interior[i];
        if spec.interior[i] < 0 || n < 0 {
            return Err(format!("bad padding of axis {i}"));
        }
        out = resized(out, i, n);
    }
    Ok(out)
}

fn print_op(op: &Movement, p: &mut OpPrinter<'_>) {
    let arr = |v: &[usize]| i64_array(v.iter().map(|&x| x as i64));
    match op {
        Movement::Reshape => p.generic("stablehlo.reshape", ""),
        Movement::Transpose(perm) => p.generic(
            "stablehlo.transpose",
            &format!("permutation = {}", arr(perm)),
        ),
        Movement::Broadcast(axes) => p.generic(
            "stablehlo.broadcast_in_dim",
            &format!("broadcast_dimensions = {}", arr(axes)),
        ),
        Movement::Slice(s) => {
            let attrs = format!(
                "start_indices = {}, limit_indices = {}, strides = {}",
                i64_array(s.start.iter().copied()),
                i64_array(s.limit.iter().copied()),
                i64_array(s.strides.iter().copied())
            );
            p.generic("stablehlo.slice", &attrs)
        }
        Movement::Concatenate(a) => {
            p.generic("stablehlo.concatenate", &format!("dimension = {a} : i64"))
        }
        Movement::Pad(s) => {
            let attrs = format!(
                "edge_padding_low = {}, edge_padding_high = {}, interior_padding = {}",
                i64_array(s.low.iter().copied()),
                i64_array(s.high.iter().copied()),
                i64_array(s.interior.iter().copied())
            );
            p.generic("stablehlo.pad", &attrs)
        }
        Movement::Reverse(axes) => {
            p.generic("stablehlo.reverse", &format!("dimensions = {}", arr(axes)))
        }
    }
}

/// Fills a result of `shape` by mapping each output index to an input value.
///
/// The indices come in row-major order from one counter stepped like an
/// odometer (the last axis fastest), not unravelled per element: the
/// passes fold constants through this on every trace.
pub fn gather_by_index(shape: Shape, mut f: impl FnMut(&[usize]) -> f64) -> Literal {
    let dims = shape.dims();
    let count = shape.count();
    let mut index = vec![0usize; dims.len()];
    let mut data = Vec::with_capacity(count);
    for _ in 0..count {
        data.push(f(&index));
        for k in (0..index.len()).rev() {
            index[k] += 1;
            if (index[k] as i64) < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    Literal::new(shape, data)
}

fn offset(idx: &[usize], st: &[usize]) -> usize {
    idx.iter().zip(st).map(|(a, b)| a * b).sum()
}

fn eval_op(op: &Movement, args: &[&Literal], shape: Shape) -> Literal {
    let x = args[0];
    let xs = x.shape();
    let st = strides(xs.dims());
    let mut ii = vec![0usize; xs.rank()];
    match op {
        Movement::Reshape => Literal::new(shape, x.data().to_vec()),
        Movement::Transpose(perm) => gather_by_index(shape, |oi| {
            for (k, &p) in perm.iter().enumerate() {
                ii[p] = oi[k];
            }
            x.data()[offset(&ii, &st)]
        }),
        Movement::Broadcast(axes) => gather_by_index(shape, |oi| {
            for (k, &a) in axes.iter().enumerate() {
                ii[k] = if xs.dims()[k] == 1 { 0 } else { oi[a] };
            }
            x.data()[offset(&ii, &st)]
        }),
        Movement::Slice(s) => gather_by_index(shape, |oi| {
            for k in 0..ii.len() {
                ii[k] = (s.start[k] + oi[k] as i64 * s.strides[k]) as usize;
            }
            x.data()[offset(&ii, &st)]
        }),
        Movement::Concatenate(a) => {
            // Row-major: for each index of the axes before `a`, each
            // operand's block of the axes from `a` on, in order.
            let size = |dims: &[i64]| dims.iter().product::<i64>() as usize;
            let mut data = Vec::with_capacity(shape.count());
            for o in 0..size(&shape.dims()[..*a]) {
                for t in args {
                    let block = size(&t.shape().dims()[*a..]);
                    data.extend_from_slice(&t.data()[o * block..(o + 1) * block]);
                }
            }
            Literal::new(shape, data)
        }
        Movement::Pad(s) => gather_by_index(shape, |oi| {
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
        Movement::Reverse(axes) => gather_by_index(shape, |oi| {
            for k in 0..ii.len() {
                ii[k] = if axes.contains(&k) {
                    xs.dims()[k] as usize - 1 - oi[k]
                } else {
                    oi[k]
                };
            }
            x.data()[offset(&ii, &st)]
        }),
    }
}

impl super::Family for Movement {
    fn name(&self) -> &'static str {
        match self {
            Movement::Reshape => "reshape",
            Movement::Transpose(_) => "transpose",
            Movement::Broadcast(_) => "broadcast",
            Movement::Slice(_) => "slice",
            Movement::Concatenate(_) => "concatenate",
            Movement::Pad(_) => "pad",
            Movement::Reverse(_) => "reverse",
        }
    }

    fn infer(&self, args: &[Shape], declared: Shape) -> Result<super::Shapes, String> {
        infer_op(self, args, declared).map(|s| vec![s])
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        print_op(self, p)
    }

    fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal> {
        vec![eval_op(self, args, shape)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn concatenation_lays_the_operands_end_to_end_along_its_axis() {
        let lit = |dims: &[i64], v: &[f64]| Literal::new(Shape::new(DType::F32, dims), v.to_vec());
        let (a, b) = (
            lit(&[2, 1], &[1.0, 2.0]),
            lit(&[2, 2], &[3.0, 4.0, 5.0, 6.0]),
        );
        let along_1 = eval_op(
            &Movement::Concatenate(1),
            &[&a, &b],
            Shape::new(DType::F32, &[2, 3]),
        );
        assert_eq!(along_1.data(), [1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
        let c = lit(&[1, 2], &[7.0, 8.0]);
        let along_0 = eval_op(
            &Movement::Concatenate(0),
            &[&b, &c],
            Shape::new(DType::F32, &[3, 2]),
        );
        assert_eq!(along_0.data(), [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    }
}
