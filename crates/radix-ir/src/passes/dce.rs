//! Dead-code elimination and scheduling: keep the parameters, the
//! side-effecting nodes and the nodes the results depend on, in a canonical
//! order.
//!
//! The order is a depth-first post-order from the side effects (in trace
//! order), then from the results (each node's operands in operand order,
//! then the node), after the parameters. It
//! depends only on the graph, not on the order the ops were traced in, so
//! `let e = x.exp(); let t = x.tanh(); t + e` and the same sum written with
//! `tanh` traced first print the same.

use crate::{Function, ValueId};

/// `f` without the nodes its results do not need, in canonical order.
pub fn run(f: &Function) -> Function {
    let mut out = Function::default();
    let mut renamed = vec![None::<ValueId>; f.nodes.len()];
    for &p in &f.params {
        renamed[p.0 as usize] = Some(out.push_rebuilt(f.node(p).clone(), f.loc(p)));
    }
    // Iterative post-order: (node, whether its operands were pushed).
    let mut stack: Vec<(ValueId, bool)> = vec![];
    for &r in f.effects.iter().chain(&f.results) {
        stack.push((r, false));
        while let Some((id, expanded)) = stack.pop() {
            if renamed[id.0 as usize].is_some() {
                continue;
            }
            let node = f.node(id);
            if expanded {
                let mut node = node.clone();
                for a in &mut node.args {
                    *a = renamed[a.0 as usize].expect("operand scheduled first");
                }
                renamed[id.0 as usize] = Some(out.push_rebuilt(node, f.loc(id)));
            } else {
                stack.push((id, true));
                for &a in node.args.iter().rev() {
                    if renamed[a.0 as usize].is_none() {
                        stack.push((a, false));
                    }
                }
            }
        }
    }
    out.params = f
        .params
        .iter()
        .map(|p| renamed[p.0 as usize].unwrap())
        .collect();
    out.results = f
        .results
        .iter()
        .map(|r| renamed[r.0 as usize].unwrap())
        .collect();
    // Buffer reuse of a value the results do not need says nothing.
    out.reuses = f
        .reuses
        .iter()
        .filter_map(|&(v, p)| Some((renamed[v.0 as usize]?, p)))
        .collect();
    out
}
