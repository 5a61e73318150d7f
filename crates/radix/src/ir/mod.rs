//! The IR: an SSA graph of ops recorded while tracing.
//!
//! A [`Function`] holds nodes in creation order (so every operand precedes
//! its user), its parameters and its results. Each node is one op producing
//! one tensor. The op set is a small closed enum, [`Op`]; each op family lives
//! in one file under [`ops`] with its shape rule, StableHLO printing and
//! reference semantics side by side. The IR knows nothing of the tracer:
//! the methods recording ops live under `tensor/`, which uses this module. Composites
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

pub(crate) mod grad;
pub(crate) mod interp;
pub mod ops;
pub(crate) mod print;
pub(crate) mod residuals;

use std::panic::Location;

use crate::Shape;

pub(crate) use ops::Op;

/// The id of a node (and of the value it produces) in its function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ValueId(pub(crate) u32);

/// One op application.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) op: Op,
    pub(crate) args: Vec<ValueId>,
    pub(crate) shape: Shape,
    pub(crate) loc: &'static Location<'static>,
}

/// A traced function: nodes in creation order, parameters, results, and
/// the side-effecting nodes, which are kept even when no result needs them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Function {
    pub(crate) nodes: Vec<Node>,
    pub(crate) params: Vec<ValueId>,
    pub(crate) results: Vec<ValueId>,
    /// `(value, parameter index)` pairs recorded by `reuse_buffer`
    /// while tracing; `trace` turns them into argument aliases.
    pub(crate) reuses: Vec<(ValueId, usize)>,
    /// The nodes with side effects ([`Op::has_side_effect`]), in order;
    /// [`Function::push`] records them.
    pub(crate) effects: Vec<ValueId>,
}

impl Function {
    pub(crate) fn node(&self, id: ValueId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    /// A hash of what the function computes: its nodes (ops, operands,
    /// shapes; constants by their bytes), results and side effects, not
    /// their source locations. Equal functions hash equal; `call` names a
    /// body by it instead of printing it.
    pub(crate) fn structural_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = xxhash_rust::xxh64::Xxh64::new(0);
        for n in &self.nodes {
            match &n.op {
                Op::Constant(bytes) => {
                    h.write(b"constant");
                    h.write(bytes);
                }
                op => {
                    let mut w = HashWriter(&mut h);
                    let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{op:?}"));
                }
            }
            n.args.hash(&mut h);
            n.shape.hash(&mut h);
        }
        self.results.hash(&mut h);
        self.effects.hash(&mut h);
        h.finish()
    }

    pub(crate) fn push(&mut self, node: Node) -> ValueId {
        let id = ValueId(self.nodes.len() as u32);
        if node.op.has_side_effect() {
            self.effects.push(id);
        }
        self.nodes.push(node);
        id
    }

    /// Which nodes the results and the side effects depend on (parameters
    /// always count).
    pub(crate) fn reachable(&self) -> Vec<bool> {
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

/// Feeds formatted text into a hasher without building the string.
pub(crate) struct HashWriter<'h, H: std::hash::Hasher>(pub(crate) &'h mut H);

impl<H: std::hash::Hasher> std::fmt::Write for HashWriter<'_, H> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}
