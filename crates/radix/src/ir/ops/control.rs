//! Control flow over nested functions: `stablehlo.while`, `stablehlo.if`
//! and `func.call` of a private `func.func`, printed with their regions and
//! evaluated by interpreting their bodies. Operands are the op's own, then
//! the values each region captures. The tracing side (`while_`, `for_`,
//! `if_`, `call`) is `tensor/control.rs`.

use crate::ir::Function;
use crate::ir::grad::{self, Cotangents, Emitter};
use crate::ir::ops::Compare;
use crate::ir::print::OpPrinter;
use crate::ir::{Node, Op, ValueId, interp};
use crate::literal::Literal;
use crate::{DType, Shape};
use std::sync::Arc;

pub(crate) fn print(op: &Op, p: &mut OpPrinter<'_>) {
    let args: Vec<String> = p.arg_names().iter().map(|s| s.to_string()).collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    match op {
        Op::While {
            cond,
            body,
            n_cond_captures,
            ..
        } => {
            let n = body.results.len();
            let (cc, bc) = refs[n..].split_at(*n_cond_captures);
            let regions = [p.region(0, cond, n, cc), p.region(1, body, n, bc)];
            let shapes: Vec<Shape> = p.arg_shapes()[..n].to_vec();
            p.multi("stablehlo.while", n, &regions, "", &shapes);
        }
        Op::If {
            then,
            other,
            n_then_captures,
        } => {
            let (tc, ec) = refs[1..].split_at(*n_then_captures);
            let regions = [p.region(0, then, 0, tc), p.region(1, other, 0, ec)];
            let shapes: Vec<Shape> = then.results.iter().map(|&r| then.node(r).shape).collect();
            p.multi("stablehlo.if", 1, &regions, "", &shapes);
        }
        Op::Call { name, f } => {
            p.private_function(name, f);
            let shapes: Vec<Shape> = f.results.iter().map(|&r| f.node(r).shape).collect();
            let n = refs.len();
            p.multi("func.call", n, &[], &format!("callee = @{name}"), &shapes);
        }
        _ => unreachable!("{op:?} is not control flow"),
    }
}

/// The results of a multi-result op.
pub(crate) fn eval(op: &Op, args: &[&Literal]) -> Vec<Literal> {
    let owned = |xs: &[&Literal]| xs.iter().map(|&l| l.clone()).collect::<Vec<_>>();
    match op {
        Op::While {
            cond,
            body,
            n_cond_captures,
            ..
        } => {
            let n = body.results.len();
            let (cc, bc) = args[n..].split_at(*n_cond_captures);
            let mut state = owned(&args[..n]);
            loop {
                let mut ca = state.clone();
                ca.extend(owned(cc));
                if interp::eval(cond, &ca)[0].data()[0] == 0.0 {
                    return state;
                }
                state.extend(owned(bc));
                state = interp::eval(body, &state);
            }
        }
        Op::If {
            then,
            other,
            n_then_captures,
        } => {
            let (tc, ec) = args[1..].split_at(*n_then_captures);
            if args[0].data()[0] != 0.0 {
                interp::eval(then, &owned(tc))
            } else {
                interp::eval(other, &owned(ec))
            }
        }
        Op::Call { f, .. } => interp::eval(f, &owned(args)),
        _ => unreachable!("{op:?} is not control flow"),
    }
}

/// The derivative rules. `call`: the derivative of a called function is a
/// called function, `@<name>_vjp` (its [`grad::vjp`]: the body's results
/// and then its arguments' cotangents), so a stack of equal layers still
/// emits one body, and one for their derivative. `while` with a trip count
/// (`for_`): see [`loop_vjp`]. `if` and other loops have no rule.
pub(crate) fn vjp(
    op: &Op,
    e: &mut Emitter<'_>,
    node: &Node,
    cts: &[Option<ValueId>],
) -> Cotangents {
    match op {
        Op::Call { name, f } => call_vjp(name, f, e, node, cts),
        Op::While {
            body,
            n_cond_captures,
            trip_count: Some(n),
            ..
        } => loop_vjp(body, *n_cond_captures, *n, e, node, cts),
        _ => Err(e.error(format!(
            "no derivative rule for {}: write the loop with `for_` (a trip count known when traced)",
            op.name()
        ))),
    }
}

fn call_vjp(
    name: &str,
    f: &Function,
    e: &mut Emitter<'_>,
    node: &Node,
    cts: &[Option<ValueId>],
) -> Cotangents {
    let body = grad::vjp(f, f.params.len())?;
    let n_out = f.results.len();
    let mut args = node.args.clone();
    for (&r, ct) in f.results.iter().zip(cts) {
        let s = f.node(r).shape;
        args.push(ct.unwrap_or_else(|| e.zeros(s)));
    }
    let shapes: Vec<Shape> = body.results.iter().map(|&r| body.node(r).shape).collect();
    let call = e.emit(
        Op::Call {
            name: format!("{name}_vjp").into(),
            f: Arc::new(body),
        },
        &args,
        shapes[0],
    );
    Ok((0..node.args.len())
        .map(|k| Some(e.project(call, n_out + k, shapes[n_out + k])))
        .collect())
}

/// The derivative of a loop of `n` iterations of `body` (state, then the
/// values it captures): a forward loop runs the body again and stacks the
/// state each iteration starts from (`n` times the state's size), then a
/// reverse loop takes the iterations last to first, running the body's
/// [`grad::vjp`] on the saved state to carry the state's cotangent back
/// one step and add up the captures'. The condition's captures get none.
fn loop_vjp(
    body: &Function,
    n_cond_captures: usize,
    n: i64,
    e: &mut Emitter<'_>,
    node: &Node,
    cts: &[Option<ValueId>],
) -> Cotangents {
    let n_state = body.results.len();
    let states: Vec<Shape> = node.args[..n_state].iter().map(|&a| e.shape(a)).collect();
    let caps: Vec<ValueId> = node.args[n_state + n_cond_captures..].to_vec();
    let cap_shapes: Vec<Shape> = caps.iter().map(|&c| e.shape(c)).collect();
    let index = Shape::scalar(DType::I32);
    let stacked: Vec<Shape> = states
        .iter()
        .map(|s| {
            s.insert_axis(0, n, "")
                .ok_or_else(|| e.error("no room for the saved iterations' axis"))
        })
        .collect::<Result<_, _>>()?;
    let loc = node.loc;

    // The forward loop: (state, j, stacks) with the body's captures.
    let mut cond = Function::default();
    counter_below(
        &mut cond,
        &[&states[..], &[index], &stacked[..]].concat(),
        n_state,
        n,
        loc,
    );
    let mut saving = Function::default();
    {
        let mut b = Emitter::new(&mut saving, loc);
        let all: Vec<Shape> = [&states[..], &[index], &stacked[..], &cap_shapes[..]].concat();
        let ps: Vec<ValueId> = all
            .iter()
            .enumerate()
            .map(|(k, &s)| b.parameter(k, s))
            .collect();
        let (state, j) = (&ps[..n_state], ps[n_state]);
        let stacks = &ps[n_state + 1..2 * n_state + 1];
        let mut args = state.to_vec();
        args.extend(&ps[2 * n_state + 1..]);
        let mut res = b.inline(body, &args);
        res.push(next(&mut b, j));
        for k in 0..n_state {
            let row = b.reshape(state[k], states[k].insert_axis(0, 1, "").expect("checked"));
            let zero = b.zeros(index);
            let mut at = vec![stacks[k], row, j];
            at.extend(std::iter::repeat_n(zero, states[k].rank()));
            res.push(b.emit(Op::DynamicUpdateSlice, &at, stacked[k]));
        }
        b.finish(res);
    }
    let mut init = node.args[..n_state].to_vec();
    init.push(e.zeros(index));
    init.extend(stacked.iter().map(|&s| e.zeros(s)));
    let out_shapes: Vec<Shape> = [&states[..], &[index], &stacked[..]].concat();
    let fwd = e.emit(
        Op::While {
            cond: Arc::new(cond),
            body: Arc::new(saving),
            n_cond_captures: 0,
            trip_count: Some(n),
        },
        &[&init[..], &caps[..]].concat(),
        out_shapes[0],
    );
    let saved: Vec<ValueId> = (0..n_state)
        .map(|k| e.project(fwd, n_state + 1 + k, stacked[k]))
        .collect();

    // The reverse loop: (k, state cotangents, capture cotangents) with the
    // saved stacks and the body's captures.
    let joint = grad::vjp(body, n_state + caps.len())?;
    let carried: Vec<Shape> = [&[index], &states[..], &cap_shapes[..]].concat();
    let mut cond = Function::default();
    counter_below(&mut cond, &carried, 0, n, loc);
    let mut back = Function::default();
    {
        let mut b = Emitter::new(&mut back, loc);
        let all: Vec<Shape> = [&carried[..], &stacked[..], &cap_shapes[..]].concat();
        let ps: Vec<ValueId> = all
            .iter()
            .enumerate()
            .map(|(k, &s)| b.parameter(k, s))
            .collect();
        let k = ps[0];
        let ct_state = &ps[1..=n_state];
        let acc = &ps[1 + n_state..1 + n_state + caps.len()];
        let stacks = &ps[1 + n_state + caps.len()..1 + 2 * n_state + caps.len()];
        let cap_values = &ps[1 + 2 * n_state + caps.len()..];
        let last = b.full(index, (n - 1) as f64);
        let i = b.sub(last, k);
        let zero = b.zeros(index);
        let mut args = vec![];
        for m in 0..n_state {
            let mut at = vec![stacks[m], i];
            at.extend(std::iter::repeat_n(zero, states[m].rank()));
            let mut sizes = vec![1];
            sizes.extend(states[m].dims());
            let row_shape = states[m].insert_axis(0, 1, "").expect("checked");
            let row = b.emit(Op::DynamicSlice(sizes), &at, row_shape);
            args.push(b.reshape(row, states[m]));
        }
        args.extend(cap_values);
        args.extend(ct_state);
        let res = b.inline(&joint, &args);
        let mut out = vec![next(&mut b, k)];
        out.extend(&res[n_state..2 * n_state]);
        for (c, &a) in acc.iter().enumerate() {
            let d = res[2 * n_state + c];
            out.push(if cap_shapes[c].dtype().is_float() {
                b.add(a, d)
            } else {
                a
            });
        }
        b.finish(out);
    }
    let mut init = vec![e.zeros(index)];
    for (m, ct) in cts.iter().enumerate() {
        init.push(ct.unwrap_or_else(|| e.zeros(states[m])));
    }
    init.extend(cap_shapes.iter().map(|&s| e.zeros(s)));
    let bwd = e.emit(
        Op::While {
            cond: Arc::new(cond),
            body: Arc::new(back),
            n_cond_captures: 0,
            trip_count: Some(n),
        },
        &[&init[..], &saved[..], &caps[..]].concat(),
        index,
    );
    let mut res: Vec<Option<ValueId>> = (0..n_state)
        .map(|m| Some(e.project(bwd, 1 + m, states[m])))
        .collect();
    res.extend(std::iter::repeat_n(None, n_cond_captures));
    res.extend((0..caps.len()).map(|c| Some(e.project(bwd, 1 + n_state + c, cap_shapes[c]))));
    Ok(res)
}

/// Fills `f` as a loop condition over parameters of `shapes`: whether the
/// `i32` counter at `counter` is below `n`.
fn counter_below(
    f: &mut Function,
    shapes: &[Shape],
    counter: usize,
    n: i64,
    loc: &'static std::panic::Location<'static>,
) {
    let mut b = Emitter::new(f, loc);
    let ps: Vec<ValueId> = shapes
        .iter()
        .enumerate()
        .map(|(k, &s)| b.parameter(k, s))
        .collect();
    let limit = b.full(Shape::scalar(DType::I32), n as f64);
    let below = b.compare(Compare::Lt, ps[counter], limit);
    b.finish(vec![below]);
}

/// `j + 1` for an `i32` counter.
fn next(b: &mut Emitter<'_>, j: ValueId) -> ValueId {
    let one = b.full(Shape::scalar(DType::I32), 1.0);
    b.add(j, one)
}
