//! The derivative rules of control flow that save residuals: [`save`]
//! replaces a `call`, `if` or bounded `while` of the forward pass by one
//! that also gives the residuals of its body ([`residuals::split`]), and
//! [`restore`] emits the backward op that reads them.
//!
//! - `call`: `@<name>_fwd` gives the body's results and residuals,
//!   `@<name>_bwd` the operands' cotangents (a stack of equal layers still
//!   emits one of each). A `checkpoint`ed call saves nothing but its
//!   operands: its rule, in `control.rs`, runs the body again.
//! - `if`: each branch gives its own residuals and zeros in place of the
//!   other's; the backward `if` on the same predicate runs the taken
//!   branch's backward function (zeros for the other's captures).
//! - `while` with `max_trips` (`for_`, `while_bounded`): the loop carries a
//!   counter and one stack per residual, `max_trips` rows long, writing
//!   row `j` in iteration `j`; the backward loop runs from the last
//!   iteration the forward one ran to the first, reading row `j`. Only
//!   the residuals are kept (what the body computes from its captures
//!   alone is computed again), so the memory grows linearly with the
//!   bound.

use crate::ir::ops::{Control, Indexing};
use std::sync::Arc;

use crate::autodiff::GradError;
use crate::autodiff::emitter::{Cotangents, Emitter};
use crate::autodiff::residuals::{self, Reads, with_zeros};
use crate::ir::ops::{Binary, Compare};
use crate::ir::{Function, Node, Op, ValueId};
use crate::{DType, Shape};

/// What the forward pass of a control-flow op kept for its derivative.
pub(crate) enum Saved {
    Call {
        name: Arc<str>,
        bwd: Arc<Function>,
        residuals: Vec<ValueId>,
        free_used: Vec<usize>,
        outs: Vec<Shape>,
    },
    If {
        n_then_captures: usize,
        then: Arc<Function>,
        other: Arc<Function>,
        then_residuals: Vec<ValueId>,
        other_residuals: Vec<ValueId>,
        then_free: Vec<usize>,
        other_free: Vec<usize>,
        outs: Vec<Shape>,
    },
    Loop {
        n_state: usize,
        n_cond_captures: usize,
        bwd: Arc<Function>,
        count: ValueId,
        stacks: Vec<ValueId>,
        free_used: Vec<usize>,
        max_trips: i64,
    },
}

/// Emits in place of `node` (operands already renamed) the op that also
/// gives its residuals, returning it and what its rule needs; `None`
/// where the op keeps its plain rule.
pub(crate) fn save(
    e: &mut Emitter<'_>,
    node: &Node,
) -> Result<Option<(ValueId, Saved)>, GradError> {
    match &node.op {
        Op::Control(Control::Call {
            name,
            f,
            checkpoint: false,
        }) if !f.results.is_empty() => save_call(e, node, name, f).map(Some),
        Op::Control(Control::If {
            then,
            other,
            n_then_captures,
        }) if !then.results.is_empty() => save_if(e, node, then, other, *n_then_captures).map(Some),
        Op::Control(Control::While {
            cond,
            body,
            n_cond_captures,
            max_trips: Some(m),
        }) if *m > 0 => save_loop(e, node, cond, body, *n_cond_captures, *m).map(Some),
        _ => Ok(None),
    }
}

/// The cotangents of `node`'s operands from those of its results, from
/// what [`save`] kept.
pub(crate) fn restore(
    e: &mut Emitter<'_>,
    saved: &Saved,
    node: &Node,
    cts: &[Option<ValueId>],
) -> Cotangents {
    match saved {
        Saved::Call {
            name,
            bwd,
            residuals,
            free_used,
            outs,
        } => {
            let mut args = residuals.clone();
            args.extend(free_used.iter().map(|&k| node.args[k]));
            args.extend(seeds(e, cts, outs));
            let shapes = bwd.result_shapes();
            let call = e.emit(
                Op::Control(Control::Call {
                    name: format!("{name}_bwd").into(),
                    f: bwd.clone(),
                    checkpoint: false,
                }),
                &args,
                shapes[0],
            );
            Ok((0..node.args.len())
                .map(|k| Some(e.project(call, k, shapes[k])))
                .collect())
        }
        Saved::If {
            n_then_captures,
            then,
            other,
            then_residuals,
            other_residuals,
            then_free,
            other_free,
            outs,
        } => {
            let (tcaps, ecaps) = node.args[1..].split_at(*n_then_captures);
            if tcaps.len() + ecaps.len() == 0 {
                return Ok(vec![None]);
            }
            let seeds = seeds(e, cts, outs);
            let mut targs = then_residuals.clone();
            targs.extend(then_free.iter().map(|&k| tcaps[k]));
            targs.extend(&seeds);
            let mut eargs = other_residuals.clone();
            eargs.extend(other_free.iter().map(|&k| ecaps[k]));
            eargs.extend(&seeds);
            let tshapes: Vec<Shape> = tcaps.iter().map(|&c| e.shape(c)).collect();
            let eshapes: Vec<Shape> = ecaps.iter().map(|&c| e.shape(c)).collect();
            let op = Op::Control(Control::If {
                then: Arc::new(with_zeros((**then).clone(), *n_then_captures, &eshapes)),
                other: Arc::new(with_zeros((**other).clone(), 0, &tshapes)),
                n_then_captures: targs.len(),
            });
            let shapes: Vec<Shape> = [&tshapes[..], &eshapes[..]].concat();
            let mut args = vec![node.args[0]];
            args.extend(targs);
            args.extend(eargs);
            let back = e.emit(op, &args, shapes[0]);
            let mut res = vec![None];
            res.extend((0..shapes.len()).map(|k| Some(e.project(back, k, shapes[k]))));
            Ok(res)
        }
        Saved::Loop {
            n_state,
            n_cond_captures,
            bwd,
            count,
            stacks,
            free_used,
            max_trips,
        } => {
            let operands = (*n_state, *n_cond_captures);
            restore_loop(
                e, node, operands, cts, bwd, *count, stacks, free_used, *max_trips,
            )
        }
    }
}

fn save_call(
    e: &mut Emitter<'_>,
    node: &Node,
    name: &Arc<str>,
    f: &Function,
) -> Result<(ValueId, Saved), GradError> {
    let s = residuals::split(f, f.params.len(), Reads::Params)?;
    let outs = f.result_shapes();
    let shapes = s.fwd.result_shapes();
    let call = e.emit(
        Op::Control(Control::Call {
            name: format!("{name}_fwd").into(),
            f: Arc::new(s.fwd),
            checkpoint: false,
        }),
        &node.args,
        shapes[0],
    );
    let residuals = project_from(e, call, outs.len(), &s.residuals);
    Ok((
        call,
        Saved::Call {
            name: name.clone(),
            bwd: Arc::new(s.bwd),
            residuals,
            free_used: s.free_used,
            outs,
        },
    ))
}

fn save_if(
    e: &mut Emitter<'_>,
    node: &Node,
    then: &Function,
    other: &Function,
    n_then_captures: usize,
) -> Result<(ValueId, Saved), GradError> {
    let t = residuals::split(then, then.params.len(), Reads::Params)?;
    let o = residuals::split(other, other.params.len(), Reads::Params)?;
    let outs = then.result_shapes();
    let n = outs.len();
    let op = Op::Control(Control::If {
        then: Arc::new(with_zeros(t.fwd, n + t.residuals.len(), &o.residuals)),
        other: Arc::new(with_zeros(o.fwd, n, &t.residuals)),
        n_then_captures,
    });
    let first = outs[0];
    let id = e.emit(op, &node.args, first);
    let then_residuals = project_from(e, id, n, &t.residuals);
    let other_residuals = project_from(e, id, n + t.residuals.len(), &o.residuals);
    Ok((
        id,
        Saved::If {
            n_then_captures,
            then: Arc::new(t.bwd),
            other: Arc::new(o.bwd),
            then_residuals,
            other_residuals,
            then_free: t.free_used,
            other_free: o.free_used,
            outs,
        },
    ))
}

/// The forward loop: the state, a counter `j` and a stack per residual
/// (`max_trips` rows), running while the loop's own condition holds and
/// `j < max_trips`.
fn save_loop(
    e: &mut Emitter<'_>,
    node: &Node,
    cond: &Function,
    body: &Function,
    n_cond_captures: usize,
    max_trips: i64,
) -> Result<(ValueId, Saved), GradError> {
    let n_state = body.results.len();
    let n_caps = body.params.len() - n_state;
    let s = residuals::split(body, body.params.len(), Reads::Invariant { n_state })?;
    let states: Vec<Shape> = node.args[..n_state].iter().map(|&a| e.shape(a)).collect();
    let (ccaps, caps) = node.args[n_state..].split_at(n_cond_captures);
    let ccap_shapes: Vec<Shape> = ccaps.iter().map(|&c| e.shape(c)).collect();
    let cap_shapes: Vec<Shape> = caps.iter().map(|&c| e.shape(c)).collect();
    debug_assert_eq!(n_caps, caps.len());
    let stacked = stacked_shapes(e, &s.residuals, max_trips)?;
    let index = Shape::scalar(DType::I32);
    let carried: Vec<Shape> = [&states[..], &[index], &stacked[..]].concat();
    let loc = e.loc();

    let mut new_cond = Function::default();
    {
        let mut b = Emitter::new(&mut new_cond, loc);
        let ps = parameters(&mut b, &[&carried[..], &ccap_shapes[..]].concat());
        let mut args = ps[..n_state].to_vec();
        args.extend(&ps[carried.len()..]);
        let holds = b.inline(cond, &args)[0];
        let limit = b.full(index, max_trips as f64);
        let below = b.compare(Compare::Lt, ps[n_state], limit);
        let both = b.binary(Binary::And, holds, below);
        b.finish(vec![both]);
    }
    let mut new_body = Function::default();
    {
        let mut b = Emitter::new(&mut new_body, loc);
        let ps = parameters(&mut b, &[&carried[..], &cap_shapes[..]].concat());
        let j = ps[n_state];
        let mut args = ps[..n_state].to_vec();
        args.extend(&ps[carried.len()..]);
        let res = b.inline(&s.fwd, &args);
        let mut out = res[..n_state].to_vec();
        out.push(step_by(&mut b, j, 1.0));
        for (k, &r) in res[n_state..].iter().enumerate() {
            let stack = ps[n_state + 1 + k];
            let row = b.reshape(r, s.residuals[k].insert_axis(0, 1, "").expect("checked"));
            let zero = b.zeros(index);
            let mut at = vec![stack, row, j];
            at.extend(std::iter::repeat_n(zero, s.residuals[k].rank()));
            out.push(b.emit(Op::Indexing(Indexing::DynamicUpdateSlice), &at, stacked[k]));
        }
        b.finish(out);
    }
    let mut args = node.args[..n_state].to_vec();
    args.push(e.zeros(index));
    args.extend(stacked.iter().map(|&st| e.zeros(st)));
    args.extend(ccaps);
    args.extend(caps);
    let fwd = e.emit(
        Op::Control(Control::While {
            cond: Arc::new(new_cond),
            body: Arc::new(new_body),
            n_cond_captures,
            max_trips: Some(max_trips),
        }),
        &args,
        carried[0],
    );
    let count = e.project(fwd, n_state, index);
    let stacks = project_from(e, fwd, n_state + 1, &stacked);
    Ok((
        fwd,
        Saved::Loop {
            n_state,
            n_cond_captures,
            bwd: Arc::new(s.bwd),
            count,
            stacks,
            free_used: s.free_used,
            max_trips,
        },
    ))
}

/// The backward loop: `(k, state cotangents, capture cotangents)` from
/// `k = count - 1` down to 0, reading row `k` of each stack.
#[allow(clippy::too_many_arguments)]
fn restore_loop(
    e: &mut Emitter<'_>,
    node: &Node,
    (n_state, n_cond_captures): (usize, usize),
    cts: &[Option<ValueId>],
    bwd: &Arc<Function>,
    count: ValueId,
    stacks: &[ValueId],
    free_used: &[usize],
    max_trips: i64,
) -> Cotangents {
    let states: Vec<Shape> = node.args[..n_state].iter().map(|&a| e.shape(a)).collect();
    let caps = &node.args[n_state + n_cond_captures..];
    let cap_shapes: Vec<Shape> = caps.iter().map(|&c| e.shape(c)).collect();
    // The backward function reads the captures `free_used` names (indices
    // among the body's parameters, the state first).
    let free: Vec<ValueId> = free_used.iter().map(|&k| caps[k - n_state]).collect();
    let stack_shapes: Vec<Shape> = stacks.iter().map(|&s| e.shape(s)).collect();
    let free_shapes: Vec<Shape> = free.iter().map(|&v| e.shape(v)).collect();
    let index = Shape::scalar(DType::I32);
    let carried: Vec<Shape> = [&[index], &states[..], &cap_shapes[..]].concat();
    let loc = e.loc();

    let mut cond = Function::default();
    {
        let mut b = Emitter::new(&mut cond, loc);
        let ps = parameters(&mut b, &carried);
        let zero = b.zeros(index);
        let more = b.compare(Compare::Ge, ps[0], zero);
        b.finish(vec![more]);
    }
    let mut back = Function::default();
    {
        let mut b = Emitter::new(&mut back, loc);
        let all = [&carried[..], &stack_shapes[..], &free_shapes[..]].concat();
        let ps = parameters(&mut b, &all);
        let k = ps[0];
        let ct_state = &ps[1..=n_state];
        let acc = &ps[1 + n_state..carried.len()];
        let stack_ps = &ps[carried.len()..carried.len() + stacks.len()];
        let free_ps = &ps[carried.len() + stacks.len()..];
        let zero = b.zeros(index);
        let mut args = vec![];
        for (m, &stack) in stack_ps.iter().enumerate() {
            let row_shape = stack_shapes[m].remove_axis(0).expect("stacked");
            let mut at = vec![stack, k];
            at.extend(std::iter::repeat_n(zero, row_shape.rank()));
            let mut sizes = vec![1];
            sizes.extend(row_shape.dims());
            let one_row = row_shape.insert_axis(0, 1, "").expect("checked");
            let row = b.emit(Op::Indexing(Indexing::DynamicSlice(sizes)), &at, one_row);
            args.push(b.reshape(row, row_shape));
        }
        args.extend(free_ps);
        args.extend(ct_state);
        let res = b.inline(bwd, &args);
        let mut out = vec![step_by(&mut b, k, -1.0)];
        out.extend(&res[..n_state]);
        for (c, &a) in acc.iter().enumerate() {
            out.push(if cap_shapes[c].dtype().is_float() {
                b.add(a, res[n_state + c])
            } else {
                a
            });
        }
        b.finish(out);
    }
    let mut init = vec![step_by(e, count, -1.0)];
    init.extend(seeds(e, cts, &states));
    init.extend(cap_shapes.iter().map(|&s| e.zeros(s)));
    let bwd_loop = e.emit(
        Op::Control(Control::While {
            cond: Arc::new(cond),
            body: Arc::new(back),
            n_cond_captures: 0,
            max_trips: Some(max_trips),
        }),
        &[&init[..], stacks, &free[..]].concat(),
        index,
    );
    let mut res: Vec<Option<ValueId>> = (0..n_state)
        .map(|m| Some(e.project(bwd_loop, 1 + m, states[m])))
        .collect();
    res.extend(std::iter::repeat_n(None, n_cond_captures));
    res.extend((0..caps.len()).map(|c| Some(e.project(bwd_loop, 1 + n_state + c, cap_shapes[c]))));
    Ok(res)
}

/// A cotangent per result (zeros where there is none).
fn seeds(e: &mut Emitter<'_>, cts: &[Option<ValueId>], outs: &[Shape]) -> Vec<ValueId> {
    cts.iter()
        .zip(outs)
        .map(|(ct, &s)| ct.unwrap_or_else(|| e.zeros(s)))
        .collect()
}

/// Results `from..` of the multi-result node `v`, of `shapes`.
fn project_from(e: &mut Emitter<'_>, v: ValueId, from: usize, shapes: &[Shape]) -> Vec<ValueId> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, &s)| e.project(v, from + k, s))
        .collect()
}

/// Parameters of `shapes`, in order.
fn parameters(b: &mut Emitter<'_>, shapes: &[Shape]) -> Vec<ValueId> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, &s)| b.parameter(k, s))
        .collect()
}

/// `max_trips` rows of each residual.
fn stacked_shapes(
    e: &Emitter<'_>,
    residuals: &[Shape],
    max_trips: i64,
) -> Result<Vec<Shape>, GradError> {
    residuals
        .iter()
        .map(|s| {
            s.insert_axis(0, max_trips, "")
                .ok_or_else(|| e.error("no room for the saved iterations' axis"))
        })
        .collect()
}

/// `j + d` for an `i32` counter.
fn step_by(b: &mut Emitter<'_>, j: ValueId, d: f64) -> ValueId {
    let step = b.full(Shape::scalar(DType::I32), d);
    b.add(j, step)
}
