//! Dead-code elimination: keep the parameters and the nodes the results
//! depend on, renumbered in their original order.

use crate::ir::{Function, ValueId};

/// `f` without the nodes its results do not need.
pub(crate) fn run(f: &Function) -> Function {
    let live = f.reachable();
    let mut out = Function::default();
    let mut renamed = vec![ValueId(u32::MAX); f.nodes.len()];
    for (i, node) in f.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let mut node = node.clone();
        for a in &mut node.args {
            *a = renamed[a.0 as usize];
        }
        renamed[i] = out.push(node);
    }
    out.params = f.params.iter().map(|p| renamed[p.0 as usize]).collect();
    out.results = f.results.iter().map(|r| renamed[r.0 as usize]).collect();
    out
}
