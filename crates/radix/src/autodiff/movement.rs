//! The derivative rules of the movement ops: each moves the cotangent `g`
//! back the way its operand came (a broadcast sums over the axes it made,
//! a slice pads with zeros, a pad slices, a concatenation slices each
//! operand's part).

use crate::autodiff::Rule;
use crate::ir::ops::Movement;
use crate::{PadSpec, SliceSpec, Tensor};

pub(super) fn vjp(op: &Movement, args: &[Tensor], g: Tensor) -> Rule {
    let x = args[0];
    let (xs, gs) = (x.shape(), g.shape());
    Ok(match op {
        Movement::Reshape => vec![Some(g.reshape_to(xs.with_dtype(gs.dtype())))],
        Movement::Transpose(perm) => {
            let mut inv = vec![0; perm.len()];
            for (k, &p) in perm.iter().enumerate() {
                inv[p] = k;
            }
            vec![Some(g.transpose(inv.as_slice()))]
        }
        Movement::Broadcast(axes) => {
            let summed: Vec<usize> = (0..gs.rank())
                .filter(|&o| match axes.iter().position(|&a| a == o) {
                    None => true,
                    Some(k) => xs.dims()[k] == 1 && gs.dims()[o] != 1,
                })
                .collect();
            let s = match summed.is_empty() {
                true => g,
                false => g.sum(summed.as_slice()),
            };
            vec![Some(s.reshape_to(xs.with_dtype(gs.dtype())))]
        }
        Movement::Slice(spec) => {
            let mut pad = PadSpec {
                low: spec.start.clone(),
                high: vec![],
                interior: spec.strides.iter().map(|s| s - 1).collect(),
            };
            for k in 0..xs.rank() {
                let n = gs.dims()[k];
                let last = match n {
                    0 => spec.start[k] - 1,
                    _ => spec.start[k] + (n - 1) * spec.strides[k],
                };
                pad.high.push(xs.dims()[k] - 1 - last);
            }
            vec![Some(g.pad(0.0, pad))]
        }
        Movement::Concatenate(a) => {
            let mut at = 0;
            let mut res = vec![];
            for arg in args {
                let s = arg.shape();
                let n = s.dims()[*a];
                let spec = SliceSpec {
                    start: (0..s.rank())
                        .map(|k| if k == *a { at } else { 0 })
                        .collect(),
                    limit: (0..s.rank())
                        .map(|k| if k == *a { at + n } else { s.dims()[k] })
                        .collect(),
                    strides: vec![1; s.rank()],
                };
                at += n;
                res.push(Some(g.slice_all(spec)));
            }
            res
        }
        Movement::Pad(p) => {
            if p.low.iter().chain(&p.high).any(|&v| v < 0) {
                return Err("no derivative rule for a pad with negative edges".into());
            }
            let spec = SliceSpec {
                start: p.low.clone(),
                limit: (0..xs.rank())
                    .map(|k| p.low[k] + (xs.dims()[k] - 1).max(0) * (p.interior[k] + 1) + 1)
                    .collect(),
                strides: p.interior.iter().map(|i| i + 1).collect(),
            };
            let dx = g.slice_all(spec);
            // The padding value's cotangent: what `g` holds outside `x`.
            let all: Vec<usize> = (0..gs.rank()).collect();
            let outside = g.sum(all.as_slice()) - dx.sum(all.as_slice());
            vec![Some(dx), Some(outside)]
        }
        Movement::Reverse(axes) => vec![Some(g.reverse(axes.as_slice()))],
    })
}
