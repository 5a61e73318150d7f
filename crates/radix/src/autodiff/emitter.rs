//! The node builder of the derivative rules that save residuals
//! (`control_grad.rs`, `residuals.rs`), which build the bodies of the
//! ops they emit node by node. Every other rule is written with `Tensor`
//! methods.

use std::panic::Location;
use std::sync::Arc;

use crate::autodiff::GradError;
use crate::ir::ops::{Binary, Compare, Movement, Source};
use crate::ir::{Function, Loc, Node, Op, ValueId};
use crate::literal::encode;
use crate::{DType, Shape};

/// What a derivative rule gives: a cotangent per operand of the node (`None`
/// for zero), or why there is none.
pub(crate) type Cotangents = Result<Vec<Option<ValueId>>, GradError>;

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
    pub(crate) fn at(&mut self, id: ValueId, f: &Function) {
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

    /// `b(x, y)` on values of equal dims (the result is shaped as `x`).
    pub(crate) fn binary(&mut self, b: Binary, x: ValueId, y: ValueId) -> ValueId {
        let s = self.shape(x);
        self.emit(b.into(), &[x, y], s)
    }

    /// `x + y`.
    pub(crate) fn add(&mut self, x: ValueId, y: ValueId) -> ValueId {
        self.binary(Binary::Add, x, y)
    }

    /// The bool comparison `x c y`.
    pub(crate) fn compare(&mut self, c: Compare, x: ValueId, y: ValueId) -> ValueId {
        let s = self.shape(x).with_dtype(DType::Bool);
        self.emit(c.into(), &[x, y], s)
    }

    /// `x` with the dims (and tags) of `shape`, its dtype kept.
    pub(crate) fn reshape(&mut self, x: ValueId, shape: Shape) -> ValueId {
        let s = shape.with_dtype(self.shape(x).dtype());
        self.emit(Op::Movement(Movement::Reshape), &[x], s)
    }
}
