//! The reference interpreter: evaluates a [`Function`] on host literals with
//! each op's reference semantics (f64 arithmetic, rounded to the result dtype).

use crate::literal::Literal;
use crate::{Function, Op};

/// The results of `f` applied to `args` (one per parameter, in order).
pub fn eval(f: &Function, args: &[Literal]) -> Vec<Literal> {
    let live = f.reachable();
    let mut values: Vec<Option<Vec<Literal>>> = vec![None; f.nodes.len()];
    for (i, node) in f.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let v = match &node.op {
            Op::Parameter(k) => vec![args[*k].clone()],
            Op::Project(k) => {
                let all = values[node.args[0].0 as usize].as_ref();
                vec![all.expect("operand evaluated")[*k].clone()]
            }
            op => {
                let a: Vec<&Literal> = node
                    .args
                    .iter()
                    .map(|a| &values[a.0 as usize].as_ref().expect("operand evaluated")[0])
                    .collect();
                op.eval(&a, node.shape)
            }
        };
        values[i] = Some(v);
    }
    f.results
        .iter()
        .map(|r| values[r.0 as usize].as_ref().expect("result evaluated")[0].clone())
        .collect()
}
