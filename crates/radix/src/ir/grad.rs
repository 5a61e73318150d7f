//! Reverse-mode differentiation of a [`Function`]: [`vjp`] appends to a copy
//! of the function the nodes that carry cotangents from its results back to
//! its parameters. It knows no op: each op's derivative rule is its
//! family's `vjp` beside the family's shape rule and semantics (dispatched
//! by `Op::vjp`), written with the node builders of [`Emitter`]. The
//! tracing side (`radix::grad`, `radix::vjp`) is `tensor/grad.rs`.
//!
//! Cotangents exist only for floating-point values: an integer or boolean
//! value gets none, so a derivative through one is zero, never an error. A
//! node none of whose results has a cotangent needs no rule.

use crate::ir::ops::{Control, Conversion, Movement, Reduction, Source};
use std::panic::Location;
use std::sync::Arc;

use crate::ir::ops::control_grad::{self, Saved};
use crate::ir::ops::{Binary, Compare, Unary};
use crate::ir::{Function, Loc, Node, Op, ValueId};
use crate::literal::encode;
use crate::{DType, Shape};

/// Why a function cannot be differentiated: the op and the user's line.
#[derive(Debug, Clone)]
pub(crate) struct GradError {
    pub(crate) op: &'static str,
    pub(crate) message: String,
    pub(crate) shapes: Vec<Shape>,
    pub(crate) loc: &'static Location<'static>,
}

/// What a derivative rule gives: a cotangent per operand of the node (`None`
/// for zero), or why there is none.
pub(crate) type Cotangents = Result<Vec<Option<ValueId>>, GradError>;

/// The vector-Jacobian product of `f` with respect to its first `n_wrt`
/// parameters: a function of `f`'s parameters and one cotangent per result
/// of `f` (appended as parameters, in order), giving `f`'s results, then
/// the cotangent of each of those `n_wrt` parameters (zeros for one that
/// does not reach a result, or is not floating-point).
pub(crate) fn vjp(f: &Function, n_wrt: usize) -> Result<Function, GradError> {
    joint(f, n_wrt).map(|j| j.function)
}

/// A [`vjp`] and where its backward part starts.
pub(crate) struct Joint {
    pub(crate) function: Function,
    /// The nodes before this index compute `f`'s results and the residuals
    /// the control-flow rules save; those from it on carry cotangents
    /// (the first of them are the cotangent parameters).
    pub(crate) boundary: usize,
}

/// [`vjp`], saying where the backward part starts. The forward part is
/// `f`'s nodes, but each control-flow op on the way from a differentiated
/// parameter to a result is replaced by one that also gives the residuals
/// its rule reads (`ir/ops/control_grad.rs`), so the forward pass runs
/// once and the backward pass reads what it saved.
pub(crate) fn joint(f: &Function, n_wrt: usize) -> Result<Joint, GradError> {
    let live = f.reachable();
    // Which nodes depend on a differentiated parameter: only those carry a
    // cotangent to one.
    let mut active = vec![false; f.nodes.len()];
    for p in &f.params[..n_wrt] {
        active[p.0 as usize] = true;
    }
    for (i, n) in f.nodes.iter().enumerate() {
        if n.args.iter().any(|a| active[a.0 as usize]) {
            active[i] = true;
        }
    }
    let f = &fallbacks_where_active(f, &active);
    let mut g = Function::default();
    let loc = f.locs.first().copied().unwrap_or(Location::caller());
    let mut e = Emitter::new(&mut g, loc);
    let mut map: Vec<ValueId> = Vec::with_capacity(f.nodes.len());
    let mut saved: Vec<Option<Saved>> = (0..f.nodes.len()).map(|_| None).collect();
    for (i, n) in f.nodes.iter().enumerate() {
        let node = mapped(n, &map);
        let id = if live[i] && active[i] {
            e.at(ValueId(i as u32), f);
            match control_grad::save(&mut e, &node)? {
                Some((id, s)) => {
                    saved[i] = Some(s);
                    id
                }
                None => e.f.push_rebuilt(node, f.locs[i]),
            }
        } else {
            e.f.push_rebuilt(node, f.locs[i])
        };
        map.push(id);
    }
    e.f.params = f.params.iter().map(|p| map[p.0 as usize]).collect();
    e.f.results = f.results.iter().map(|r| map[r.0 as usize]).collect();
    let boundary = e.f.nodes.len();
    // One slot per result of each node of `f` (`Project` nodes fill their op's).
    let mut cts: Vec<Vec<Option<ValueId>>> = f
        .nodes
        .iter()
        .map(|n| vec![None; if n.op.is_multi() { n_results(n) } else { 1 }])
        .collect();
    e.op = "parameter";
    e.shapes = vec![];
    for (k, &r) in f.results.iter().enumerate() {
        let shape = f.node(r).shape;
        let p = e.parameter(f.params.len() + k, shape);
        if shape.dtype().is_float() {
            accumulate(&mut e, &mut cts[r.0 as usize][0], p, shape);
        }
    }
    for i in (0..f.nodes.len()).rev() {
        let n = &f.nodes[i];
        if !live[i] || !active[i] || cts[i].iter().all(Option::is_none) {
            continue;
        }
        match n.op {
            Op::Parameter(_) => continue,
            Op::Project(k) => {
                let ct = cts[i][0].expect("checked above");
                let owner = n.args[0].0 as usize;
                accumulate(&mut e, &mut cts[owner][k], ct, n.shape);
                continue;
            }
            _ => {}
        }
        e.at(ValueId(i as u32), f);
        let node = mapped(n, &map);
        let res = match &saved[i] {
            Some(s) => control_grad::restore(&mut e, s, &node, &cts[i])?,
            None => n.op.vjp(&mut e, &node, map[i], &cts[i])?,
        };
        for (&a, ct) in n.args.iter().zip(res) {
            let shape = f.node(a).shape;
            if let Some(ct) = ct
                && shape.dtype().is_float()
            {
                accumulate(&mut e, &mut cts[a.0 as usize][0], ct, shape);
            }
        }
    }
    let grads: Vec<ValueId> = f.params[..n_wrt]
        .iter()
        .map(|&p| {
            let shape = f.node(p).shape;
            cts[p.0 as usize][0].unwrap_or_else(|| e.zeros(shape))
        })
        .collect();
    e.f.results.extend(grads);
    crate::ir::verify::debug_check(&g, "differentiation");
    Ok(Joint {
        function: g,
        boundary,
    })
}

/// `f` with each custom call that a gradient flows through (`active`) and
/// that is differentiated through its fallback
/// ([`differentiate_fallback`](crate::custom_call::CustomCallBuilder::differentiate_fallback))
/// replaced by a call of its fallback, node for node, so that its ops are
/// differentiated as any others (`Call`'s rule keeps what their backward
/// pass reads from the forward one).
fn fallbacks_where_active(f: &Function, active: &[bool]) -> Function {
    let mut out = f.clone();
    for (node, _) in out.nodes.iter_mut().zip(active).filter(|(_, a)| **a) {
        if let Op::CustomCall(site) = &node.op
            && site.call.differentiates_fallback()
        {
            let body = site.fallback.clone().expect("registered with a fallback");
            node.op = crate::ir::ops::custom_call::fallback_call(site, body);
        }
    }
    out
}

/// `n` with its operands renamed by `map`.
fn mapped(n: &Node, map: &[ValueId]) -> Node {
    Node {
        op: n.op.clone(),
        args: n.args.iter().map(|a| map[a.0 as usize]).collect(),
        shape: n.shape,
    }
}

/// How many results a multi-result node has.
fn n_results(n: &Node) -> usize {
    match &n.op {
        Op::Control(Control::Call { f: body, .. }) => body.results.len(),
        Op::Control(Control::While { body, .. }) => body.results.len(),
        Op::Control(Control::If { then, .. }) => then.results.len(),
        Op::Reduction(Reduction::Reduce { body, .. }) => body.results.len(),
        Op::Sort(_) | Op::OptimizationBarrier => n.args.len(),
        Op::CustomCall(site) => site.results.len(),
        _ => 1,
    }
}

/// Adds `ct` into `slot`, made of `shape` (a rule may give a cotangent
/// whose tags differ from the value's).
fn accumulate(e: &mut Emitter<'_>, slot: &mut Option<ValueId>, ct: ValueId, shape: Shape) {
    let ct = if e.shape(ct).dims() == shape.dims() && e.shape(ct).dtype() == shape.dtype() {
        ct
    } else {
        e.reshape(ct, shape)
    };
    *slot = Some(match *slot {
        None => ct,
        Some(old) => e.emit(Binary::Add.into(), &[old, ct], shape),
    });
}

/// Appends the nodes of derivative rules to the function being
/// differentiated, located at the line of the node whose rule runs.
pub(crate) struct Emitter<'f> {
    f: &'f mut Function,
    loc: &'static Location<'static>,
    op: &'static str,
    shapes: Vec<Shape>,
}

impl<'f> Emitter<'f> {
    /// An emitter appending to `f` (a body a rule builds) at `loc`.
    pub(crate) fn new(f: &'f mut Function, loc: &'static Location<'static>) -> Emitter<'f> {
        Emitter {
            f,
            loc,
            op: "parameter",
            shapes: vec![],
        }
    }

    /// The nodes of `g` appended with its parameter `k` standing for
    /// `args[k]`; its results.
    pub(crate) fn inline(&mut self, g: &Function, args: &[ValueId]) -> Vec<ValueId> {
        let mut map: Vec<ValueId> = Vec::with_capacity(g.nodes.len());
        for (n, &loc) in g.nodes.iter().zip(&g.locs) {
            let id = match n.op {
                Op::Parameter(k) => args[k],
                _ => {
                    let a: Vec<ValueId> = n.args.iter().map(|a| map[a.0 as usize]).collect();
                    self.f.push_rebuilt(
                        Node {
                            op: n.op.clone(),
                            args: a,
                            shape: n.shape,
                        },
                        loc,
                    )
                }
            };
            map.push(id);
        }
        g.results.iter().map(|r| map[r.0 as usize]).collect()
    }

    /// Locates the nodes emitted next at node `id` of `f`, whose rule runs.
    fn at(&mut self, id: ValueId, f: &Function) {
        let n = f.node(id);
        self.loc = f.loc(id);
        self.op = n.op.name();
        self.shapes = n.args.iter().map(|&a| f.node(a).shape).collect();
    }

    /// Where the nodes emitted now are located.
    pub(crate) fn loc(&self) -> Loc {
        self.loc
    }

    /// Sets the results of the function being built.
    pub(crate) fn finish(&mut self, results: Vec<ValueId>) {
        self.f.results = results;
    }

    /// The shape of `v`.
    pub(crate) fn shape(&self, v: ValueId) -> Shape {
        self.f.node(v).shape
    }

    /// Why the rule of the current node cannot run.
    pub(crate) fn error(&self, message: impl Into<String>) -> GradError {
        GradError {
            op: self.op,
            message: message.into(),
            shapes: self.shapes.clone(),
            loc: self.loc,
        }
    }

    /// Appends `op` applied to `args`, producing `shape`.
    pub(crate) fn emit(&mut self, op: Op, args: &[ValueId], shape: Shape) -> ValueId {
        self.f.push_rebuilt(
            Node {
                op,
                args: args.to_vec(),
                shape,
            },
            self.loc,
        )
    }

    /// Appends parameter `index` of `shape`.
    pub(crate) fn parameter(&mut self, index: usize, shape: Shape) -> ValueId {
        let id = self.emit(Op::Parameter(index), &[], shape);
        self.f.params.push(id);
        id
    }

    /// Result `i` of the multi-result node `v` (a `Project` node).
    pub(crate) fn project(&mut self, v: ValueId, i: usize, shape: Shape) -> ValueId {
        self.emit(Op::Project(i), &[v], shape)
    }

    /// `shape` filled with `v` (a splat constant).
    pub(crate) fn full(&mut self, shape: Shape, v: f64) -> ValueId {
        let bytes: Arc<[u8]> = encode(shape.dtype(), &[v]).into();
        self.emit(Op::Source(Source::Constant(bytes)), &[], shape)
    }

    /// `shape` filled with zeros.
    pub(crate) fn zeros(&mut self, shape: Shape) -> ValueId {
        self.full(shape, 0.0)
    }

    /// `u(a)`.
    pub(crate) fn unary(&mut self, u: Unary, a: ValueId) -> ValueId {
        let s = self.shape(a);
        self.emit(u.into(), &[a], s)
    }

    /// `b(x, y)` on values of equal dims (the result is shaped as `x`).
    pub(crate) fn binary(&mut self, b: Binary, x: ValueId, y: ValueId) -> ValueId {
        let s = self.shape(x);
        self.emit(b.into(), &[x, y], s)
    }

    /// `x + y`.
    pub(crate) fn add(&mut self, x: ValueId, y: ValueId) -> ValueId {
        self.binary(Binary::Add, x, y)
    }

    /// `x - y`.
    pub(crate) fn sub(&mut self, x: ValueId, y: ValueId) -> ValueId {
        self.binary(Binary::Sub, x, y)
    }

    /// `x * y`.
    pub(crate) fn mul(&mut self, x: ValueId, y: ValueId) -> ValueId {
        self.binary(Binary::Mul, x, y)
    }

    /// `x / y`.
    pub(crate) fn div(&mut self, x: ValueId, y: ValueId) -> ValueId {
        self.binary(Binary::Div, x, y)
    }

    /// `-x`.
    pub(crate) fn neg(&mut self, x: ValueId) -> ValueId {
        self.unary(Unary::Neg, x)
    }

    /// `x * c` for a constant `c`.
    pub(crate) fn scale(&mut self, x: ValueId, c: f64) -> ValueId {
        let s = self.shape(x);
        let c = self.full(s, c);
        self.mul(x, c)
    }

    /// The bool comparison `x c y`.
    pub(crate) fn compare(&mut self, c: Compare, x: ValueId, y: ValueId) -> ValueId {
        let s = self.shape(x).with_dtype(DType::Bool);
        self.emit(c.into(), &[x, y], s)
    }

    /// `p ? x : y` elementwise.
    pub(crate) fn select(&mut self, p: ValueId, x: ValueId, y: ValueId) -> ValueId {
        let s = self.shape(x);
        self.emit(
            Op::Elementwise(crate::ir::ops::Elementwise::Select),
            &[p, x, y],
            s,
        )
    }

    /// `p ? x : 0` elementwise.
    pub(crate) fn where_or_zero(&mut self, p: ValueId, x: ValueId) -> ValueId {
        let z = self.zeros(self.shape(x));
        self.select(p, x, z)
    }

    /// `x` converted to `dtype`.
    pub(crate) fn convert(&mut self, x: ValueId, dtype: DType) -> ValueId {
        let s = self.shape(x).with_dtype(dtype);
        self.emit(Op::Conversion(Conversion::Convert), &[x], s)
    }

    /// `x` with the dims (and tags) of `shape`, its dtype kept.
    pub(crate) fn reshape(&mut self, x: ValueId, shape: Shape) -> ValueId {
        let s = shape.with_dtype(self.shape(x).dtype());
        self.emit(Op::Movement(Movement::Reshape), &[x], s)
    }

    /// `x` with axis `k` of the result read from axis `perm[k]`.
    pub(crate) fn transpose(&mut self, x: ValueId, perm: &[usize]) -> ValueId {
        let s = self.shape(x);
        let mut out = Shape::scalar(s.dtype());
        for (k, &p) in perm.iter().enumerate() {
            out = out.insert_axis(k, s.dims()[p], tag(s, p)).unwrap_or(out);
        }
        self.emit(Op::Movement(Movement::Transpose(perm.to_vec())), &[x], out)
    }

    /// `x` broadcast to `shape` (dtype kept), its axis `k` going to `axes[k]`.
    pub(crate) fn broadcast(&mut self, x: ValueId, shape: Shape, axes: &[usize]) -> ValueId {
        let s = shape.with_dtype(self.shape(x).dtype());
        self.emit(Op::Movement(Movement::Broadcast(axes.to_vec())), &[x], s)
    }

    /// The sum of `x` over `axes`, which are removed.
    pub(crate) fn sum(&mut self, x: ValueId, axes: &[usize]) -> ValueId {
        if axes.is_empty() {
            return x;
        }
        let s = self.shape(x);
        let mut out = s;
        let mut sorted = axes.to_vec();
        sorted.sort();
        for &a in sorted.iter().rev() {
            out = out.remove_axis(a).unwrap_or(out);
        }
        let zero = self.zeros(Shape::scalar(s.dtype()));
        let body = scalar_body(s.dtype(), Binary::Add, self.loc);
        self.emit(
            Op::Reduction(Reduction::Reduce {
                body: Arc::new(body),
                axes: sorted,
            }),
            &[x, zero],
            out,
        )
    }

    /// `x` (shaped as `like` but for a rank-0 operand of an elementwise op,
    /// which is broadcast implicitly) summed back to `like`'s shape.
    pub(crate) fn unbroadcast(&mut self, x: ValueId, like: Shape) -> ValueId {
        let s = self.shape(x);
        if like.rank() == 0 && s.rank() > 0 {
            let all: Vec<usize> = (0..s.rank()).collect();
            self.sum(x, &all)
        } else {
            x
        }
    }
}

/// The tag of axis `i` of `s`, or `""`.
pub(crate) fn tag(s: Shape, i: usize) -> &'static str {
    s.tag(i).map_or("", |t| t.as_str())
}

/// The hermetic scalar function `op(p0, p1)` of `dtype` (a reduction or
/// scatter body).
pub(crate) fn scalar_body(dtype: DType, op: Binary, loc: &'static Location<'static>) -> Function {
    let s = Shape::scalar(dtype);
    let mut f = Function::default();
    for i in 0..2 {
        let p = f.push_rebuilt(
            Node {
                op: Op::Parameter(i),
                args: vec![],
                shape: s,
            },
            loc,
        );
        f.params.push(p);
    }
    let r = f.push_rebuilt(
        Node {
            op: op.into(),
            args: f.params.clone(),
            shape: s,
        },
        loc,
    );
    f.results.push(r);
    f
}

/// The binary op a scalar body `(acc, x) -> op(acc, x)` applies, if it is
/// one such op on its two parameters (either order).
pub(crate) fn body_binary(body: &Function) -> Option<Binary> {
    let [r] = body.results[..] else { return None };
    let n = body.node(r);
    let Op::Elementwise(crate::ir::ops::Elementwise::Binary(b)) = n.op else {
        return None;
    };
    let params: Vec<ValueId> = body.params.clone();
    let mut args = n.args.clone();
    args.sort();
    (params.len() == 2 && args == params).then_some(b)
}
