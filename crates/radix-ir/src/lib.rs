//! radix's op language: the IR, an SSA graph of ops recorded while tracing,
//! with every op's shape rule, StableHLO printing and reference semantics,
//! and the passes that run on it. It knows nothing of tracing, of
//! differentiation, of custom-call declarations or of PJRT: the `radix`
//! crate builds on it.
//!
//! A [`Function`] holds nodes in creation order (so every operand precedes
//! its user), its parameters and its results. Each node is one op producing
//! one tensor. The op set is a small closed enum, [`Op`]; each op family lives
//! in one file under [`ops`] with its shape rule, StableHLO printing and
//! reference semantics side by side. [`Function::push`], the only way to
//! add a node, checks it by its op's shape rule; [`Function::verify`]
//! re-checks a whole function. The methods recording ops are `radix`'s
//! (`tensor/`), which uses this crate. Composites
//! (softmax, gelu, mean, ...) are built from these primitives and add no op.
//!
//! Nested blocks: ops with regions hold their bodies as nested
//! `Function`s, as traced (the passes optimize them with the function that
//! holds them). `while`/`if` bodies are open (they name
//! enclosing values, passed as extra operands); `call`ed functions and the
//! scalar bodies of `reduce`, `reduce_window`, `sort` and `scatter` are
//! hermetic. The passes optimize each body on its own, then treat it as
//! part of its op: CSE compares it whole. An op with several results is one
//! node followed by a `Project` node per result.

#![warn(missing_docs)]

pub mod interp;
pub mod literal;
pub mod ops;
pub mod passes;
pub mod print;
pub mod shape;
pub mod sharding;
pub mod verify;

pub use ops::{Binary, Compare, Order, Unary, Window};
pub use radix_io::dtype::{DType, Element};
pub use shape::{Axes, AxisRef, Shape, Size, Tag};

use std::panic::Location;

pub use ops::Op;

/// A source location a node was traced at.
pub type Loc = &'static Location<'static>;

/// The id of a node (and of the value it produces) in its function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// A node its op's shape rule rejects: the op and why.
#[derive(Debug, Clone)]
pub struct ShapeError {
    /// The op's name.
    pub op: &'static str,
    /// What is wrong with its operands or stated type.
    pub message: String,
}

/// One op application. Its identity is structural: two nodes are equal
/// (and hash equal) when their ops, operands and shapes are, wherever they
/// were traced; the source location lives beside it ([`Function::locs`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// What the node computes.
    pub op: Op,
    /// Its operands, nodes before it.
    pub args: Vec<ValueId>,
    /// The type of its (first) result, with the tags the tracer gave it.
    pub shape: Shape,
}

/// A traced function: nodes in creation order with their source locations,
/// parameters, results, and the side-effecting nodes, which are kept even
/// when no result needs them. Equality and hashing are structural: they
/// ignore the locations.
#[derive(Debug, Clone, Default)]
pub struct Function {
    /// The nodes, each after its operands; a node's id is its index.
    pub nodes: Vec<Node>,
    /// Where each node was traced, by id (printed as `loc(...)`, named in
    /// errors; never part of what the function computes).
    pub locs: Vec<Loc>,
    /// The `Parameter` nodes, by parameter index.
    pub params: Vec<ValueId>,
    /// The values the function returns, in order.
    pub results: Vec<ValueId>,
    /// `(value, parameter index)` pairs recorded by `reuse_buffer`
    /// while tracing; `trace` turns them into argument aliases.
    pub reuses: Vec<(ValueId, usize)>,
    /// The nodes with side effects ([`Op::has_side_effect`]), in order;
    /// [`Function::push`] records them.
    pub effects: Vec<ValueId>,
}

impl Function {
    /// What equality and hashing compare: everything but the locations.
    #[allow(clippy::type_complexity)]
    fn structure(
        &self,
    ) -> (
        &[Node],
        &[ValueId],
        &[ValueId],
        &[(ValueId, usize)],
        &[ValueId],
    ) {
        let f = self;
        (&f.nodes, &f.params, &f.results, &f.reuses, &f.effects)
    }
}

impl PartialEq for Function {
    fn eq(&self, other: &Function) -> bool {
        self.structure() == other.structure()
    }
}

impl Eq for Function {}

impl std::hash::Hash for Function {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.structure().hash(h);
    }
}

impl Function {
    /// Node `id`.
    pub fn node(&self, id: ValueId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    /// The types of the parameters, in order.
    pub fn param_shapes(&self) -> Vec<Shape> {
        self.params.iter().map(|&p| self.node(p).shape).collect()
    }

    /// The types of the results, in order.
    pub fn result_shapes(&self) -> Vec<Shape> {
        self.results.iter().map(|&r| self.node(r).shape).collect()
    }

    /// Where node `id` was traced.
    pub fn loc(&self, id: ValueId) -> Loc {
        self.locs[id.0 as usize]
    }

    /// A hash of what the function computes ([`Hash`] through xxh64 with a
    /// fixed seed: the same in every run and build). Equal functions hash
    /// equal; `call` names a body by it instead of printing it.
    pub fn structural_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = xxhash_rust::xxh64::Xxh64::new(0);
        self.hash(&mut h);
        h.finish()
    }

    /// Appends `node`, traced at `loc`: with [`Function::push_seen`], the
    /// only way a node is made, so every node of every function is checked
    /// by its op's shape rule as it is made. `node.shape` is the type the
    /// ops that state theirs (a constant, a reshape, ...) are given, and for
    /// the others the tags the caller wants on the rule's type, whose dtype
    /// and dims it must have.
    pub fn push(&mut self, node: Node, loc: Loc) -> Result<ValueId, ShapeError> {
        let seen: ops::Shapes = node
            .args
            .iter()
            .map(|&a| self.nodes.get(a.0 as usize).map_or(node.shape, |n| n.shape))
            .collect();
        self.push_seen(node.op, node.args, &seen, Some(node.shape), loc)
            .map(|(id, _)| id)
    }

    /// Appends `op` applied to `args` as the caller sees them, `seen`: one
    /// type per operand, the operands' own (their tags may differ: the
    /// tracer renames a value's axes without a node), which the shape rule
    /// reads. The node's type is `stated` (which must be the rule's, for
    /// the ops that do not state theirs) or, without one, the rule's with
    /// the tags the rule gives; it is returned with the node.
    pub fn push_seen(
        &mut self,
        op: Op,
        args: Vec<ValueId>,
        seen: &[Shape],
        stated: Option<Shape>,
        loc: Loc,
    ) -> Result<(ValueId, Shape), ShapeError> {
        let error = |message: String| ShapeError {
            op: op.name(),
            message,
        };
        self.check_seen(&args, seen).map_err(error)?;
        let fallback = stated.or(seen.first().copied());
        let fallback = fallback.unwrap_or(Shape::scalar(crate::DType::F32));
        let ty = self
            .rule_type_seen(&op, &args, seen, fallback)
            .map_err(error)?;
        let shape = match stated {
            Some(s) if !s.same_type(&ty) => {
                return Err(error(format!("is typed {s} but its rule gives {ty}")));
            }
            Some(s) => s,
            None => ty,
        };
        Ok((self.append(op, args, shape, loc), shape))
    }

    /// Appends `op` applied to `args` as the caller sees them, `seen`, and
    /// gives the values it yields, typed by one run of its shape rule:
    /// the node itself, or for a multi-result op ([`Op::is_multi`]) one
    /// `Project` of it per result. With `stated` types (which must be the
    /// rule's), they are the values' types, tags and all.
    pub fn push_seen_all(
        &mut self,
        op: Op,
        args: Vec<ValueId>,
        seen: &[Shape],
        stated: Option<&[Shape]>,
        loc: Loc,
    ) -> Result<Vec<(ValueId, Shape)>, ShapeError> {
        let error = |message: String| ShapeError {
            op: op.name(),
            message,
        };
        self.check_seen(&args, seen).map_err(error)?;
        let fallback = stated.and_then(|s| s.first()).or(seen.first()).copied();
        let mut types = op
            .infer(seen, fallback.unwrap_or(Shape::scalar(crate::DType::F32)))
            .map_err(error)?;
        if let Some(stated) = stated {
            if stated.len() != types.len()
                || stated.iter().zip(&types).any(|(s, t)| !s.same_type(t))
            {
                return Err(error(format!(
                    "is typed {stated:?} but its rule gives {types:?}"
                )));
            }
            types = stated.to_vec();
        }
        let Some(&first) = types.first() else {
            return Err(error("gives no values".into()));
        };
        let multi = op.is_multi();
        let node = self.append(op, args, first, loc);
        if !multi {
            return Ok(vec![(node, first)]);
        }
        // The projections' types are the rule's just run, so they are
        // appended as checked (a `Project` pushed alone runs it again).
        Ok(types
            .iter()
            .enumerate()
            .map(|(k, &s)| (self.append(Op::Project(k), vec![node], s, loc), s))
            .collect())
    }

    /// `Err` unless each of `args` is a node of this function of the type
    /// `seen` names.
    fn check_seen(&self, args: &[ValueId], seen: &[Shape]) -> Result<(), String> {
        let n = self.nodes.len();
        let types_match = args.len() == seen.len()
            && args
                .iter()
                .zip(seen)
                .all(|(a, s)| (a.0 as usize) < n && self.node(*a).shape.same_type(s));
        if types_match {
            Ok(())
        } else {
            Err(format!(
                "operands {args:?} are not nodes before it of the types seen"
            ))
        }
    }

    /// Appends a node its rule has typed.
    fn append(&mut self, op: Op, args: Vec<ValueId>, shape: Shape, loc: Loc) -> ValueId {
        let id = ValueId(self.nodes.len() as u32);
        if op.has_side_effect() {
            self.effects.push(id);
        }
        self.nodes.push(Node { op, args, shape });
        self.locs.push(loc);
        id
    }

    /// [`Function::push`] of a node rebuilt from checked ones (a pass's
    /// rewrite, a derivative rule's node), where a rejected node is a fault
    /// of radix's own rule, not of the traced code: panics naming it.
    pub fn push_rebuilt(&mut self, node: Node, loc: Loc) -> ValueId {
        self.push(node, loc).unwrap_or_else(|e| {
            panic!(
                "radix built an ill-typed {} node at {}:{}: {}",
                e.op,
                loc.file(),
                loc.line(),
                e.message
            )
        })
    }

    /// The type of `op` applied to `args` by the op's shape rule
    /// ([`Op::infer`]; a `Project`'s is its producer's result), `stated`
    /// given to the ops that state theirs.
    pub fn rule_type(&self, op: &Op, args: &[ValueId], stated: Shape) -> Result<Shape, String> {
        if let Some(a) = args.iter().find(|a| a.0 as usize >= self.nodes.len()) {
            return Err(format!("operand %{} is not a node before it", a.0));
        }
        let shapes: ops::Shapes = args.iter().map(|&a| self.node(a).shape).collect();
        self.rule_type_seen(op, args, &shapes, stated)
    }

    /// [`Function::rule_type`] with the operands' types as the caller sees
    /// them, `seen` (the operands are nodes of this function).
    fn rule_type_seen(
        &self,
        op: &Op,
        args: &[ValueId],
        seen: &[Shape],
        stated: Shape,
    ) -> Result<Shape, String> {
        if let Op::Project(k) = op {
            ops::arity(seen, 1)?;
            let producer = self.node(args[0]);
            if !producer.op.is_multi() {
                return Err("its operand is not a multi-result op".into());
            }
            let results = self.rule_type_all(producer)?;
            return results
                .get(*k)
                .copied()
                .ok_or_else(|| format!("result {k} of an op of {}", results.len()));
        }
        Ok(op.infer(seen, stated)?.first().copied().unwrap_or(stated))
    }

    /// The types of all results of `node` (one of this function's) by its
    /// op's shape rule.
    fn rule_type_all(&self, node: &Node) -> Result<ops::Shapes, String> {
        let shapes: ops::Shapes = node.args.iter().map(|&a| self.node(a).shape).collect();
        node.op.infer(&shapes, node.shape)
    }

    /// Appends parameter `params.len()` of `shape`.
    pub fn add_parameter(&mut self, shape: Shape, loc: Loc) -> ValueId {
        let node = Node {
            op: Op::Parameter(self.params.len()),
            args: vec![],
            shape,
        };
        let id = self.push_rebuilt(node, loc);
        self.params.push(id);
        id
    }

    /// Appends a constant of `shape` holding zeros.
    pub fn push_zeros(&mut self, shape: Shape, loc: Loc) -> ValueId {
        let zero = crate::literal::encode(shape.dtype(), &[0.0]);
        let node = Node {
            op: Op::Source(ops::Source::Constant(zero.into())),
            args: vec![],
            shape,
        };
        self.push_rebuilt(node, loc)
    }

    /// Which nodes the results and the side effects depend on (parameters
    /// always count).
    pub fn reachable(&self) -> Vec<bool> {
        let mut live = vec![false; self.nodes.len()];
        let mut stack: Vec<ValueId> = self.results.clone();
        stack.extend(&self.params);
        stack.extend(&self.effects);
        while let Some(id) = stack.pop() {
            if !std::mem::replace(&mut live[id.0 as usize], true) {
                stack.extend(&self.node(id).args);
            }
        }
        live
    }
}

/// The name a private function is printed under: `name` with every
/// character that is not an ASCII letter or digit made `_`, then the body's
/// [`Function::structural_hash`]. Equal bodies get equal names in every run
/// and build (the executable cache hashes the printed module), different
/// ones different names.
pub fn private_name(name: &str, body: &Function) -> std::sync::Arc<str> {
    let base: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{}_{:016x}", base.trim_matches('_'), body.structural_hash()).into()
}
