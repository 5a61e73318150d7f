//! Common-subexpression elimination: a node equal to one already in the
//! function (same op, operands and shape) is replaced by that first one,
//! which keeps its location. Side-effecting nodes are never merged.
//!
//! The operands of a commutative op (a property of its row in the
//! elementwise tables, [`Op::is_commutative`]) are put in a canonical order
//! first, so `a + b` and `b + a` are one node. The order depends only on the
//! graph, never on the order values were traced in: parameters first (by
//! index), then computed values, then constants (as MLIR puts constants on
//! the right), each by a structural hash of the subgraph that computes them.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use xxhash_rust::xxh64::Xxh64;

use crate::ir::HashWriter;
use crate::ir::{Function, Node, Op, ValueId};

/// The nodes seen so far, by a structural hash of their op, operands and
/// shape.
#[derive(Default)]
pub(crate) struct Table {
    buckets: HashMap<u64, Vec<ValueId>>,
    /// The structural hash of every node of the function, by id: it hashes
    /// an operand through its own structural hash, not its id.
    hashes: Vec<u64>,
}

impl Table {
    /// Pushes `node` onto `f` without looking for an equal one (a parameter
    /// or a poisoned value). Every node of `f` goes through the table.
    pub(crate) fn push(&mut self, f: &mut Function, node: Node) -> ValueId {
        let key = self.key(&node);
        self.push_hashed(f, node, key)
    }

    /// The id of a node equal to `node` already in `f`, or of `node` pushed
    /// onto `f`. A commutative op's operands are ordered canonically first.
    pub(crate) fn intern(&mut self, f: &mut Function, mut node: Node) -> ValueId {
        if node.op.has_side_effect() {
            // Each side effect happens once per occurrence: never merged.
            return self.push(f, node);
        }
        if node.op.is_commutative() {
            node.args.sort_by_key(|&a| self.rank(f, a));
        }
        let key = self.key(&node);
        let bucket = self.buckets.entry(key).or_default();
        let same = |id: &&ValueId| {
            let n = f.node(**id);
            n.op == node.op && n.args == node.args && n.shape == node.shape
        };
        if let Some(&id) = bucket.iter().find(same) {
            return id;
        }
        let id = self.push_hashed(f, node, key);
        self.buckets.entry(key).or_default().push(id);
        id
    }

    fn push_hashed(&mut self, f: &mut Function, node: Node, key: u64) -> ValueId {
        let id = f.push(node);
        assert_eq!(
            id.0 as usize,
            self.hashes.len(),
            "a node bypassed the table"
        );
        self.hashes.push(key);
        id
    }

    /// The sort key of operand `id` of a commutative op: parameters (by
    /// index), computed values, constants; then the structural hash; the id
    /// breaks ties only between different values of equal hash.
    fn rank(&self, f: &Function, id: ValueId) -> (u8, u64, ValueId) {
        let hash = self.hashes[id.0 as usize];
        match f.node(id).op {
            Op::Parameter(i) => (0, i as u64, id),
            Op::Constant(_) => (2, hash, id),
            _ => (1, hash, id),
        }
    }

    /// A structural hash of what makes two nodes equal. The op is hashed
    /// through its `Debug` form, so ops need no `Hash` (some carry floats);
    /// equality is then checked with `PartialEq`. A constant's bytes are
    /// hashed as bytes: formatting large tables byte by byte was most of the
    /// tracing time. xxh64 with a fixed seed keeps it equal across runs and
    /// builds, since the operand order it decides is printed.
    fn key(&self, node: &Node) -> u64 {
        let mut h = Xxh64::new(0);
        if let Op::Constant(bytes) = &node.op {
            h.write(b"constant");
            h.write(bytes);
        } else {
            let mut w = HashWriter(&mut h);
            let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{:?}", node.op));
        }
        for a in &node.args {
            h.write_u64(self.hashes[a.0 as usize]);
        }
        node.shape.hash(&mut h);
        h.finish()
    }
}
