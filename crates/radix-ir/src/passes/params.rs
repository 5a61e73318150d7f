//! Parameters nothing reads, left out of a function's signature.
//!
//! A model's forward often reads a few of its tensors: an embedding step
//! the embedding table, a head the final norm and the output matrix. A
//! program that still takes every tensor of the model as a parameter costs
//! where nobody looks: XLA keeps each one in the executable's signature,
//! so a program of 3 used weights and 269 unused ones loaded from the
//! executable cache in 7.7 ms against 2.8 ms for a whole transformer block,
//! and each call checks and passes every buffer. JAX's `jit` drops unused
//! arguments the same way (`keep_unused=False`).

use crate::{Function, Op, ValueId};

/// `f` without those of its first `among` parameters that no result,
/// buffer reuse or node the results (or side effects) need reads, the
/// others renumbered in order; and, for each parameter kept among the
/// first `among`, its index in `f`. Parameters from `among` on are always
/// kept. Dead nodes stay as they are, but for those that read a dropped
/// parameter (through other dead nodes or not), which go with it.
pub fn without_unread(f: &Function, among: usize) -> (Function, Vec<usize>) {
    // Parameters count as reachable, but they read nothing, so only the
    // nodes the results and side effects need add reads.
    let live = f.reachable();
    let mut read = vec![false; f.params.len()];
    let mut param_of = vec![None::<usize>; f.nodes.len()];
    for (k, p) in f.params.iter().enumerate() {
        param_of[p.0 as usize] = Some(k);
    }
    let live_operands = (f.nodes.iter().zip(&live))
        .filter(|(_, live)| **live)
        .flat_map(|(n, _)| &n.args);
    for a in live_operands.chain(&f.results) {
        if let Some(k) = param_of[a.0 as usize] {
            read[k] = true;
        }
    }
    for &(_, k) in &f.reuses {
        read[k] = true;
    }
    for r in read.iter_mut().skip(among) {
        *r = true;
    }
    // The parameters kept, in order: `index[old]` is the new index of each.
    let all_kept: Vec<usize> = (0..read.len()).filter(|&k| read[k]).collect();
    let kept = all_kept.iter().copied().filter(|&k| k < among).collect();
    if all_kept.len() == read.len() {
        return (f.clone(), kept);
    }
    let mut index = vec![None::<usize>; read.len()];
    for (new, &old) in all_kept.iter().enumerate() {
        index[old] = Some(new);
    }
    let mut out = Function::default();
    let mut renamed = vec![None::<ValueId>; f.nodes.len()];
    for (i, (node, &loc)) in f.nodes.iter().zip(&f.locs).enumerate() {
        let mut node = node.clone();
        if let Op::Parameter(k) = node.op {
            match index[k] {
                Some(new) => node.op = Op::Parameter(new),
                None => continue,
            }
        }
        let args: Option<Vec<ValueId>> = node.args.iter().map(|a| renamed[a.0 as usize]).collect();
        // A dead node over a dropped parameter goes too.
        let Some(args) = args else { continue };
        node.args = args;
        renamed[i] = Some(out.push_rebuilt(node, loc));
    }
    let renamed = |v: &ValueId| renamed[v.0 as usize].expect("a value the results need is kept");
    out.params = all_kept.iter().map(|&k| renamed(&f.params[k])).collect();
    out.results = f.results.iter().map(renamed).collect();
    out.reuses = f
        .reuses
        .iter()
        .map(|(v, k)| (renamed(v), index[*k].expect("a reused parameter is kept")))
        .collect();
    (out, kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Node, Shape};

    fn f32s(n: i64) -> Shape {
        Shape::new(DType::F32, &[n])
    }

    /// Parameters of shapes `dims`, and a result adding those in `added`.
    fn sum_of(dims: &[i64], added: [usize; 2]) -> Function {
        let mut f = Function::default();
        let loc = std::panic::Location::caller();
        let ps: Vec<_> = dims
            .iter()
            .map(|&d| f.add_parameter(f32s(d), loc))
            .collect();
        let node = Node {
            op: crate::Binary::Add.into(),
            args: added.iter().map(|&k| ps[k]).collect(),
            shape: f32s(dims[added[0]]),
        };
        let sum = f.push_rebuilt(node, loc);
        f.results = vec![sum];
        f
    }

    #[test]
    fn unread_leading_parameters_go_and_the_rest_are_renumbered() {
        // Weights 0..3 of which 1 is read, then inputs 3 and 4 (4 unread).
        let f = sum_of(&[1, 2, 3, 2, 5], [1, 3]);
        let (g, kept) = without_unread(&f, 3);
        assert_eq!(kept, [1]);
        let shapes: Vec<_> = g.params.iter().map(|&p| g.node(p).shape).collect();
        assert_eq!(shapes, [f32s(2), f32s(2), f32s(5)]);
        for (k, &p) in g.params.iter().enumerate() {
            assert_eq!(g.node(p).op, Op::Parameter(k));
        }
        crate::verify::debug_check(&g, "test");
        let x = |v: &[f32]| crate::literal::Literal::from_slice(v, &[v.len() as i64]);
        let out = crate::interp::eval(&g, &[x(&[1., 2.]), x(&[10., 20.]), x(&[0.; 5])]);
        assert_eq!(out[0].to_vec::<f32>(), [11., 22.]);
    }

    #[test]
    fn a_parameter_only_dead_nodes_read_goes_with_them() {
        let mut f = sum_of(&[2, 3, 2], [0, 2]);
        let loc = std::panic::Location::caller();
        // `p1 + p1`, which nothing needs, and a dead constant kept as is.
        let dead = Node {
            op: crate::Binary::Add.into(),
            args: vec![f.params[1], f.params[1]],
            shape: f32s(3),
        };
        f.push_rebuilt(dead, loc);
        let zeros = f.push_zeros(f32s(4), loc);
        let (g, kept) = without_unread(&f, 2);
        assert_eq!(kept, [0]);
        assert_eq!(g.params.len(), 2);
        assert_eq!(g.nodes.len(), f.nodes.len() - 2);
        assert_eq!(g.nodes.last(), Some(f.node(zeros)));
        crate::verify::debug_check(&g, "test");
    }

    #[test]
    fn a_function_reading_every_parameter_is_unchanged() {
        let f = sum_of(&[4, 4], [0, 1]);
        let (g, kept) = without_unread(&f, 2);
        assert_eq!(kept, [0, 1]);
        assert_eq!(g, f);
    }
}
