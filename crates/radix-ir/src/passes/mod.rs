//! Passes that run on a traced [`Function`] before it is printed and hashed,
//! so that equal programs written differently print (and hash) equal.
//!
//! [`optimize`] makes one forward sweep over the nodes (operands always come
//! before their users): each node's operands are renamed to their rewritten
//! values, [`canonicalize`] simplifies it (constant folding, algebraic
//! identities), and [`cse`] orders a commutative op's operands canonically
//! and reuses an equal node seen before. [`dce`] then
//! drops what the results do not need. One sweep reaches a fixed point for
//! these rules, because every operand is already in canonical form when its
//! user is visited.
//!
//! [`params::without_unread`] is not one of them: radix's tracer runs it
//! once on a traced program, to leave out the model tensors it does not
//! read. Nor is [`layers::fold`]: radix's compiler runs it where the
//! custom calls' kernels run, so that they read a layer of a stack in
//! place.
//!
//! Nested functions (`call` bodies, `while`/`if` regions, reduction, sort
//! and scatter bodies) are optimized the same way, each on its own, before
//! the node holding them is visited; nothing rewrites across a body's edge.
//!
//! Locations stay deterministic: a node merged by CSE keeps the location of
//! its first occurrence, a folded constant takes the location of the op it
//! replaces, and a node replaced by one of its operands disappears with its
//! location.

pub mod canonicalize;
pub mod cse;
pub mod dce;
pub mod layers;
pub mod params;

use crate::{Function, Op, ValueId, verify};

/// The function `f` after canonicalization, CSE and DCE, its nested
/// functions included.
pub fn optimize(f: &Function) -> Function {
    let mut out = Function::default();
    let mut renamed: Vec<ValueId> = Vec::with_capacity(f.nodes.len());
    let mut table = cse::Table::default();
    for (node, &loc) in f.nodes.iter().zip(&f.locs) {
        let mut node = node.clone();
        // Bodies come from the tracer as traced, like the top level: each is
        // optimized on its own before CSE compares its op whole.
        if !node.op.bodies().is_empty() {
            node.op = node.op.map_bodies(&optimize);
        }
        for a in &mut node.args {
            *a = renamed[a.0 as usize];
        }
        let id = if matches!(node.op, Op::Parameter(_) | Op::Poison) {
            table.push(&mut out, node, loc)
        } else {
            match canonicalize::simplify(&out, node) {
                canonicalize::Simplified::Value(v) => v,
                canonicalize::Simplified::Node(n) => table.intern(&mut out, n, loc),
            }
        };
        renamed.push(id);
    }
    out.params = f.params.iter().map(|p| renamed[p.0 as usize]).collect();
    out.results = f.results.iter().map(|r| renamed[r.0 as usize]).collect();
    out.reuses = f
        .reuses
        .iter()
        .map(|&(v, p)| (renamed[v.0 as usize], p))
        .collect();
    verify::debug_check(&out, "canonicalization and CSE");
    let out = dce::run(&out);
    verify::debug_check(&out, "DCE");
    out
}
