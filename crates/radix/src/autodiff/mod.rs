//! Reverse-mode differentiation of a traced [`Function`]: [`vjp`] appends
//! to a copy of the function the nodes that carry cotangents from its
//! results back to its parameters. The driver knows no op: each op
//! family's derivative rule is in a file of its own here, written with
//! [`Tensor`] methods as a user writes a model (as JAX writes its rules
//! with `lax`), and recorded into the function being differentiated at
//! the line of the node whose rule runs. The tracing side (`radix::grad`,
//! `radix::vjp`) is `tensor/grad.rs`.
//!
//! Cotangents exist only for floating-point values: an integer or boolean
//! value gets none, so a derivative through one is zero, never an error. A
//! node none of whose results has a cotangent needs no rule.

mod control;
mod control_grad;
mod custom_call;
mod dot;
mod elementwise;
mod indexing;
mod movement;
mod reduce;
mod residuals;
mod sort;
mod spmd;

use std::panic::Location;

use crate::error::TraceError;
use crate::ir::ops::{Control, Conversion, Reduction};
use crate::ir::{Function, Node, Op, ValueId};
use crate::tensor::{self, value_of};
use crate::{Shape, Tensor};
use control_grad::Saved;

/// Why a function cannot be differentiated: the op and the user's line.
#[derive(Debug, Clone)]
pub(crate) struct GradError {
    pub(crate) op: &'static str,
    pub(crate) message: String,
    pub(crate) shapes: Vec<Shape>,
    pub(crate) loc: &'static Location<'static>,
}

/// What a derivative rule gives: a cotangent per operand of the node
/// (`None` for zero), or why there is none.
pub(crate) type Rule = Result<Vec<Option<Tensor>>, String>;

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
/// its rule reads (`control_grad.rs`), so the forward pass runs
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
    let (res, mut g, error) = tensor::appending(Function::default(), || {
        let (map, saved) = forward(f, &live, &active)?;
        let boundary = tensor::with_function(|g| {
            g.params = f.params.iter().map(|p| map[p.0 as usize]).collect();
            g.results = f.results.iter().map(|r| map[r.0 as usize]).collect();
            g.nodes.len()
        });
        let pass = Backward {
            f,
            live: &live,
            active: &active,
            map: &map,
            saved: &saved,
        };
        Ok((pass.run(n_wrt)?, boundary))
    });
    // Each rule's misuse of an op (a custom call's derivative is user
    // code) is taken as it happens and reported at its node, never a
    // panic; what is left here is the driver's own.
    if let Some(e) = error {
        return Err(rule_failed(f, 0, e));
    }
    let (grads, boundary) = res?;
    g.results.extend(grads);
    crate::ir::verify::debug_check(&g, "differentiation");
    Ok(Joint {
        function: g,
        boundary,
    })
}

/// The forward part of [`joint`], recorded into the current trace: `f`'s
/// nodes (node `i` is the value `map[i]`), each control-flow op a gradient
/// flows through replaced by one that also gives the residuals its rule
/// reads.
fn forward(
    f: &Function,
    live: &[bool],
    active: &[bool],
) -> Result<(Vec<ValueId>, Vec<Option<Saved>>), GradError> {
    let mut map: Vec<ValueId> = Vec::with_capacity(f.nodes.len());
    let mut saved: Vec<Option<Saved>> = (0..f.nodes.len()).map(|_| None).collect();
    for (i, n) in f.nodes.iter().enumerate() {
        let node = mapped(n, &map);
        let kept = match live[i] && active[i] {
            true => {
                tensor::locate_at(f.locs[i]);
                let kept = control_grad::save(&node, &|m| rule_error(f, i, m))?;
                if let Some(e) = tensor::take_error() {
                    return Err(rule_failed(f, i, e));
                }
                kept
            }
            false => None,
        };
        let id = match kept {
            Some((id, s)) => {
                saved[i] = Some(s);
                id
            }
            None => tensor::with_function(|g| g.push_rebuilt(node, f.locs[i])),
        };
        map.push(id);
    }
    Ok((map, saved))
}

/// The backward pass of [`joint`] over `f`, whose node `i` is
/// `map[i]` of the function being built.
struct Backward<'a> {
    f: &'a Function,
    live: &'a [bool],
    active: &'a [bool],
    map: &'a [ValueId],
    saved: &'a [Option<Saved>],
}

impl Backward<'_> {
    /// Seeds the results' cotangents (new parameters), runs the rules from
    /// the last node to the first and gives the cotangents of the first
    /// `n_wrt` parameters.
    fn run(&self, n_wrt: usize) -> Result<Vec<ValueId>, GradError> {
        let f = self.f;
        // One slot per result of each node of `f` (`Project` nodes fill their op's).
        let mut cts: Vec<Vec<Option<Tensor>>> = f
            .nodes
            .iter()
            .map(|n| vec![None; if n.op.is_multi() { n_results(n) } else { 1 }])
            .collect();
        let first = f.locs.first().copied().unwrap_or(Location::caller());
        tensor::locate_at(first);
        for (k, &r) in f.results.iter().enumerate() {
            let shape = untagged(f.node(r).shape);
            let p = tensor::parameter(f.params.len() + k, shape, first);
            if shape.dtype().is_float() {
                accumulate(&mut cts[r.0 as usize][0], p, shape);
            }
        }
        for i in (0..f.nodes.len()).rev() {
            let n = &f.nodes[i];
            if !self.live[i] || !self.active[i] || cts[i].iter().all(Option::is_none) {
                continue;
            }
            match n.op {
                Op::Parameter(_) => continue,
                Op::Project(k) => {
                    let ct = cts[i][0].expect("checked above");
                    let owner = n.args[0].0 as usize;
                    accumulate(&mut cts[owner][k], ct, n.shape);
                    continue;
                }
                _ => {}
            }
            tensor::locate_at(f.locs[i]);
            let res = self.rule(i, &cts[i])?;
            if let Some(e) = tensor::take_error() {
                return Err(rule_failed(f, i, e));
            }
            for (&a, ct) in n.args.iter().zip(res) {
                let shape = f.node(a).shape;
                if let Some(ct) = ct
                    && shape.dtype().is_float()
                {
                    accumulate(&mut cts[a.0 as usize][0], ct, shape);
                }
            }
        }
        Ok(f.params[..n_wrt]
            .iter()
            .map(|&p| match cts[p.0 as usize][0] {
                Some(ct) => ct.value(),
                None => Tensor::zeros(untagged(f.node(p).shape)).value(),
            })
            .collect())
    }

    /// The cotangents of node `i`'s operands from those of its results.
    fn rule(&self, i: usize, cts: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>, GradError> {
        let (f, map) = (self.f, self.map);
        let n = &f.nodes[i];
        let args: Vec<Tensor> = n.args.iter().map(|a| value_of(map[a.0 as usize])).collect();
        let out = value_of(map[i]);
        let error = |message: String| rule_error(f, i, message);
        if let Some(s) = &self.saved[i] {
            return Ok(control_grad::restore(s, &args, cts));
        }
        let g = || cts[0].expect("the driver skips nodes without cotangents");
        match &n.op {
            Op::Parameter(_) | Op::Poison | Op::Project(_) | Op::Source(_) => Ok(vec![]),
            Op::Elementwise(x) => elementwise::vjp(*x, &args, out, g()),
            Op::Conversion(c) => convert(c, args[0], g()),
            Op::DotGeneral(d) => dot::vjp(d, &args, g()),
            Op::Movement(m) => movement::vjp(m, &args, g()),
            Op::Indexing(x) => indexing::vjp(x, &args, g()),
            Op::Reduction(r) => reduce::vjp(r, &args, out, cts),
            Op::Sort(s) => sort::vjp(s, &args, cts),
            Op::Control(c) => return control::vjp(c, &args, cts, error),
            Op::Spmd(s) => return spmd::vjp(s, &args, cts, error),
            Op::Sharding => Ok(vec![cts[0]]),
            // The cotangents pass as the values did: what the barrier
            // orders is the forward computation.
            Op::OptimizationBarrier => Ok(cts.to_vec()),
            // A declared derivative is user code: it sees the operands'
            // and results' tags, as the call did.
            Op::CustomCall(site) => {
                let tagged: Vec<Tensor> = (args.iter().zip(&n.args))
                    .map(|(t, &a)| t.retag(f.node(a).shape))
                    .collect();
                custom_call::vjp(site, &tagged, out, cts)
            }
        }
        .map_err(error)
    }
}

/// `convert` sends the cotangent back in the operand's dtype; a `bitcast`
/// reinterprets bits and has none (an integer operand needs none).
fn convert(c: &Conversion, x: Tensor, g: Tensor) -> Rule {
    let from = x.dtype();
    match c {
        Conversion::Convert if from.is_float() => Ok(vec![Some(g.convert(from))]),
        Conversion::Bitcast if from.is_float() => Err(format!(
            "no derivative through a bitcast of {from}: it reinterprets bits"
        )),
        Conversion::Convert | Conversion::Bitcast => Ok(vec![None]),
    }
}

/// Why node `i` of `f` has no derivative: `message`, at its line.
fn rule_error(f: &Function, i: usize, message: String) -> GradError {
    let n = &f.nodes[i];
    GradError {
        op: n.op.name(),
        message,
        shapes: n.args.iter().map(|&a| f.node(a).shape).collect(),
        loc: f.locs[i],
    }
}

/// The error of a rule that misused an op (radix's fault), at node `i`.
fn rule_failed(f: &Function, i: usize, e: TraceError) -> GradError {
    let n = &f.nodes[i];
    GradError {
        op: n.op.name(),
        message: format!(
            "its derivative rule failed: {} at {}:{}: {}",
            e.op, e.file, e.line, e.message
        ),
        shapes: n.args.iter().map(|&a| f.node(a).shape).collect(),
        loc: f.locs.get(i).copied().unwrap_or(Location::caller()),
    }
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
            && crate::custom_call::declaration(site).differentiates_fallback()
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
        Op::Spmd(crate::ir::ops::Spmd::Manual(m)) => m.body.results.len(),
        Op::Reduction(Reduction::Reduce { body, .. }) => body.results.len(),
        Op::Sort(_) | Op::OptimizationBarrier => n.args.len(),
        Op::CustomCall(site) => site.results.len(),
        _ => 1,
    }
}

/// A cotangent per result, `outs` (zeros where there is none).
fn seeds(cts: &[Option<Tensor>], outs: &[Shape]) -> Vec<Tensor> {
    (cts.iter().zip(outs))
        .map(|(ct, &s)| ct.unwrap_or_else(|| Tensor::zeros(s)))
        .collect()
}

/// `s` without tags: the rules work on positions.
fn untagged(s: Shape) -> Shape {
    Shape::new(s.dtype(), s.dims())
}

/// Adds `ct` into `slot`, a value of `shape` (a rule may give a cotangent
/// of other dims with the same count, as a reshape's operand).
fn accumulate(slot: &mut Option<Tensor>, ct: Tensor, shape: Shape) {
    let ct = if ct.shape().dims() == shape.dims() {
        ct.retag(untagged(ct.shape()))
    } else {
        ct.reshape_to(untagged(shape).with_dtype(ct.dtype()))
    };
    *slot = Some(match slot.take() {
        None => ct,
        Some(old) => old + ct,
    });
}
