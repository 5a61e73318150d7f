//! `Tensor`: a handle to a value of the function being traced, and the
//! thread-local builder that records ops into it. The public op methods are
//! in one file per op family below, named as under `ir/ops/`.

pub(crate) mod composite;
pub(crate) mod constant;
pub(crate) mod control;
pub(crate) mod convert;
pub(crate) mod custom_call;
pub(crate) mod dot;
pub(crate) mod elementwise;
pub(crate) mod grad;
pub(crate) mod indexing;
pub(crate) mod reduce;
pub(crate) mod shape_ops;
pub(crate) mod sharding;
pub(crate) mod sort;

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::TraceError;
use crate::ir::{Function, Op, ShapeError, ValueId};
use crate::shape::AxisRef;
use crate::{DType, Shape};

/// A tensor of the function being traced: a cheap `Copy` handle (a value id
/// and its [`Shape`]). Ops on tensors record nodes into the current trace;
/// a misuse records an error (returned later by `compile`) and yields a
/// placeholder so tracing can go on.
#[derive(Clone, Copy)]
pub struct Tensor {
    id: u32,
    trace: u32,
    shape: Shape,
}

impl Tensor {
    /// A tensor standing for an argument: only its shape is known. `compile`
    /// turns the tensors of a model and of the inputs into the executable's
    /// parameters.
    pub fn param(shape: Shape) -> Tensor {
        Tensor {
            id: u32::MAX,
            trace: 0,
            shape,
        }
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.shape.dtype()
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// The sizes of the axes.
    pub fn dims(&self) -> Vec<i64> {
        self.shape.dims().to_vec()
    }

    /// The size of `axis`. A missing axis records a [`TraceError`] at the
    /// caller's line (the trace fails) and gives 1, so tracing goes on.
    #[track_caller]
    pub fn dim(&self, axis: impl Into<AxisRef>) -> i64 {
        let axis = axis.into();
        // A `match`, not a closure: a closure would hide the caller's line.
        match self.shape.dim(axis) {
            Some(n) => n,
            None => {
                report("dim", format!("no axis {axis}"), &[*self]);
                1
            }
        }
    }

    /// The same value with a different shape annotation (same dims and dtype);
    /// used by tag-only ops.
    pub(crate) fn retag(self, shape: Shape) -> Tensor {
        debug_assert_eq!(shape.dims(), self.shape.dims());
        Tensor { shape, ..self }
    }

    pub(crate) fn value(self) -> ValueId {
        ValueId(self.id)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor(%{} {})", self.id, self.shape)
    }
}

/// The recording state of one trace.
pub(crate) struct Builder {
    trace: u32,
    pub(crate) function: Function,
    error: Option<TraceError>,
    /// The enclosing traces whose values this one may capture (an open
    /// block's chain up to the first hermetic block), innermost last.
    open_parents: Vec<u32>,
    /// All enclosing traces and whether this block is hermetic (for errors).
    enclosing: Vec<u32>,
    /// The kind of block being traced, for error messages.
    kind: &'static str,
    /// Captured values: the outer tensor and the parameter standing for it.
    captures: Vec<(Tensor, Tensor)>,
    /// The order token of this block's last collective across processes
    /// (`collective`), which the next one takes as an operand.
    order: Option<Tensor>,
    /// Where the nodes recorded now are located, instead of the line that
    /// records them: derivative rules append to a function being
    /// differentiated, and their nodes belong to the user's line of the
    /// node whose rule runs, not to the rule's own line.
    at: Option<&'static Location<'static>>,
}

thread_local! {
    static BUILDER: RefCell<Builder> = RefCell::new(Builder::new());
}

impl Builder {
    fn new() -> Builder {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        Builder {
            trace: NEXT.fetch_add(1, Ordering::Relaxed),
            function: Function::default(),
            error: None,
            open_parents: vec![],
            enclosing: vec![],
            kind: "function",
            captures: vec![],
            order: None,
            at: None,
        }
    }
}

thread_local! {
    /// How many collective call sites the current top-level trace has
    /// numbered (`next_site`).
    static SITES: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f` under a fresh builder and returns what it recorded, with the
/// first trace error if any. Nested traces are allowed.
pub(crate) fn with_trace<R>(f: impl FnOnce() -> R) -> (R, Function, Option<TraceError>) {
    let saved = BUILDER.with(|b| std::mem::replace(&mut *b.borrow_mut(), Builder::new()));
    let saved_sites = SITES.replace(0);
    let res = f();
    SITES.set(saved_sites);
    let done = BUILDER.with(|b| std::mem::replace(&mut *b.borrow_mut(), saved));
    (res, done.function, done.error)
}

/// Runs `f` recording into `function` (a function whose values `f` reads
/// through [`value_of`]), and returns what it recorded, with the first
/// trace error if any. Unlike [`with_trace`], the collective call sites go
/// on being numbered: the derivative rules extend the current trace's
/// program.
pub(crate) fn appending<R>(
    function: Function,
    f: impl FnOnce() -> R,
) -> (R, Function, Option<TraceError>) {
    let mut inner = Builder::new();
    inner.function = function;
    let saved = BUILDER.with(|b| std::mem::replace(&mut *b.borrow_mut(), inner));
    let res = f();
    let done = BUILDER.with(|b| std::mem::replace(&mut *b.borrow_mut(), saved));
    (res, done.function, done.error)
}

/// Runs `f` with the nodes it records located at `loc`, unless a location
/// is already imposed (a derivative rule's): for radix's own nodes made
/// inside a closure, where `#[track_caller]` does not reach, so that they
/// too carry the user's line.
pub(crate) fn located<R>(loc: &'static Location<'static>, f: impl FnOnce() -> R) -> R {
    let imposed = BUILDER.with(|b| b.borrow().at);
    replace_at(Some(imposed.unwrap_or(loc)));
    let res = f();
    replace_at(imposed);
    res
}

/// Locates the nodes recorded from now on at `loc` (see [`Builder::at`]).
pub(crate) fn locate_at(loc: &'static Location<'static>) {
    replace_at(Some(loc));
}

/// Sets where the current trace's nodes are located (`None`: at the line
/// that records each); gives the setting it replaces.
fn replace_at(at: Option<&'static Location<'static>>) -> Option<&'static Location<'static>> {
    BUILDER.with(|b| std::mem::replace(&mut b.borrow_mut().at, at))
}

/// The first trace error recorded so far, taken out of the current trace.
pub(crate) fn take_error() -> Option<TraceError> {
    BUILDER.with(|b| b.borrow_mut().error.take())
}

/// Node `id` of the current trace as a tensor, its axes untagged (the
/// derivative rules work on positions, so the tags of a value and of its
/// cotangent never have to agree).
pub(crate) fn value_of(id: ValueId) -> Tensor {
    BUILDER.with(|b| {
        let b = b.borrow();
        let s = b.function.node(id).shape;
        Tensor {
            id: id.0,
            trace: b.trace,
            shape: Shape::new(s.dtype(), s.dims()),
        }
    })
}

/// The nodes of `g` recorded into the current trace, where each keeps its
/// line, with its parameter `k` standing for `args[k]`; its results.
pub(crate) fn inline(g: &Function, args: &[Tensor]) -> Vec<Tensor> {
    let mut map: Vec<Tensor> = Vec::with_capacity(g.nodes.len());
    for (n, &loc) in g.nodes.iter().zip(&g.locs) {
        let t = match n.op {
            Op::Parameter(k) => args[k],
            _ => {
                let a: Vec<Tensor> = n.args.iter().map(|a| map[a.0 as usize]).collect();
                let at = replace_at(Some(loc));
                let t = record_node(n.op.clone(), &a, Some(n.shape));
                replace_at(at);
                t
            }
        };
        map.push(t);
    }
    g.results.iter().map(|r| map[r.0 as usize]).collect()
}

/// The multi-result node whose result `t` (a `Project` node) is.
pub(crate) fn producer(t: Tensor) -> ValueId {
    BUILDER.with(|b| b.borrow().function.node(t.value()).args[0])
}

/// Runs `f` on the current trace's function (for code that copies nodes
/// in, already checked, or sets its parameters and results; `f` must not
/// trace).
pub(crate) fn with_function<R>(f: impl FnOnce(&mut Function) -> R) -> R {
    BUILDER.with(|b| f(&mut b.borrow_mut().function))
}

/// The order token of the current block's last collective, if it has one.
pub(crate) fn order_token() -> Option<Tensor> {
    BUILDER.with(|b| b.borrow().order)
}

/// Makes `t` the current block's order token.
pub(crate) fn set_order_token(t: Tensor) {
    BUILDER.with(|b| b.borrow_mut().order = Some(t));
}

/// The number of the next collective call site of the current top-level
/// trace, from 0 in tracing order (nested blocks and derivatives included):
/// the same on every process that traces the same program, and distinct
/// between the collectives one executable may run at once.
pub(crate) fn next_site() -> u32 {
    SITES.with(|s| {
        let n = s.get();
        s.set(n.wrapping_add(1));
        n
    })
}

/// Records that `value` may live in parameter `param`'s buffer; an `Err`
/// if `param` is already donated.
pub(crate) fn record_reuse(value: Tensor, param: usize) -> Result<(), String> {
    BUILDER.with(|b| {
        let f = &mut b.borrow_mut().function;
        if f.reuses.iter().any(|r| r.1 == param) {
            return Err(format!("argument {param} is donated twice"));
        }
        f.reuses.push((value.value(), param));
        Ok(())
    })
}

/// The op of `t`'s node in the current trace, if `t` belongs to it.
pub(crate) fn op_of(t: Tensor) -> Option<Op> {
    check_live(&t).ok()?;
    BUILDER.with(|b| Some(b.borrow().function.node(t.value()).op.clone()))
}

/// A traced block: its function (explicit parameters first, then one per
/// captured value), its results and the outer values it captured.
pub(crate) struct Block {
    pub(crate) function: Function,
    pub(crate) results: Vec<Tensor>,
    pub(crate) captures: Vec<Tensor>,
}

/// Traces `f` over parameters of `params` as a nested open block of the
/// current trace (a `while`/`if` body): it may use values of enclosing
/// blocks, captured as extra parameters. Errors inside the block become
/// errors of the current trace.
#[track_caller]
pub(crate) fn trace_open_block(
    kind: &'static str,
    params: &[Shape],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Block {
    trace_block(kind, Captures::Open, params, f)
}

/// Traces `f` over parameters of `params` as a nested hermetic block of the
/// current trace (a reduction or sort body, a `call`ed function, which
/// `kind` names): using a value of an enclosing block records an error at
/// the user's line. Errors inside the block become errors of the current
/// trace.
#[track_caller]
pub(crate) fn trace_hermetic_block(
    kind: &'static str,
    params: &[Shape],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Block {
    trace_block(kind, Captures::Hermetic, params, f)
}

/// Whether a block may use values of enclosing blocks.
#[derive(Clone, Copy, PartialEq)]
enum Captures {
    Open,
    Hermetic,
}

#[track_caller]
fn trace_block(
    kind: &'static str,
    captures: Captures,
    params: &[Shape],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Block {
    let loc = Location::caller();
    let (outer_trace, mut open_parents, mut enclosing) = BUILDER.with(|b| {
        let b = b.borrow();
        (b.trace, b.open_parents.clone(), b.enclosing.clone())
    });
    if captures == Captures::Open {
        open_parents.push(outer_trace);
    } else {
        open_parents.clear();
    }
    enclosing.push(outer_trace);
    let mut inner = Builder::new();
    inner.open_parents = open_parents;
    inner.enclosing = enclosing;
    inner.kind = kind;
    inner.at = BUILDER.with(|b| b.borrow().at);
    let saved = BUILDER.with(|b| std::mem::replace(&mut *b.borrow_mut(), inner));
    let args: Vec<Tensor> = params
        .iter()
        .enumerate()
        .map(|(i, &s)| parameter(i, s, loc))
        .collect();
    let results = f(&args);
    let ids: Vec<ValueId> = results.iter().map(|&t| check_result(t)).collect();
    let mut done = BUILDER.with(|b| std::mem::replace(&mut *b.borrow_mut(), saved));
    done.function.results = ids;
    if let Some(e) = done.error {
        BUILDER.with(|b| {
            let mut b = b.borrow_mut();
            if b.error.is_none() {
                b.error = Some(e);
            }
        });
    }
    Block {
        function: done.function,
        results,
        captures: done.captures.into_iter().map(|c| c.0).collect(),
    }
}

/// The tensor `t` stands for in the current trace: itself, or the
/// parameter capturing it when it belongs to an enclosing open block.
fn capture(t: Tensor) -> Result<Tensor, String> {
    if check_live(&t).is_ok() {
        return Ok(t);
    }
    let (open, enclosing, kind) = BUILDER.with(|b| {
        let b = b.borrow();
        (
            b.open_parents.contains(&t.trace),
            b.enclosing.contains(&t.trace),
            b.kind,
        )
    });
    if !open {
        if enclosing {
            return Err(format!(
                "value %{} {} of an enclosing block is captured by a hermetic {kind}; pass it as an argument",
                t.id, t.shape
            ));
        }
        return check_live(&t).map(|()| t);
    }
    if let Some(c) = BUILDER.with(|b| {
        let b = b.borrow();
        b.captures
            .iter()
            .find(|c| c.0.trace == t.trace && c.0.id == t.id)
            .map(|c| c.1)
    }) {
        // `rename` and `with_tags` emit no op, so two handles of one value
        // may carry other tags: the parameter is this handle's, with its tags.
        return Ok(c.retag(t.shape));
    }
    let index = BUILDER.with(|b| b.borrow().function.params.len());
    let p = parameter(index, t.shape, Location::caller());
    BUILDER.with(|b| b.borrow_mut().captures.push((t, p)));
    Ok(p)
}

/// Adds parameter `index` of `shape` to the current trace.
pub(crate) fn parameter(index: usize, shape: Shape, loc: &'static Location<'static>) -> Tensor {
    push_at(Op::Parameter(index), &[], Some(shape), loc, |f, id| {
        f.params.push(id)
    })
    .expect("a parameter has no operands to reject")
}

/// Records `op` applied to `args`, producing a value of `shape` (its tags;
/// the type must be the one the op's shape rule, [`Op::infer`], gives, or
/// states for the ops that state theirs). Operands the rule rejects fail
/// the trace with its message at the caller's line.
#[track_caller]
pub(crate) fn emit(op: Op, args: &[Tensor], shape: Shape) -> Tensor {
    record_node(op, args, Some(shape))
}

/// Records `op` applied to `args`, of the type its shape rule gives (with
/// the tags the rule gives), or why the op is misused; for the ops that
/// compute their type (not `reshape`, `broadcast_in_dim`, `convert`, ...,
/// which state it: see [`record`]).
#[track_caller]
pub(crate) fn record_inferred(
    name: &'static str,
    args: &[Tensor],
    op: Result<Op, String>,
) -> Tensor {
    match op {
        Ok(op) => record_node(op, args, None),
        Err(msg) => fail(name, msg, args, fallback_shape(args)),
    }
}

/// Records `res` (an op and the result type it states, or why the op is
/// misused).
#[track_caller]
pub(crate) fn record(
    name: &'static str,
    args: &[Tensor],
    res: Result<(Op, Shape), String>,
) -> Tensor {
    match res {
        Ok((op, shape)) => emit(op, args, shape),
        Err(msg) => fail(name, msg, args, fallback_shape(args)),
    }
}

/// The placeholder type of a misused op's result.
fn fallback_shape(args: &[Tensor]) -> Shape {
    args.first().map_or(Shape::scalar(DType::F32), |a| a.shape)
}

/// `op` on `args` (captured into an open block where they come from
/// outside it), of type `stated` or, without one, the one its shape rule
/// gives from the tensors' shapes (with their tags); a node the rule
/// rejects fails the trace.
#[track_caller]
fn record_node(op: Op, args: &[Tensor], stated: Option<Shape>) -> Tensor {
    let name = op.name();
    let fallback = stated.unwrap_or_else(|| fallback_shape(args));
    let live = match args
        .iter()
        .map(|&a| capture(a))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(live) => live,
        Err(msg) => return fail(name, msg, args, fallback),
    };
    // A match, not a closure: `fail` and `push_at` name the caller's line
    // (`#[track_caller]` does not reach into a closure).
    match push_at(op, &live, stated, Location::caller(), |_, _| {}) {
        Ok(t) => t,
        Err(e) => fail(name, e.message, args, fallback),
    }
}

/// The values `op` on `args` gives (captured as [`record_node`] does),
/// typed by one run of its shape rule: the node, or a `Project` of it per
/// result ([`Function::push_seen_all`]); `Err` says why the rule rejects it.
#[track_caller]
pub(crate) fn record_all(
    op: Op,
    args: &[Tensor],
    stated: Option<&[Shape]>,
) -> Result<Vec<Tensor>, String> {
    let live = args
        .iter()
        .map(|&a| capture(a))
        .collect::<Result<Vec<_>, _>>()?;
    let seen: crate::ir::ops::Shapes = live.iter().map(|a| a.shape).collect();
    let loc = Location::caller();
    BUILDER.with(|b| {
        let mut b = b.borrow_mut();
        let ids = live.iter().map(|a| a.value()).collect();
        let (loc, trace) = (b.at.unwrap_or(loc), b.trace);
        let values = b.function.push_seen_all(op, ids, &seen, stated, loc);
        let values = values.map_err(|e| e.message)?;
        Ok(values
            .into_iter()
            .map(|(id, shape)| Tensor {
                id: id.0,
                trace,
                shape,
            })
            .collect())
    })
}

/// Records a misuse of op `name` and returns a placeholder of `shape`.
#[track_caller]
pub(crate) fn fail(name: &'static str, message: String, args: &[Tensor], shape: Shape) -> Tensor {
    report(name, message, args);
    push_at(Op::Poison, &[], Some(shape), Location::caller(), |_, _| {})
        .expect("a placeholder has no operands to reject")
}

/// Records a misuse of op `name` on `args` at the caller's line, unless the
/// trace already failed.
#[track_caller]
fn report(name: &'static str, message: String, args: &[Tensor]) {
    let loc = Location::caller();
    BUILDER.with(|b| {
        let mut b = b.borrow_mut();
        let loc = b.at.unwrap_or(loc);
        if b.error.is_none() {
            b.error = Some(TraceError {
                op: name,
                message,
                shapes: args.iter().map(|a| a.shape).collect(),
                file: loc.file(),
                line: loc.line(),
                column: loc.column(),
            });
        }
    });
}

/// Records `error` (found away from the op's call, such as a missing
/// derivative rule) unless the trace already failed.
pub(crate) fn report_error(error: TraceError) {
    BUILDER.with(|b| {
        let mut b = b.borrow_mut();
        if b.error.is_none() {
            b.error = Some(error);
        }
    });
}

/// The value of result `t`, recording an error if it is not of this trace.
#[track_caller]
pub(crate) fn check_result(t: Tensor) -> ValueId {
    match capture(t) {
        Ok(t) => t.value(),
        Err(msg) => fail("result", msg, &[t], t.shape).value(),
    }
}

fn check_live(t: &Tensor) -> Result<(), String> {
    let trace = BUILDER.with(|b| b.borrow().trace);
    if t.id == u32::MAX {
        Err(format!(
            "a Tensor::param {} used outside compile; pass it as an input",
            t.shape
        ))
    } else if t.trace != trace {
        Err(format!(
            "a tensor {} of another trace (captured from outside?)",
            t.shape
        ))
    } else {
        Ok(())
    }
}

fn push_at(
    op: Op,
    args: &[Tensor],
    stated: Option<Shape>,
    loc: &'static Location<'static>,
    then: impl FnOnce(&mut Function, ValueId),
) -> Result<Tensor, ShapeError> {
    let seen: crate::ir::ops::Shapes = args.iter().map(|a| a.shape).collect();
    BUILDER.with(|b| {
        let mut b = b.borrow_mut();
        let ids = args.iter().map(|a| a.value()).collect();
        let loc = b.at.unwrap_or(loc);
        let (id, shape) = b.function.push_seen(op, ids, &seen, stated, loc)?;
        then(&mut b.function, id);
        Ok(Tensor {
            id: id.0,
            trace: b.trace,
            shape,
        })
    })
}
