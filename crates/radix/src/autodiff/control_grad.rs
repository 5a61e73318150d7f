//! The derivative rules of control flow that save residuals: [`save`]
//! replaces a `call`, `if` or bounded `while` of the forward pass by one
//! that also gives the residuals of its body ([`residuals::split`]), and
//! [`restore`] records the backward op that reads them.
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

use std::sync::Arc;

use crate::autodiff::GradError;
use crate::autodiff::residuals::{self, Reads, with_zeros};
use crate::autodiff::seeds;
use crate::ir::ops::Control;
use crate::ir::{Function, Node, Op, ValueId};
use crate::tensor::control::{counted_while, multi, project_from};
use crate::tensor::{emit, inline, producer, value_of};
use crate::{DType, Shape, Tensor};

/// What the forward pass of a control-flow op kept for its derivative.
pub(crate) enum Saved {
    Call {
        name: Arc<str>,
        bwd: Arc<Function>,
        residuals: Vec<Tensor>,
        free_used: Vec<usize>,
        outs: Vec<Shape>,
    },
    If {
        n_then_captures: usize,
        then: Arc<Function>,
        other: Arc<Function>,
        then_residuals: Vec<Tensor>,
        other_residuals: Vec<Tensor>,
        then_free: Vec<usize>,
        other_free: Vec<usize>,
        outs: Vec<Shape>,
    },
    Loop {
        n_state: usize,
        n_cond_captures: usize,
        bwd: Arc<Function>,
        count: Tensor,
        stacks: Vec<Tensor>,
        free_used: Vec<usize>,
        max_trips: i64,
    },
}

/// Why a rule cannot run, at the line of the node it runs for.
type ErrorAt<'a> = &'a dyn Fn(String) -> GradError;

/// Records in place of `node` (operands already renamed) the op that also
/// gives its residuals, returning it and what its rule needs; `None`
/// where the op keeps its plain rule.
pub(crate) fn save(node: &Node, error: ErrorAt<'_>) -> Result<Option<(ValueId, Saved)>, GradError> {
    let args: Vec<Tensor> = node.args.iter().map(|&a| value_of(a)).collect();
    match &node.op {
        Op::Control(Control::Call {
            name,
            f,
            checkpoint: false,
        }) if !f.results.is_empty() => save_call(&args, name, f).map(Some),
        Op::Control(Control::If {
            then,
            other,
            n_then_captures,
        }) if !then.results.is_empty() => save_if(&args, then, other, *n_then_captures).map(Some),
        Op::Control(Control::While {
            cond,
            body,
            n_cond_captures,
            max_trips: Some(m),
        }) if *m > 0 => {
            let loop_ = Loop {
                cond,
                body,
                n_cond_captures: *n_cond_captures,
                max_trips: *m,
            };
            save_loop(&args, loop_, error).map(Some)
        }
        _ => Ok(None),
    }
}

/// The cotangents of the operands `args` of a node from those of its
/// results, from what [`save`] kept.
pub(crate) fn restore(
    saved: &Saved,
    args: &[Tensor],
    cts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
    match saved {
        Saved::Call {
            name,
            bwd,
            residuals,
            free_used,
            outs,
        } => {
            let mut operands = residuals.clone();
            operands.extend(free_used.iter().map(|&k| args[k]));
            operands.extend(seeds(cts, outs));
            let shapes = bwd.result_shapes();
            let op = Op::Control(Control::Call {
                name: format!("{name}_bwd").into(),
                f: bwd.clone(),
                checkpoint: false,
            });
            let grads = multi(op, &operands, &shapes);
            grads[..args.len()].iter().map(|&t| Some(t)).collect()
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
            let (tcaps, ecaps) = args[1..].split_at(*n_then_captures);
            if tcaps.len() + ecaps.len() == 0 {
                return vec![None];
            }
            let seeds = seeds(cts, outs);
            let mut targs = then_residuals.clone();
            targs.extend(then_free.iter().map(|&k| tcaps[k]));
            targs.extend(&seeds);
            let mut eargs = other_residuals.clone();
            eargs.extend(other_free.iter().map(|&k| ecaps[k]));
            eargs.extend(&seeds);
            let tshapes: Vec<Shape> = tcaps.iter().map(Tensor::shape).collect();
            let eshapes: Vec<Shape> = ecaps.iter().map(Tensor::shape).collect();
            let op = Op::Control(Control::If {
                then: Arc::new(with_zeros((**then).clone(), *n_then_captures, &eshapes)),
                other: Arc::new(with_zeros((**other).clone(), 0, &tshapes)),
                n_then_captures: targs.len(),
            });
            let shapes: Vec<Shape> = [&tshapes[..], &eshapes[..]].concat();
            let mut operands = vec![args[0]];
            operands.extend(targs);
            operands.extend(eargs);
            let mut res = vec![None];
            res.extend(multi(op, &operands, &shapes).into_iter().map(Some));
            res
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
            let kept = Kept {
                bwd,
                count: *count,
                stacks,
                free_used,
            };
            restore_loop(args, (*n_state, *n_cond_captures), cts, kept, *max_trips)
        }
    }
}

fn save_call(
    args: &[Tensor],
    name: &Arc<str>,
    f: &Function,
) -> Result<(ValueId, Saved), GradError> {
    let s = residuals::split(f, f.params.len(), Reads::Params)?;
    let outs = f.result_shapes();
    let shapes = s.fwd.result_shapes();
    let op = Op::Control(Control::Call {
        name: format!("{name}_fwd").into(),
        f: Arc::new(s.fwd),
        checkpoint: false,
    });
    let call = emit(op, args, shapes[0]);
    let residuals = project_from(call, outs.len(), &s.residuals);
    let saved = Saved::Call {
        name: name.clone(),
        bwd: Arc::new(s.bwd),
        residuals,
        free_used: s.free_used,
        outs,
    };
    Ok((call.value(), saved))
}

fn save_if(
    args: &[Tensor],
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
    let id = emit(op, args, outs[0]);
    let saved = Saved::If {
        n_then_captures,
        then: Arc::new(t.bwd),
        other: Arc::new(o.bwd),
        then_residuals: project_from(id, n, &t.residuals),
        other_residuals: project_from(id, n + t.residuals.len(), &o.residuals),
        then_free: t.free_used,
        other_free: o.free_used,
        outs,
    };
    Ok((id.value(), saved))
}

/// A bounded `while` of the forward pass.
struct Loop<'a> {
    cond: &'a Function,
    body: &'a Function,
    n_cond_captures: usize,
    max_trips: i64,
}

/// The forward loop: the state, a counter `j` and a stack per residual
/// (`max_trips` rows), running while the loop's own condition holds and
/// `j < max_trips`. Its condition and body use the loop's captures as
/// user code does, from outside (the loop captures them again).
fn save_loop(
    args: &[Tensor],
    l: Loop<'_>,
    error: ErrorAt<'_>,
) -> Result<(ValueId, Saved), GradError> {
    let Loop {
        cond,
        body,
        n_cond_captures,
        max_trips,
    } = l;
    let n_state = body.results.len();
    let s = residuals::split(body, body.params.len(), Reads::Invariant { n_state })?;
    let (states, captures) = args.split_at(n_state);
    let (ccaps, caps) = captures.split_at(n_cond_captures);
    let stacked = stacked_shapes(&s.residuals, max_trips).map_err(error)?;
    let index = |v: i64| Tensor::scalar(v as f64, DType::I32);
    let mut init = states.to_vec();
    init.push(index(0));
    init.extend(stacked.iter().map(|&st| Tensor::zeros(st)));
    let res = counted_while(
        &init,
        |c| {
            let holds = inline(cond, &[&c[..n_state], ccaps].concat())[0];
            holds.and(c[n_state].lt(index(max_trips)))
        },
        |c| {
            let j = c[n_state];
            let res = inline(&s.fwd, &[&c[..n_state], caps].concat());
            let mut out = res[..n_state].to_vec();
            out.push(j + index(1));
            for (&stack, &r) in c[n_state + 1..].iter().zip(&res[n_state..]) {
                out.push(stack.with_row(j, r));
            }
            out
        },
        Some(max_trips),
    );
    let saved = Saved::Loop {
        n_state,
        n_cond_captures,
        bwd: Arc::new(s.bwd),
        count: res[n_state],
        stacks: res[n_state + 1..].to_vec(),
        free_used: s.free_used,
        max_trips,
    };
    Ok((producer(res[0]), saved))
}

/// What the forward loop kept for the backward one.
struct Kept<'a> {
    bwd: &'a Function,
    count: Tensor,
    stacks: &'a [Tensor],
    free_used: &'a [usize],
}

/// The backward loop: `(k, state cotangents, capture cotangents)` from
/// `k = count - 1` down to 0, reading row `k` of each stack.
fn restore_loop(
    args: &[Tensor],
    (n_state, n_cond_captures): (usize, usize),
    cts: &[Option<Tensor>],
    kept: Kept<'_>,
    max_trips: i64,
) -> Vec<Option<Tensor>> {
    let Kept {
        bwd,
        count,
        stacks,
        free_used,
    } = kept;
    let (states, captures) = args.split_at(n_state);
    let caps = &captures[n_cond_captures..];
    // The backward function reads the captures `free_used` names (indices
    // among the body's parameters, the state first).
    let free: Vec<Tensor> = free_used.iter().map(|&k| caps[k - n_state]).collect();
    let index = |v: i64| Tensor::scalar(v as f64, DType::I32);
    let states: Vec<Shape> = states.iter().map(Tensor::shape).collect();
    let mut init = vec![count - index(1)];
    init.extend(seeds(cts, &states));
    init.extend(caps.iter().map(|c| Tensor::zeros(c.shape())));
    let res = counted_while(
        &init,
        |c| c[0].ge(index(0)),
        |c| {
            let (k, ct_state, acc) = (c[0], &c[1..=n_state], &c[1 + n_state..]);
            let mut operands: Vec<Tensor> = stacks.iter().map(|s| s.row(k)).collect();
            operands.extend(&free);
            operands.extend(ct_state);
            let res = inline(bwd, &operands);
            let mut out = vec![k - index(1)];
            out.extend(&res[..n_state]);
            for (c, &a) in acc.iter().enumerate() {
                out.push(match a.dtype().is_float() {
                    true => a + res[n_state + c],
                    false => a,
                });
            }
            out
        },
        Some(max_trips),
    );
    let mut cotangents: Vec<Option<Tensor>> = res[1..=n_state].iter().map(|&t| Some(t)).collect();
    cotangents.extend(std::iter::repeat_n(None, n_cond_captures));
    cotangents.extend(res[1 + n_state..].iter().map(|&t| Some(t)));
    cotangents
}

/// `max_trips` rows of each residual.
fn stacked_shapes(residuals: &[Shape], max_trips: i64) -> Result<Vec<Shape>, String> {
    residuals
        .iter()
        .map(|s| {
            s.insert_axis(0, max_trips, "")
                .ok_or_else(|| "no room for the saved iterations' axis".to_string())
        })
        .collect()
}
