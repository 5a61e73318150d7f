//! The op set: one file per op family. Each file holds the shape rules, the
//! printing and the reference semantics of its ops; the methods that record
//! them while tracing are in the family's file under `tensor/`, which
//! depends on this one and never the other way round.

pub mod constant;
pub mod control;
pub(crate) mod control_grad;
pub mod convert;
pub mod custom_call;
pub mod dot;
pub mod elementwise;
pub mod indexing;
pub mod reduce;
pub mod shape_ops;
pub mod sharding;
pub mod sort;

use std::sync::Arc;

use crate::Shape;
use crate::ir::grad::{Cotangents, Emitter};
use crate::ir::print::OpPrinter;
use crate::ir::{Function, Node, ValueId};
use crate::literal::Literal;

pub(crate) use elementwise::Elementwise;
pub use elementwise::{Binary, Compare, Unary};
pub use reduce::Window;
pub use sort::Order;

/// An op of the IR: a small closed set of StableHLO primitives. Equality
/// and hashing are structural (bodies compare by their nodes, never their
/// locations), so equal ops merge in CSE wherever they were traced.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// Argument `i` of the function.
    Parameter(usize),
    /// The placeholder produced by a misused op; never printed.
    Poison,
    /// `stablehlo.constant` with little-endian bytes (one element: a splat).
    Constant(std::sync::Arc<[u8]>),
    /// `stablehlo.iota` along an axis.
    Iota(usize),
    /// An elementwise op (one row of the tables in `elementwise.rs`,
    /// `select` or `clamp`).
    Elementwise(Elementwise),
    /// `stablehlo.convert`.
    Convert,
    /// `stablehlo.bitcast_convert` (widths may differ: see `convert::bitcast_shape`).
    Bitcast,
    /// `stablehlo.dot_general`.
    DotGeneral(dot::DotDims),
    /// `stablehlo.reshape`.
    Reshape,
    /// `stablehlo.transpose` with a permutation.
    Transpose(Vec<usize>),
    /// `stablehlo.broadcast_in_dim`: where each operand axis goes.
    Broadcast(Vec<usize>),
    /// `stablehlo.slice`.
    Slice(shape_ops::SliceSpec),
    /// `stablehlo.concatenate` along an axis.
    Concatenate(usize),
    /// `stablehlo.pad` (operand, padding value).
    Pad(shape_ops::PadSpec),
    /// `stablehlo.reverse` of some axes.
    Reverse(Vec<usize>),
    /// `stablehlo.dynamic_slice` (operand, scalar starts...) with slice sizes.
    DynamicSlice(Vec<i64>),
    /// `stablehlo.dynamic_update_slice` (operand, update, scalar starts...).
    DynamicUpdateSlice,
    /// `stablehlo.gather` of slices along an axis (operand, indices).
    Gather(usize),
    /// `stablehlo.scatter` of slices along an axis (operand, indices,
    /// updates), combining old and new elements with `update`.
    Scatter { axis: usize, update: Arc<Function> },
    /// `stablehlo.reduce` over axes: operands are the tensors, then one
    /// initial value each; `body` is hermetic over scalars (accumulators,
    /// then elements). Several results when it has several operands.
    Reduce {
        body: Arc<Function>,
        axes: Vec<usize>,
    },
    /// `stablehlo.reduce_window` (operand, initial value).
    ReduceWindow {
        body: Arc<Function>,
        window: reduce::Window,
    },
    /// `stablehlo.sort` along an axis, stable, of several operands (one
    /// result each); `comparator` is hermetic over scalars (lhs0, rhs0, ...).
    Sort {
        comparator: Arc<Function>,
        axis: usize,
    },
    /// Result `i` of the multi-result op that is its operand; not printed
    /// (its users name `%op#i`).
    Project(usize),
    /// `stablehlo.while`: operands are the initial state, then the values
    /// `cond` captures, then those `body` captures. `max_trips` bounds the
    /// number of iterations when the bound is known when traced (`for_`
    /// runs exactly that many, `while_bounded` at most): the derivative
    /// rule sizes the saved iterations by it, and has none without it.
    While {
        cond: Arc<Function>,
        body: Arc<Function>,
        n_cond_captures: usize,
        max_trips: Option<i64>,
    },
    /// `stablehlo.if`: operands are the predicate, then the captures of
    /// `then`, then those of `other`.
    If {
        then: Arc<Function>,
        other: Arc<Function>,
        n_then_captures: usize,
    },
    /// `func.call` of the private function `@name` with body `f`. A
    /// `checkpoint`ed call's derivative saves only its arguments and runs
    /// the body again in the backward pass (`radix::checkpoint`); another
    /// saves the body's residuals.
    Call {
        name: Arc<str>,
        f: Arc<Function>,
        checkpoint: bool,
    },
    /// `stablehlo.custom_call @Sharding`: the operand, split as the result
    /// shape's sharding says.
    Sharding,
    /// `stablehlo.optimization_barrier`: its operands, unchanged (one
    /// result each), with no computation moved across it: what uses a
    /// result waits for every operand.
    OptimizationBarrier,
    /// `stablehlo.custom_call` of a Rust kernel declared with
    /// [`crate::custom_call::CustomCall`] (several results, read through
    /// `Project` nodes).
    CustomCall(Arc<custom_call::Site>),
}

impl Op {
    /// The op's short name for error messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Parameter(_) => "parameter",
            Op::Poison => "poison",
            Op::Constant(_) => "constant",
            Op::Iota(_) => "iota",
            Op::Elementwise(e) => e.name(),
            Op::Convert => "convert",
            Op::Bitcast => "bitcast",
            Op::DotGeneral(_) => "dot_general",
            Op::Reshape => "reshape",
            Op::Transpose(_) => "transpose",
            Op::Broadcast(_) => "broadcast",
            Op::Slice(_) => "slice",
            Op::Concatenate(_) => "concatenate",
            Op::Pad(_) => "pad",
            Op::Reverse(_) => "reverse",
            Op::DynamicSlice(_) => "dynamic_slice",
            Op::DynamicUpdateSlice => "dynamic_update_slice",
            Op::Gather(_) => "gather",
            Op::Scatter { .. } => "scatter",
            Op::Reduce { .. } => "reduce",
            Op::ReduceWindow { .. } => "reduce_window",
            Op::Sort { .. } => "sort",
            Op::Project(_) => "project",
            Op::While { .. } => "while",
            Op::If { .. } => "if",
            Op::Call { .. } => "call",
            Op::Sharding => "sharding",
            Op::OptimizationBarrier => "optimization_barrier",
            Op::CustomCall(_) => "custom_call",
        }
    }

    /// The shape rule: the types of the op's results (one, or one per
    /// result of a multi-result op) from its operands' types, or what is
    /// wrong with them. The ops that state their result type in StableHLO
    /// (parameters, constants, `iota`, `convert`, `bitcast_convert`,
    /// `reshape`, `broadcast_in_dim`, a sharding constraint) are given it
    /// as `declared` and check it against their operands; the others
    /// compute theirs. A `Project` gives `declared`: its type is its
    /// producer's result, which [`Function::verify`] compares.
    pub(crate) fn infer(&self, args: &[Shape], declared: Shape) -> Result<Vec<Shape>, String> {
        let one = |s: Result<Shape, String>| s.map(|s| vec![s]);
        match self {
            Op::Parameter(_) | Op::Poison => arity(args, 0).map(|()| vec![declared]),
            Op::Project(_) => arity(args, 1).map(|()| vec![declared]),
            Op::Constant(_) | Op::Iota(_) => one(constant::infer(self, args, declared)),
            Op::Elementwise(e) => one(e.infer(args)),
            Op::Convert | Op::Bitcast => one(convert::infer(self, args, declared)),
            Op::DotGeneral(d) => {
                one(arity(args, 2).and_then(|()| dot::dot_shape(args[0], args[1], d)))
            }
            Op::Reshape
            | Op::Transpose(_)
            | Op::Broadcast(_)
            | Op::Slice(_)
            | Op::Concatenate(_)
            | Op::Pad(_)
            | Op::Reverse(_) => one(shape_ops::infer(self, args, declared)),
            Op::DynamicSlice(_) | Op::DynamicUpdateSlice | Op::Gather(_) | Op::Scatter { .. } => {
                one(indexing::infer(self, args))
            }
            Op::Reduce { .. } | Op::ReduceWindow { .. } => reduce::infer(self, args),
            Op::Sort { comparator, axis } => sort::infer(comparator, *axis, args),
            Op::While { .. } | Op::If { .. } | Op::Call { .. } => control::infer(self, args),
            Op::Sharding => {
                one(arity(args, 1).and_then(|()| same_type(args[0], declared).map(|()| declared)))
            }
            Op::OptimizationBarrier => Ok(args.to_vec()),
            Op::CustomCall(site) => Ok(site.results.clone()),
        }
    }

    /// Prints the op (parameters are printed by the function signature).
    pub(crate) fn print(&self, p: &mut OpPrinter<'_>) {
        match self {
            Op::Parameter(_) | Op::Poison => unreachable!("{self:?} is not printed"),
            Op::Constant(_) | Op::Iota(_) => constant::print(self, p),
            Op::Elementwise(e) => e.print(p),
            Op::Convert | Op::Bitcast => convert::print(self, p),
            Op::DotGeneral(d) => dot::print(d, p),
            Op::Reshape
            | Op::Transpose(_)
            | Op::Broadcast(_)
            | Op::Slice(_)
            | Op::Concatenate(_)
            | Op::Pad(_)
            | Op::Reverse(_) => shape_ops::print(self, p),
            Op::DynamicSlice(_) | Op::DynamicUpdateSlice | Op::Gather(_) | Op::Scatter { .. } => {
                indexing::print(self, p)
            }
            Op::Reduce { .. } | Op::ReduceWindow { .. } => reduce::print(self, p),
            Op::Sort { .. } => sort::print(self, p),
            Op::Project(_) => unreachable!("projections are not printed"),
            Op::While { .. } | Op::If { .. } | Op::Call { .. } => control::print(self, p),
            Op::Sharding => sharding::print(p),
            Op::OptimizationBarrier => {
                let shapes = p.arg_shapes().to_vec();
                p.multi(
                    "stablehlo.optimization_barrier",
                    shapes.len(),
                    &[],
                    "",
                    &shapes,
                )
            }
            Op::CustomCall(site) => custom_call::print(site, p),
        }
    }

    /// The reference semantics: the result of `shape` from `args`.
    pub(crate) fn eval(&self, args: &[&Literal], shape: Shape) -> Literal {
        match self {
            Op::Parameter(_) | Op::Poison => unreachable!("{self:?} is not evaluated"),
            Op::Constant(_) | Op::Iota(_) => constant::eval(self, shape),
            Op::Elementwise(e) => e.eval(args, shape),
            Op::Convert | Op::Bitcast => convert::eval(self, args, shape),
            Op::DotGeneral(d) => dot::eval(d, args, shape),
            Op::Reshape
            | Op::Transpose(_)
            | Op::Broadcast(_)
            | Op::Slice(_)
            | Op::Concatenate(_)
            | Op::Pad(_)
            | Op::Reverse(_) => shape_ops::eval(self, args, shape),
            Op::DynamicSlice(_) | Op::DynamicUpdateSlice | Op::Gather(_) | Op::Scatter { .. } => {
                indexing::eval(self, args, shape)
            }
            Op::Reduce { .. } | Op::ReduceWindow { .. } => reduce::eval(self, args).remove(0),
            Op::Sharding => sharding::eval(args, shape),
            Op::Project(_)
            | Op::OptimizationBarrier
            | Op::While { .. }
            | Op::If { .. }
            | Op::Call { .. }
            | Op::CustomCall(_)
            | Op::Sort { .. } => {
                unreachable!("{} is evaluated by `eval_multi`", self.name())
            }
        }
    }

    /// The derivative rule: the cotangents of `node`'s operands from those
    /// of its results (`cts`, one per result; `out` is the node's value).
    /// Each family's rule sits beside its shape rule and semantics.
    pub(crate) fn vjp(
        &self,
        e: &mut Emitter<'_>,
        node: &Node,
        out: ValueId,
        cts: &[Option<ValueId>],
    ) -> Cotangents {
        match self {
            Op::Parameter(_) | Op::Poison | Op::Project(_) => Ok(vec![]),
            Op::Constant(_) | Op::Iota(_) => Ok(vec![]),
            Op::Elementwise(x) => x.vjp(e, node, out, cts),
            Op::Convert | Op::Bitcast => convert::vjp(self, e, node, cts),
            Op::DotGeneral(d) => dot::vjp(d, e, node, cts),
            Op::Reshape
            | Op::Transpose(_)
            | Op::Broadcast(_)
            | Op::Slice(_)
            | Op::Concatenate(_)
            | Op::Pad(_)
            | Op::Reverse(_) => shape_ops::vjp(self, e, node, cts),
            Op::DynamicSlice(_) | Op::DynamicUpdateSlice | Op::Gather(_) | Op::Scatter { .. } => {
                indexing::vjp(self, e, node, cts)
            }
            Op::Reduce { .. } | Op::ReduceWindow { .. } => reduce::vjp(self, e, node, out, cts),
            Op::Sort { .. } => sort::vjp(self, e, node, out, cts),
            Op::While { .. } | Op::If { .. } | Op::Call { .. } => control::vjp(self, e, node, cts),
            Op::Sharding => Ok(vec![cts[0]]),
            // The cotangents pass as the values did: what the barrier
            // orders is the forward computation.
            Op::OptimizationBarrier => Ok(cts.to_vec()),
            Op::CustomCall(site) => custom_call::vjp(site, e, node, out, cts),
        }
    }

    /// Whether swapping the op's two operands changes nothing (a property
    /// of its row in the elementwise tables).
    pub(crate) fn is_commutative(&self) -> bool {
        match self {
            Op::Elementwise(e) => e.is_commutative(),
            _ => false,
        }
    }

    /// Whether the op has several results (read through `Project` nodes).
    pub(crate) fn is_multi(&self) -> bool {
        match self {
            Op::While { .. }
            | Op::If { .. }
            | Op::Call { .. }
            | Op::Sort { .. }
            | Op::OptimizationBarrier
            | Op::CustomCall(_) => true,
            Op::Reduce { body, .. } => body.results.len() > 1,
            _ => false,
        }
    }

    /// Whether the op has an effect besides its results (a side-effecting
    /// custom call, or a block holding one): it is kept without users and
    /// never merged with an equal op.
    pub(crate) fn has_side_effect(&self) -> bool {
        match self {
            Op::CustomCall(site) => site.has_side_effect(),
            Op::While { cond, body, .. } => !cond.effects.is_empty() || !body.effects.is_empty(),
            Op::If { then, other, .. } => !then.effects.is_empty() || !other.effects.is_empty(),
            Op::Call { f, .. } => !f.effects.is_empty(),
            _ => false,
        }
    }

    /// The nested functions of the op (a custom call's fallback is not one:
    /// it is compiled only in the call's place).
    pub(crate) fn bodies(&self) -> Vec<&Function> {
        match self {
            Op::Scatter { update: b, .. }
            | Op::Reduce { body: b, .. }
            | Op::ReduceWindow { body: b, .. }
            | Op::Sort { comparator: b, .. }
            | Op::Call { f: b, .. } => vec![b],
            Op::While { cond, body, .. } => vec![cond, body],
            Op::If { then, other, .. } => vec![then, other],
            _ => vec![],
        }
    }

    /// The op with `g` applied to each of its [`Op::bodies`].
    pub(crate) fn map_bodies(&self, g: &dyn Fn(&Function) -> Function) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Scatter { update: b, .. }
            | Op::Reduce { body: b, .. }
            | Op::ReduceWindow { body: b, .. }
            | Op::Sort { comparator: b, .. }
            | Op::Call { f: b, .. } => *b = Arc::new(g(b)),
            Op::While { cond, body, .. } => {
                *cond = Arc::new(g(cond));
                *body = Arc::new(g(body));
            }
            Op::If { then, other, .. } => {
                *then = Arc::new(g(then));
                *other = Arc::new(g(other));
            }
            _ => {}
        }
        op
    }

    /// The reference semantics of a multi-result op.
    pub(crate) fn eval_multi(&self, args: &[&Literal]) -> Vec<Literal> {
        match self {
            Op::Reduce { .. } => reduce::eval(self, args),
            Op::Sort { .. } => sort::eval(self, args),
            Op::CustomCall(site) => custom_call::eval(site, args),
            Op::OptimizationBarrier => args.iter().map(|&a| a.clone()).collect(),
            _ => control::eval(self, args),
        }
    }
}

/// That `args` holds `n` operands.
pub(crate) fn arity(args: &[Shape], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("{} operands, not {n}", args.len()))
    }
}

/// That `a` and `b` have one type (dtype and dims).
pub(crate) fn same_type(a: Shape, b: Shape) -> Result<(), String> {
    if a.same_type(&b) {
        Ok(())
    } else {
        Err(format!("{a} and {b} differ"))
    }
}

/// That `s` is a scalar of `dtype` (`None`: of any dtype).
pub(crate) fn scalar(s: Shape, dtype: Option<crate::DType>, what: &str) -> Result<(), String> {
    if s.rank() == 0 && dtype.is_none_or(|d| d == s.dtype()) {
        Ok(())
    } else {
        let d = dtype.map_or(String::new(), |d| format!("{d} "));
        Err(format!("{what} is {s}, not a {d}scalar"))
    }
}

/// That `f`'s parameters are `params` and its results `results` (types).
pub(crate) fn signature(
    f: &Function,
    what: &str,
    params: &[Shape],
    results: &[Shape],
) -> Result<(), String> {
    let p = f.param_shapes();
    let r = f.result_shapes();
    let same = |a: &[Shape], b: &[Shape]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_type(y))
    };
    if same(&p, params) && same(&r, results) {
        Ok(())
    } else {
        Err(format!(
            "the {what} takes {p:?} and gives {r:?}, not {params:?} to {results:?}"
        ))
    }
}
