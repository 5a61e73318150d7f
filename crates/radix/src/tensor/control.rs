//! Control flow over nested blocks: [`while_`] (`stablehlo.while`),
//! [`while_bounded`] (one with at most so many iterations, which has a
//! derivative), [`for_`] (a counted `while` stacking per-step results),
//! [`if_`] (`stablehlo.if`), and [`call`] and [`checkpoint`] (`func.call`
//! of a private `func.func`).
//!
//! `while` and `if` bodies are *open* blocks: they may use tensors of the
//! enclosing code, which the regions name directly. A `call`ed function is
//! *hermetic*: using an outer tensor in it is an error. Ops with several
//! results produce one node and a `Project` node per result.
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/control.rs`.

use crate::ir::Op;
use crate::ir::ops::Control;
use crate::module::Module;
use crate::tensor::{
    Block, emit, fail, located, record_all, trace_hermetic_block, trace_open_block,
};
use crate::{DType, Shape, Tensor};
use std::panic::Location;
use std::sync::Arc;

/// Repeats `body` on a state of tensors, starting from `init`, while `cond`
/// (a scalar bool) holds; returns the final state (`stablehlo.while`). Both
/// closures see the state and may use tensors from the enclosing code.
/// `body` must return tensors of the state's shapes; the results keep the
/// tags of `init`. Its derivative ([`crate::grad`]) needs a bound on the
/// iterations: write such a loop with [`while_bounded`].
#[track_caller]
pub fn while_(
    init: &[Tensor],
    cond: impl FnOnce(&[Tensor]) -> Tensor,
    body: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    counted_while(init, cond, body, None)
}

/// [`while_`] that stops after at most `max_trips` iterations, even while
/// `cond` still holds, so that it has a reverse-mode derivative: the
/// gradient saves what each iteration's derivative reads, `max_trips`
/// rows of it whatever the number of iterations run (as JAX, which
/// differentiates a `while_loop` only in forward mode, differentiates a
/// `scan` of known length), and runs the iterations that ran backwards.
///
/// ```
/// # fn main() -> radix::Result<()> {
/// use radix::testing::{assert_close, run, Tol};
/// use radix::{DType, Literal, Tensor};
/// // Doubles x until it reaches 10: 1.5 → 12 after three doublings, so
/// // the derivative is 2³.
/// let x = Literal::from_slice(&[1.5f32], &[]);
/// let out = run(&[x], |xs| {
///     radix::grad(
///         |x: &Tensor, _: &()| {
///             radix::while_bounded(
///                 16,
///                 &[*x],
///                 |s| s[0].lt(Tensor::scalar(10.0, DType::F32)),
///                 |s| vec![s[0] * 2.0],
///             )[0]
///         },
///         &xs[0],
///         &(),
///     )
/// })?;
/// assert_close(&out[0], &[8.0], Tol::ulps(DType::F32, 1.0));
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn while_bounded(
    max_trips: i64,
    init: &[Tensor],
    cond: impl FnOnce(&[Tensor]) -> Tensor,
    body: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    // The counter's nodes are at the caller's line; the user's closures
    // keep their own lines.
    let loc = Location::caller();
    let index = |v: i64| located(loc, || Tensor::scalar(v as f64, DType::I32));
    let mut state = vec![index(0)];
    state.extend_from_slice(init);
    let res = counted_while(
        &state,
        |s| {
            let holds = cond(&s[1..]);
            located(loc, || s[0].lt(index(max_trips)).and(holds))
        },
        |s| {
            let rest = body(&s[1..]);
            let mut next = vec![located(loc, || s[0] + index(1))];
            next.extend(rest);
            next
        },
        Some(max_trips.max(0)),
    );
    res[1..].to_vec()
}

/// [`while_`], knowing a bound on the number of iterations when it is
/// `Some` (for the derivative rule).
#[track_caller]
pub(crate) fn counted_while(
    init: &[Tensor],
    cond: impl FnOnce(&[Tensor]) -> Tensor,
    body: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
    max_trips: Option<i64>,
) -> Vec<Tensor> {
    let shapes: Vec<Shape> = init.iter().map(|t| t.shape()).collect();
    let c = trace_open_block("while condition", &shapes, |s| vec![cond(s)]);
    let b = trace_open_block("while body", &shapes, body);
    let cs = c.results[0].shape();
    if cs.rank() != 0 || cs.dtype() != DType::Bool {
        return poison(
            "while",
            format!("the condition gives {cs}, not a bool scalar"),
            init,
            &shapes,
        );
    }
    if let Err(msg) = same_layout(&shapes, &b.results) {
        return poison(
            "while",
            format!("the body changes the state: {msg}"),
            init,
            &shapes,
        );
    }
    let mut args = init.to_vec();
    args.extend(&c.captures);
    args.extend(&b.captures);
    let op = Op::Control(Control::While {
        n_cond_captures: c.captures.len(),
        cond: Arc::new(c.function),
        body: Arc::new(b.function),
        max_trips,
    });
    multi(op, &args, &shapes)
}

/// Runs `body(i, state)` for `i` in `0..n` (an `i32` scalar) threading the
/// state from `init`; returns the final state and the per-step outputs of
/// `body` stacked along a new leading axis tagged `axis`. `body` is traced
/// twice (once to learn the output shapes), so it must be `Fn`.
#[track_caller]
pub fn for_(
    n: i64,
    axis: &str,
    init: &[Tensor],
    body: impl Fn(Tensor, &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>),
) -> (Vec<Tensor>, Vec<Tensor>) {
    let mut shapes = vec![Shape::scalar(DType::I32)];
    shapes.extend(init.iter().map(|t| t.shape()));
    let probe = trace_open_block("for body", &shapes, |s| {
        let (_, out) = body(s[0], &s[1..]);
        out
    });
    let stacked: Vec<Shape> = probe
        .results
        .iter()
        .map(|t| t.shape().insert_axis(0, n, axis).unwrap_or(t.shape()))
        .collect();
    // The counter's and the stacks' nodes are at the caller's line; the
    // user's body keeps its own lines.
    let loc = Location::caller();
    let index = |v: i64| located(loc, || Tensor::scalar(v as f64, DType::I32));
    let mut state = vec![index(0)];
    state.extend_from_slice(init);
    state.extend(located(loc, || {
        stacked
            .iter()
            .map(|&s| Tensor::zeros(s))
            .collect::<Vec<_>>()
    }));
    let k = init.len();
    let res = counted_while(
        &state,
        |s| located(loc, || s[0].lt(index(n))),
        |s| {
            let i = s[0];
            let (next, out) = body(i, &s[1..=k]);
            located(loc, || {
                let mut res = vec![i + index(1)];
                res.extend(next);
                for (acc, o) in s[k + 1..].iter().zip(out) {
                    res.push(acc.with_row(i, o));
                }
                res
            })
        },
        Some(n.max(0)),
    );
    (res[1..=k].to_vec(), res[k + 1..].to_vec())
}

/// `then()` if the scalar bool `pred` holds, else `other()` (`stablehlo.if`).
/// Both branches may use tensors of the enclosing code and must give tensors
/// of equal shapes and tags.
#[track_caller]
pub fn if_(
    pred: Tensor,
    then: impl FnOnce() -> Vec<Tensor>,
    other: impl FnOnce() -> Vec<Tensor>,
) -> Vec<Tensor> {
    let t = trace_open_block("if branch", &[], |_| then());
    let e = trace_open_block("if branch", &[], |_| other());
    let shapes: Vec<Shape> = t.results.iter().map(|r| r.shape()).collect();
    let ps = pred.shape();
    if ps.rank() != 0 || ps.dtype() != DType::Bool {
        return poison(
            "if",
            format!("the predicate is {ps}, not a bool scalar"),
            &[pred],
            &shapes,
        );
    }
    let other_shapes: Vec<Shape> = e.results.iter().map(|r| r.shape()).collect();
    if shapes != other_shapes {
        return poison(
            "if",
            format!("the branches give {shapes:?} and {other_shapes:?}"),
            &[pred],
            &shapes,
        );
    }
    let mut args = vec![pred];
    args.extend(&t.captures);
    args.extend(&e.captures);
    let op = Op::Control(Control::If {
        then: Arc::new(t.function),
        other: Arc::new(e.function),
        n_then_captures: t.captures.len(),
    });
    multi(op, &args, &shapes)
}

/// Calls `f` on `args` through a private function (`func.call`) printed
/// as `@{name}_{hash}`, where the hash is the body's structure: the body is
/// emitted once per distinct body and argument shapes (tags and sharding
/// included), however often it is called, so a stack of equal layers emits
/// one function, under the same name in every run and build. `f` is traced
/// as a hermetic block: it may use only `args` (tensors and plain values
/// alike, whose values shape the body). The results keep their tags.
#[track_caller]
pub fn call<A: Module + Clone, O: Module + Clone>(name: &str, f: fn(&A) -> O, args: &A) -> O {
    called(name, f, args, false)
}

/// [`call`], rematerialized under [`crate::grad`] (`jax.checkpoint`): the
/// derivative saves nothing of the body but its arguments and runs the
/// body again in the backward pass, where a plain `call` keeps the body's
/// residuals (its intermediate values) from the forward pass until the
/// backward one. A stack of checkpointed blocks holds one block's
/// intermediates at a time, for one more forward pass of each.
///
/// ```
/// # fn main() -> radix::Result<()> {
/// use radix::testing::{assert_close, run, Tol};
/// use radix::{DType, Literal, Tensor};
/// fn block(x: &Tensor) -> Tensor {
///     x.tanh() * *x
/// }
/// let x = Literal::from_slice(&[0.5f64, -1.0], &[2]);
/// let out = run(&[x], |xs| {
///     let plain = radix::grad(|x: &Tensor, _: &()| radix::call("block", block, x).sum(0), &xs[0], &());
///     let remat =
///         radix::grad(|x: &Tensor, _: &()| radix::checkpoint("block", block, x).sum(0), &xs[0], &());
///     (plain, remat)
/// })?;
/// let want: Vec<f64> = out[0].data().to_vec();
/// assert_close(&out[1], &want, Tol::ulps(DType::F64, 0.0));
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn checkpoint<A: Module + Clone, O: Module + Clone>(name: &str, f: fn(&A) -> O, args: &A) -> O {
    called(name, f, args, true)
}

/// `values` unchanged (`stablehlo.optimization_barrier`, JAX's
/// `lax.optimization_barrier`), but XLA moves no computation across the
/// barrier: what uses a result waits for every value. Tying a value to
/// another delays the work on it until the other exists; a derivative rule
/// that decodes a quantized weight ties the weight to the incoming
/// cotangent, so each layer's weight is decoded when the backward pass
/// reaches that layer, not all at the start.
///
/// ```
/// # fn main() -> radix::Result<()> {
/// use radix::testing::run;
/// use radix::Literal;
/// let x = Literal::from_slice(&[1.5f32, -2.0], &[2]);
/// let out = run(&[x], |xs| {
///     let tied = radix::optimization_barrier(&[xs[0], xs[0] * 2.0]);
///     tied[0] + tied[1]
/// })?;
/// assert_eq!(out[0].data(), [4.5, -6.0]);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn optimization_barrier(values: &[Tensor]) -> Vec<Tensor> {
    let shapes: Vec<Shape> = values.iter().map(|t| t.shape()).collect();
    multi(Op::OptimizationBarrier, values, &shapes)
}

/// [`call`] or [`checkpoint`].
#[track_caller]
fn called<A: Module + Clone, O: Module + Clone>(
    name: &str,
    f: fn(&A) -> O,
    args: &A,
    checkpoint: bool,
) -> O {
    let tensors = crate::module::tensors(args);
    let shapes: Vec<Shape> = tensors.iter().map(|t| t.1.shape()).collect();
    let mut out: Option<O> = None;
    let Block {
        function, results, ..
    } = trace_hermetic_block("called function", &shapes, |params| {
        let mut a = args.clone();
        let mut k = 0;
        a.visit_mut(&mut String::new(), &mut |_, t| {
            *t = params[k];
            k += 1;
        });
        let o = f(&a);
        let res = crate::module::tensors(&o)
            .into_iter()
            .map(|t| t.1)
            .collect();
        out = Some(o);
        res
    });
    let name = crate::ir::private_name(name, &function);
    let result_shapes: Vec<Shape> = results.iter().map(|r| r.shape()).collect();
    let inputs: Vec<Tensor> = tensors.iter().map(|t| t.1).collect();
    let res = multi(
        Op::Control(Control::Call {
            name,
            f: Arc::new(function),
            checkpoint,
        }),
        &inputs,
        &result_shapes,
    );
    let mut out = out.expect("the body ran");
    let mut k = 0;
    out.visit_mut(&mut String::new(), &mut |_, t| {
        *t = res[k];
        k += 1;
    });
    out
}

/// Emits a multi-result `op` and one `Project` per result, of `shapes`
/// (which must be the op's rule's).
#[track_caller]
pub(crate) fn multi(op: Op, args: &[Tensor], shapes: &[Shape]) -> Vec<Tensor> {
    if shapes.is_empty() {
        return vec![];
    }
    let name = op.name();
    record_all(op, args, Some(shapes)).unwrap_or_else(|msg| poison(name, msg, args, shapes))
}

/// Results `from..` of the multi-result value `v`, of `shapes` (a
/// `Project` node each).
#[track_caller]
pub(crate) fn project_from(v: Tensor, from: usize, shapes: &[Shape]) -> Vec<Tensor> {
    // A loop, not a closure: the projections are at the caller's line too
    // (`#[track_caller]` does not reach into a closure).
    let mut results = Vec::with_capacity(shapes.len());
    for (k, &s) in shapes.iter().enumerate() {
        results.push(emit(Op::Project(from + k), &[v], s));
    }
    results
}

/// Records `op` on `args` with its results typed by its shape rule (with
/// the tags the rule gives): a multi-result op and a `Project` per
/// result, or the one value of another op; placeholders shaped as
/// `fallback` when the rule rejects the operands.
#[track_caller]
pub(crate) fn record_multi(
    name: &'static str,
    op: Op,
    args: &[Tensor],
    fallback: &[Shape],
) -> Vec<Tensor> {
    record_all(op, args, None).unwrap_or_else(|msg| poison(name, msg, args, fallback))
}

/// Records a misuse of op `name` and returns placeholders of `shapes`.
#[track_caller]
pub(crate) fn poison(
    name: &'static str,
    msg: String,
    args: &[Tensor],
    shapes: &[Shape],
) -> Vec<Tensor> {
    let first = shapes.first().copied().unwrap_or(Shape::scalar(DType::F32));
    let first = fail(name, msg, args, first);
    let mut res = vec![first];
    res.extend(
        shapes
            .iter()
            .skip(1)
            .map(|&s| fail(name, String::new(), args, s)),
    );
    res.truncate(shapes.len());
    res
}

fn same_layout(want: &[Shape], got: &[Tensor]) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} tensors in, {} out", want.len(), got.len()));
    }
    for (w, g) in want.iter().zip(got) {
        if w.dims() != g.shape().dims() || w.dtype() != g.dtype() {
            return Err(format!("{w} becomes {}", g.shape()));
        }
    }
    Ok(())
}
