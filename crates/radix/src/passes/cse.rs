//! Common-subexpression elimination: a node equal to one already in the
//! function (same op, operands and shape) is replaced by that first one,
//! which keeps its location. Side-effecting nodes are never merged.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::ir::{Function, Node, Op, ValueId};

/// The nodes seen so far, by a hash of their op, operands and shape.
#[derive(Default)]
pub(crate) struct Table {
    buckets: HashMap<u64, Vec<ValueId>>,
}

impl Table {
    /// The id of a node equal to `node` already in `f`, or of `node` pushed
    /// onto `f`.
    pub(crate) fn intern(&mut self, f: &mut Function, node: Node) -> ValueId {
        if node.op.has_side_effect() {
            // Each side effect happens once per occurrence.
            return f.push(node);
        }
        let key = key(&node);
        let bucket = self.buckets.entry(key).or_default();
        let same = |id: &&ValueId| {
            let n = f.node(**id);
            n.op == node.op && n.args == node.args && n.shape == node.shape
        };
        if let Some(&id) = bucket.iter().find(same) {
            return id;
        }
        let id = f.push(node);
        bucket.push(id);
        id
    }
}

/// A hash of what makes two nodes equal. The op is hashed through its
/// `Debug` form, so ops need no `Hash` (some carry floats); equality is
/// then checked with `PartialEq`. A constant's bytes are hashed as bytes:
/// formatting large tables byte by byte was most of the tracing time.
fn key(node: &Node) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if let Op::Constant(bytes) = &node.op {
        h.write(b"constant");
        h.write(bytes);
    } else {
        let mut w = HashWriter(&mut h);
        let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{:?}", node.op));
    }
    node.args.hash(&mut h);
    node.shape.hash(&mut h);
    h.finish()
}

/// Feeds formatted text into a hasher without building the string.
struct HashWriter<'h, H: Hasher>(&'h mut H);

impl<H: Hasher> std::fmt::Write for HashWriter<'_, H> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}
