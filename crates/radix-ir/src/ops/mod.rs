//! The op set: one file per op family. Each family is an enum of its ops
//! (or one struct) implementing [`Family`]: the shape rules, the printing
//! and the reference semantics of its ops, each one exhaustive match over
//! the family's own enum; its derivative rules sit beside them. [`Op`]
//! holds the families and the graph's own ops (parameters, projections,
//! sharding constraints, barriers, custom calls). The methods that record
//! the ops while tracing are in the family's file under radix's `tensor/`, which
//! depends on this one and never the other way round.

pub mod constant;
pub mod control;
pub mod convert;
pub mod custom_call;
pub mod dot;
pub mod elementwise;
pub mod indexing;
pub mod reduce;
pub mod shape_ops;
pub mod sharding;
pub mod sort;
pub mod spmd;

use std::sync::Arc;

use crate::Function;
use crate::Shape;
use crate::literal::Literal;
use crate::print::OpPrinter;

pub use constant::Source;
pub use control::Control;
pub use convert::Conversion;
pub use elementwise::Elementwise;
pub use elementwise::{Binary, Compare, Unary};
pub use indexing::Indexing;
pub use reduce::Reduction;
pub use reduce::Window;
pub use shape_ops::Movement;
pub use sort::Order;
pub use sort::Sort;
pub use spmd::Spmd;

/// An op of the IR: a small closed set of StableHLO primitives, grouped in
/// families (one enum and one file each, implementing [`Family`]) beside
/// the few ops that belong to the graph itself. Equality and hashing are
/// structural (bodies compare by their nodes, never their locations), so
/// equal ops merge in CSE wherever they were traced.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// Argument `i` of the function.
    Parameter(usize),
    /// The placeholder produced by a misused op; never printed.
    Poison,
    /// Result `i` of the multi-result op that is its operand; not printed
    /// (its users name `%op#i`).
    Project(usize),
    /// Constants and `iota` (`constant.rs`).
    Source(constant::Source),
    /// An elementwise op (one row of the tables in `elementwise.rs`,
    /// `select` or `clamp`).
    Elementwise(Elementwise),
    /// `convert` and `bitcast_convert` (`convert.rs`).
    Conversion(convert::Conversion),
    /// `stablehlo.dot_general`.
    DotGeneral(dot::DotDims),
    /// The ops that move elements without computing (`shape_ops.rs`).
    Movement(shape_ops::Movement),
    /// `dynamic_slice`, `dynamic_update_slice`, `gather`, `scatter`
    /// (`indexing.rs`).
    Indexing(indexing::Indexing),
    /// `reduce` and `reduce_window` (`reduce.rs`).
    Reduction(reduce::Reduction),
    /// `stablehlo.sort` (`sort.rs`).
    Sort(sort::Sort),
    /// `while`, `if` and `call` (`control.rs`).
    Control(control::Control),
    /// A program per device and its collectives (`spmd.rs`).
    Spmd(spmd::Spmd),
    /// `stablehlo.custom_call @Sharding`: the operand, split as the result
    /// shape's sharding says.
    Sharding,
    /// `stablehlo.optimization_barrier`: its operands, unchanged (one
    /// result each), with no computation moved across it: what uses a
    /// result waits for every operand.
    OptimizationBarrier,
    /// `stablehlo.custom_call` of a Rust kernel, known to the IR as a
    /// [`custom_call::HostKernel`] (several results, read through `Project`
    /// nodes).
    CustomCall(Arc<custom_call::Site>),
}

/// The types of an op's operands or results.
pub type Shapes = Vec<Shape>;

/// What every op family defines in its file, each a match over the
/// family's own enum: its ops' names, shape rule, StableHLO printing and
/// reference semantics. (Derivative rules sit beside them, as `vjp`.)
pub trait Family {
    /// The op's short name for error messages.
    fn name(&self) -> &'static str;
    /// The types of the op's results from its operands' types, or what is
    /// wrong with them; the ops that state their result type in StableHLO
    /// (a constant, `iota`, `convert`, `reshape`, `broadcast_in_dim`) are
    /// given it as `declared` and check it.
    fn infer(&self, args: &[Shape], declared: Shape) -> Result<Shapes, String>;
    /// Prints the op.
    fn print(&self, p: &mut OpPrinter<'_>);
    /// The reference semantics: the results from `args`, the first of type
    /// `shape`.
    fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal>;
}

impl Op {
    /// The family an op belongs to; `None` for the graph's own ops.
    fn family(&self) -> Option<&dyn Family> {
        match self {
            Op::Source(f) => Some(f),
            Op::Elementwise(f) => Some(f),
            Op::Conversion(f) => Some(f),
            Op::DotGeneral(f) => Some(f),
            Op::Movement(f) => Some(f),
            Op::Indexing(f) => Some(f),
            Op::Reduction(f) => Some(f),
            Op::Sort(f) => Some(f),
            Op::Control(f) => Some(f),
            Op::Spmd(f) => Some(f),
            Op::Parameter(_)
            | Op::Poison
            | Op::Project(_)
            | Op::Sharding
            | Op::OptimizationBarrier
            | Op::CustomCall(_) => None,
        }
    }

    /// The op's short name for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Parameter(_) => "parameter",
            Op::Poison => "poison",
            Op::Project(_) => "project",
            Op::Sharding => "sharding",
            Op::OptimizationBarrier => "optimization_barrier",
            Op::CustomCall(_) => "custom_call",
            _ => self.family().map_or("op", |f| f.name()),
        }
    }

    /// The shape rule: the types of the op's results (one, or one per
    /// result of a multi-result op) from its operands' types, or what is
    /// wrong with them ([`Family::infer`]). Parameters and placeholders
    /// state their type, `declared`; a sharding constraint states its
    /// sharding on its operand's type. A `Project` gives `declared`: its
    /// type is its producer's result, which [`Function::rule_type`] reads.
    pub fn infer(&self, args: &[Shape], declared: Shape) -> Result<Shapes, String> {
        match self {
            Op::Parameter(_) | Op::Poison => arity(args, 0).map(|()| vec![declared]),
            Op::Project(_) => arity(args, 1).map(|()| vec![declared]),
            Op::Sharding => arity(args, 1)
                .and_then(|()| same_type(args[0], declared))
                .map(|()| vec![declared]),
            Op::OptimizationBarrier => Ok(args.to_vec()),
            Op::CustomCall(site) => Ok(site.results.clone()),
            _ => self
                .family()
                .map_or(Ok(vec![declared]), |f| f.infer(args, declared)),
        }
    }

    /// Prints the op. Parameters print in the function's signature and
    /// projections as their users' `%op#i`: nothing here.
    pub fn print(&self, p: &mut OpPrinter<'_>) {
        match self {
            Op::Parameter(_) | Op::Poison | Op::Project(_) => {}
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
            _ => {
                if let Some(f) = self.family() {
                    f.print(p)
                }
            }
        }
    }

    /// The reference semantics: the results from `args`, the first of type
    /// `shape`. Parameters, placeholders and projections are the
    /// interpreter's to bind (`ir/interp.rs`); here they give nothing.
    pub fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal> {
        match self {
            Op::Parameter(_) | Op::Poison | Op::Project(_) => vec![],
            Op::Sharding => vec![sharding::eval(args, shape)],
            Op::OptimizationBarrier => args.iter().map(|&a| a.clone()).collect(),
            Op::CustomCall(site) => custom_call::eval(site, args),
            _ => self.family().map_or_else(Vec::new, |f| f.eval(args, shape)),
        }
    }

    /// Whether swapping the op's two operands changes nothing (a property
    /// of its row in the elementwise tables).
    pub fn is_commutative(&self) -> bool {
        match self {
            Op::Elementwise(e) => e.is_commutative(),
            _ => false,
        }
    }

    /// Whether the op has several results (read through `Project` nodes).
    pub fn is_multi(&self) -> bool {
        match self {
            Op::Control(_)
            | Op::Sort(_)
            | Op::OptimizationBarrier
            | Op::CustomCall(_)
            | Op::Spmd(spmd::Spmd::Manual(_)) => true,
            Op::Reduction(reduce::Reduction::Reduce { body, .. }) => body.results.len() > 1,
            _ => false,
        }
    }

    /// Whether the op has an effect besides its results (a side-effecting
    /// custom call, or a block holding one): it is kept without users and
    /// never merged with an equal op.
    pub fn has_side_effect(&self) -> bool {
        match self {
            Op::CustomCall(site) => site.has_side_effect(),
            _ => self.bodies().iter().any(|b| !b.effects.is_empty()),
        }
    }

    /// The nested functions of the op (a custom call's fallback is not one:
    /// it is compiled only in the call's place).
    pub fn bodies(&self) -> Vec<&Function> {
        match self {
            Op::Indexing(indexing::Indexing::Scatter { update: b, .. })
            | Op::Reduction(reduce::Reduction::Reduce { body: b, .. })
            | Op::Reduction(reduce::Reduction::ReduceWindow { body: b, .. })
            | Op::Sort(sort::Sort { comparator: b, .. })
            | Op::Control(control::Control::Call { f: b, .. })
            | Op::Spmd(spmd::Spmd::Manual(spmd::Manual { body: b, .. }))
            | Op::Spmd(spmd::Spmd::AllReduce { body: b, .. })
            | Op::Spmd(spmd::Spmd::ReduceScatter { body: b, .. }) => vec![b],
            Op::Control(control::Control::While { cond, body, .. }) => vec![cond, body],
            Op::Control(control::Control::If { then, other, .. }) => vec![then, other],
            _ => vec![],
        }
    }

    /// The op with `g` applied to each of its [`Op::bodies`].
    pub fn map_bodies(&self, g: &dyn Fn(&Function) -> Function) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Indexing(indexing::Indexing::Scatter { update: b, .. })
            | Op::Reduction(reduce::Reduction::Reduce { body: b, .. })
            | Op::Reduction(reduce::Reduction::ReduceWindow { body: b, .. })
            | Op::Sort(sort::Sort { comparator: b, .. })
            | Op::Control(control::Control::Call { f: b, .. })
            | Op::Spmd(spmd::Spmd::Manual(spmd::Manual { body: b, .. }))
            | Op::Spmd(spmd::Spmd::AllReduce { body: b, .. })
            | Op::Spmd(spmd::Spmd::ReduceScatter { body: b, .. }) => *b = Arc::new(g(b)),
            Op::Control(control::Control::While { cond, body, .. }) => {
                *cond = Arc::new(g(cond));
                *body = Arc::new(g(body));
            }
            Op::Control(control::Control::If { then, other, .. }) => {
                *then = Arc::new(g(then));
                *other = Arc::new(g(other));
            }
            _ => {}
        }
        op
    }
}

/// That `args` holds `n` operands.
pub fn arity(args: &[Shape], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("{} operands, not {n}", args.len()))
    }
}

/// That `a` and `b` have one type (dtype and dims).
pub fn same_type(a: Shape, b: Shape) -> Result<(), String> {
    if a.same_type(&b) {
        Ok(())
    } else {
        Err(format!("{a} and {b} differ"))
    }
}

/// That `s` is a scalar of `dtype` (`None`: of any dtype).
pub fn scalar(s: Shape, dtype: Option<crate::DType>, what: &str) -> Result<(), String> {
    if s.rank() == 0 && dtype.is_none_or(|d| d == s.dtype()) {
        Ok(())
    } else {
        let d = dtype.map_or(String::new(), |d| format!("{d} "));
        Err(format!("{what} is {s}, not a {d}scalar"))
    }
}

/// That `f`'s parameters are `params` and its results `results` (types).
pub fn signature(
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
