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

use crate::ops::Source;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use xxhash_rust::xxh64::Xxh64;

use crate::{Function, Loc, Node, Op, ValueId};

/// The nodes seen so far, by a structural hash of their op, operands and
/// shape.
#[derive(Default)]
pub struct Table {
    buckets: HashMap<u64, Vec<ValueId>>,
    /// The structural hash of every node of the function, by id: it hashes
    /// an operand through its own structural hash, not its id.
    hashes: Vec<u64>,
}

impl Table {
    /// Pushes `node` (traced at `loc`) onto `f` without looking for an
    /// equal one (a parameter or a poisoned value). Every node of `f` goes
    /// through the table.
    pub fn push(&mut self, f: &mut Function, node: Node, loc: Loc) -> ValueId {
        let key = self.key(&node);
        self.push_hashed(f, node, loc, key)
    }

    /// The id of a node equal to `node` already in `f` (which keeps its
    /// location), or of `node` pushed onto `f` at `loc`. A commutative op's
    /// operands are ordered canonically first.
    pub fn intern(&mut self, f: &mut Function, mut node: Node, loc: Loc) -> ValueId {
        if node.op.has_side_effect() {
            // Each side effect happens once per occurrence: never merged.
            return self.push(f, node, loc);
        }
        if node.op.is_commutative() {
            node.args.sort_by_key(|&a| self.rank(f, a));
        }
        let key = self.key(&node);
        let bucket = self.buckets.entry(key).or_default();
        if let Some(&id) = bucket.iter().find(|id| *f.node(**id) == node) {
            return id;
        }
        let id = self.push_hashed(f, node, loc, key);
        self.buckets.entry(key).or_default().push(id);
        id
    }

    fn push_hashed(&mut self, f: &mut Function, node: Node, loc: Loc, key: u64) -> ValueId {
        let id = f.push_rebuilt(node, loc);
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
            Op::Source(Source::Constant(_)) => (2, hash, id),
            _ => (1, hash, id),
        }
    }

    /// A structural hash of what makes two nodes equal: the op's own
    /// [`Hash`] (bodies by their nodes, attributes and constants by their
    /// bits), each operand through its structural hash, the shape. xxh64
    /// with a fixed seed keeps it equal across runs and builds, since the
    /// operand order it decides is printed.
    fn key(&self, node: &Node) -> u64 {
        let mut h = Xxh64::new(0);
        node.op.hash(&mut h);
        for a in &node.args {
            h.write_u64(self.hashes[a.0 as usize]);
        }
        node.shape.hash(&mut h);
        h.finish()
    }
}
