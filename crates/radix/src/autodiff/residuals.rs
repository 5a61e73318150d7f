//! A derivative split in two, as JAX's partial evaluation splits a
//! linearized function into its known and unknown parts: a *forward*
//! function giving `f`'s results and the *residuals* (the values of `f`'s
//! forward pass that its derivative rules read), and a *backward* function
//! taking those residuals and the results' cotangents. The control-flow
//! rules (`control_grad.rs`) run the forward function in place of
//! the op, so the body runs once, and keep the residuals until the
//! backward pass: a loop keeps one row per iteration, which is all the
//! memory its derivative needs.

use std::collections::HashMap;

use crate::Shape;
use crate::autodiff::{self as grad, GradError, Joint};
use crate::ir::{Function, Node, Op, ValueId};

/// `f`'s derivative as a forward and a backward function.
pub(crate) struct Split {
    /// `f`'s parameters → `f`'s results, then the residuals.
    pub(crate) fwd: Function,
    /// The residuals, then the parameters of `f` named by `free_used`,
    /// then one cotangent per result of `f` → the cotangents of `f`'s
    /// first `n_wrt` parameters.
    pub(crate) bwd: Function,
    /// The residuals' shapes.
    pub(crate) residuals: Vec<Shape>,
    /// The parameters of `f` (by index) the backward function takes
    /// directly instead of as residuals.
    pub(crate) free_used: Vec<usize>,
}

/// Which values of the forward pass the backward function may have
/// without saving them.
#[derive(Clone, Copy)]
pub(crate) enum Reads {
    /// Every parameter of `f`: a call's or a branch's operands, which
    /// the backward pass outside has anyway.
    Params,
    /// The parameters from `n_state` on (a loop's captures, the same in
    /// every iteration), and what is computed from them and constants
    /// alone, computed again each backward iteration rather than saved
    /// once per iteration.
    Invariant { n_state: usize },
}

/// Splits the derivative of `f` with respect to its first `n_wrt`
/// parameters.
pub(crate) fn split(f: &Function, n_wrt: usize, reads: Reads) -> Result<Split, GradError> {
    let Joint {
        function: j,
        boundary,
    } = grad::joint(f, n_wrt)?;
    let n_params = f.params.len();
    let n_out = f.results.len();
    // Values of the forward part the backward one can have without a
    // residual: free parameters, constants, and (for a loop) what is
    // computed from those alone.
    let mut free = vec![false; boundary];
    for (i, n) in j.nodes[..boundary].iter().enumerate() {
        free[i] = match (&n.op, reads) {
            (Op::Parameter(k), Reads::Params) => *k < n_params,
            (Op::Parameter(k), Reads::Invariant { n_state }) => *k >= n_state,
            (Op::Poison, _) => false,
            (_, _) if n.args.is_empty() => !n.op.has_side_effect(),
            (op, Reads::Invariant { .. }) => {
                !op.has_side_effect() && n.args.iter().all(|a| free[a.0 as usize])
            }
            (_, Reads::Params) => false,
        };
    }
    // A backward `Project` of a forward multi-result op that is not free
    // reads one of its results: that result is the residual (the op's own
    // value is not a tensor to pass), projected at the end of the forward
    // function. By backward node: (producer, result index).
    let projected: HashMap<usize, (ValueId, usize)> = (boundary..j.nodes.len())
        .filter_map(|i| match (&j.nodes[i].op, j.nodes[i].args.first()) {
            (Op::Project(k), Some(&p)) if (p.0 as usize) < boundary && !free[p.0 as usize] => {
                Some((i, (p, *k)))
            }
            _ => None,
        })
        .collect();
    let mut needed = vec![false; boundary];
    let mut stack: Vec<ValueId> = (boundary..j.nodes.len())
        .filter(|i| !projected.contains_key(i))
        .flat_map(|i| j.nodes[i].args.iter().copied())
        .chain(j.results[n_out..].iter().copied())
        .filter(|v| (v.0 as usize) < boundary)
        .collect();
    let mut residuals: Vec<ValueId> = vec![];
    while let Some(v) = stack.pop() {
        let i = v.0 as usize;
        if std::mem::replace(&mut needed[i], true) {
            continue;
        }
        if free[i] {
            stack.extend(&j.nodes[i].args);
        } else {
            residuals.push(v);
        }
    }
    residuals.sort();
    // The projected residuals, each (producer, index) once with its
    // shape, after the others.
    let mut results_read: Vec<((ValueId, usize), Shape)> = projected
        .iter()
        .map(|(&i, &read)| (read, j.nodes[i].shape))
        .collect();
    results_read.sort_by_key(|r| r.0);
    results_read.dedup_by_key(|r| r.0);
    let read_index = |read: &(ValueId, usize)| {
        results_read
            .binary_search_by_key(read, |r| r.0)
            .expect("every read is listed")
    };
    let mut free_used: Vec<usize> = vec![];
    for (i, n) in j.nodes[..boundary].iter().enumerate() {
        if let Op::Parameter(k) = n.op
            && needed[i]
            && free[i]
        {
            free_used.push(k);
        }
    }
    free_used.sort();

    let mut bwd = Function::default();
    let loc = j.locs.first().copied();
    let loc = loc.unwrap_or(std::panic::Location::caller());
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    for &r in &residuals {
        map.insert(r, bwd.add_parameter(j.node(r).shape, loc));
    }
    let reads: Vec<ValueId> = (results_read.iter())
        .map(|&(_, shape)| bwd.add_parameter(shape, loc))
        .collect();
    for (&i, read) in &projected {
        map.insert(ValueId(i as u32), reads[read_index(read)]);
    }
    for &p in &free_used {
        let id = j.params[p];
        map.insert(id, bwd.add_parameter(j.node(id).shape, loc));
    }
    for &ct in &j.params[n_params..] {
        map.insert(ct, bwd.add_parameter(j.node(ct).shape, loc));
    }
    let copy = |bwd: &mut Function, map: &mut HashMap<ValueId, ValueId>, i: usize| {
        let n = &j.nodes[i];
        let id = bwd.push_rebuilt(
            Node {
                op: n.op.clone(),
                args: n.args.iter().map(|a| map[a]).collect(),
                shape: n.shape,
            },
            j.locs[i],
        );
        map.insert(ValueId(i as u32), id);
    };
    for i in 0..boundary {
        if needed[i] && free[i] && !matches!(j.nodes[i].op, Op::Parameter(_)) {
            copy(&mut bwd, &mut map, i);
        }
    }
    for i in boundary..j.nodes.len() {
        if !matches!(j.nodes[i].op, Op::Parameter(_)) && !projected.contains_key(&i) {
            copy(&mut bwd, &mut map, i);
        }
    }
    bwd.results = j.results[n_out..].iter().map(|r| map[r]).collect();

    let residual_shapes = residuals
        .iter()
        .map(|&r| j.node(r).shape)
        .chain(results_read.iter().map(|r| r.1))
        .collect();
    let mut fwd_results = j.results[..n_out].to_vec();
    fwd_results.extend(&residuals);
    let mut fwd = Function {
        nodes: j.nodes[..boundary].to_vec(),
        locs: j.locs[..boundary].to_vec(),
        params: j.params[..n_params].to_vec(),
        results: fwd_results,
        reuses: vec![],
        effects: j
            .effects
            .iter()
            .copied()
            .filter(|v| (v.0 as usize) < boundary)
            .collect(),
    };
    for &((producer, k), shape) in &results_read {
        let node = Node {
            op: Op::Project(k),
            args: vec![producer],
            shape,
        };
        let id = fwd.push_rebuilt(node, loc);
        fwd.results.push(id);
    }
    Ok(Split {
        fwd,
        bwd,
        residuals: residual_shapes,
        free_used,
    })
}

/// `f` with results of `shapes`, all zeros, inserted at `at` among its
/// results (a branch of an `if` giving the other branch's residuals, or
/// the other branch's cotangents).
pub(crate) fn with_zeros(mut f: Function, at: usize, shapes: &[Shape]) -> Function {
    let loc = f.locs.first().copied();
    let loc = loc.unwrap_or(std::panic::Location::caller());
    let zeros: Vec<ValueId> = shapes.iter().map(|&s| f.push_zeros(s, loc)).collect();
    f.results.splice(at..at, zeros);
    f
}
