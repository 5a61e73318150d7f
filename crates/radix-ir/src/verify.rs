//! The IR's checker: [`Function::verify`] re-infers every node from its
//! operands with its op's shape rule ([`Op::infer`], each family's rule in
//! the family's file) and checks the graph's structure, so a node a pass,
//! a derivative rule or the tracer built wrong is caught where it was
//! made, not as the plugin's error about the printed module.
//!
//! What is checked is the tensor type StableHLO checks (element type and
//! dims); tags and sharding annotations name axes for the tracer and the
//! partitioner and do not change what a node computes.

use std::fmt;

use crate::Shape;
use crate::{Function, Loc, Op, ValueId};

/// A node of a function that its op's rule rejects, or a broken edge of
/// the graph: which node, where it was traced, and what is wrong.
#[derive(Debug, Clone)]
pub struct VerifyError {
    /// The path of nested bodies down to the node (`while body`, ...), empty
    /// at the top level.
    pub path: Vec<&'static str>,
    /// The node's id in its function.
    pub node: usize,
    /// Its op's name.
    pub op: &'static str,
    /// Where it was traced, if the function says.
    pub loc: Option<Loc>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({})", self.node, self.op)?;
        for p in self.path.iter().rev() {
            write!(f, " in the {p}")?;
        }
        if let Some(l) = self.loc {
            write!(f, ", traced at {}:{}:{}", l.file(), l.line(), l.column())?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for VerifyError {}

impl Function {
    /// Checks the function and its nested bodies: every operand is a node
    /// before its user, the parameters, results, effects and reuses name
    /// nodes, and every node's type is the one its op's rule infers from
    /// its operands' types (a `Project` node's, the one its producer's rule
    /// gives for that result).
    pub fn verify(&self) -> Result<(), VerifyError> {
        let err = |node: usize, message: String| VerifyError {
            path: vec![],
            node,
            op: self.nodes.get(node).map_or("function", |n| n.op.name()),
            loc: self.locs.get(node).copied(),
            message,
        };
        if self.locs.len() != self.nodes.len() {
            return Err(err(
                0,
                format!(
                    "{} locations for {} nodes",
                    self.locs.len(),
                    self.nodes.len()
                ),
            ));
        }
        let n = self.nodes.len();
        let named = |what: &str, ids: Vec<ValueId>| match ids.iter().find(|v| v.0 as usize >= n) {
            Some(v) => Err(err(n, format!("{what} %{} is not a node", v.0))),
            None => Ok(()),
        };
        named("result", self.results.clone())?;
        named("effect", self.effects.clone())?;
        named("reused value", self.reuses.iter().map(|r| r.0).collect())?;
        named("parameter", self.params.clone())?;
        for (k, p) in self.params.iter().enumerate() {
            if self.node(*p).op != Op::Parameter(k) {
                return Err(err(p.0 as usize, format!("is not parameter {k}")));
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(a) = node.args.iter().find(|a| a.0 as usize >= i) {
                return Err(err(i, format!("operand %{} does not come before it", a.0)));
            }
            for body in node.op.bodies() {
                body.verify().map_err(|mut e| {
                    e.path.push(node.op.name());
                    e
                })?;
            }
            let args: Vec<Shape> = node.args.iter().map(|&a| self.node(a).shape).collect();
            let want = self
                .rule_type(&node.op, &node.args, node.shape)
                .map_err(|m| err(i, format!("{m} (operands {})", list(&args))))?;
            if !node.shape.same_type(&want) {
                return Err(err(
                    i,
                    format!(
                        "is typed {} but its rule gives {want} (operands {})",
                        node.shape,
                        list(&args)
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn list(shapes: &[Shape]) -> String {
    let parts: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// In debug builds (the tests), panics when `f`, just made by `what`, does
/// not [`Function::verify`]: a rule that built it wrong is a fault of radix,
/// found where it happened. Release builds skip the check.
pub fn debug_check(f: &Function, what: &str) {
    if cfg!(debug_assertions)
        && let Err(e) = f.verify()
    {
        panic!("the IR after {what} is ill-typed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::panic::Location;

    use super::*;
    use crate::DType;
    use crate::Node;
    use crate::ops::{Binary, Control, Movement};

    fn node(op: Op, args: &[u32], shape: Shape) -> Node {
        Node {
            op,
            args: args.iter().map(|&a| ValueId(a)).collect(),
            shape,
        }
    }

    /// `x: f32[2,3]`, `y: f32[2,3]` and `node` after them.
    fn function(last: Node) -> Function {
        let s = Shape::new(DType::F32, &[2, 3]);
        let mut f = Function::default();
        let loc = Location::caller();
        for i in 0..2 {
            let p = f.push(node(Op::Parameter(i), &[], s), loc).unwrap();
            f.params.push(p);
        }
        // Appended as is: `Function::push` would reject the faulty ones.
        f.nodes.push(last);
        f.locs.push(loc);
        f.results.push(ValueId(2));
        f
    }

    #[test]
    fn a_node_its_rule_gives_verifies() {
        let s = Shape::new(DType::F32, &[2, 3]);
        function(node(Binary::Add.into(), &[0, 1], s))
            .verify()
            .unwrap();
        let t = Shape::new(DType::F32, &[3, 2]);
        function(node(Op::Movement(Movement::Transpose(vec![1, 0])), &[0], t))
            .verify()
            .unwrap();
    }

    #[test]
    fn a_node_typed_against_its_rule_is_named() {
        let s = Shape::new(DType::F32, &[2, 3]);
        let cases = [
            (
                node(Binary::Add.into(), &[0, 1], s.with_dtype(DType::F16)),
                "is typed",
            ),
            (
                node(Op::Movement(Movement::Transpose(vec![1, 0])), &[0], s),
                "is typed",
            ),
            (
                node(Op::Movement(Movement::Transpose(vec![0, 0])), &[0], s),
                "not a permutation",
            ),
            (node(Binary::Add.into(), &[0], s), "1 operands, not 2"),
            (node(Binary::Add.into(), &[0, 2], s), "does not come before"),
            (
                node(
                    Op::Movement(Movement::Reshape),
                    &[0],
                    Shape::new(DType::F32, &[5]),
                ),
                "cannot reshape",
            ),
            (node(Op::Project(0), &[0], s), "not a multi-result op"),
        ];
        for (n, want) in cases {
            let e = function(n).verify().unwrap_err();
            assert_eq!(e.node, 2, "{e}");
            assert!(e.to_string().contains(want), "{e}");
            assert!(e.to_string().contains("verify.rs"), "the location: {e}");
        }
    }

    #[test]
    fn a_fault_in_a_body_names_the_body() {
        let bad = function(node(Binary::Add.into(), &[0, 1], Shape::scalar(DType::I32)));
        let call = Op::Control(Control::Call {
            name: "f".into(),
            f: std::sync::Arc::new(bad),
            checkpoint: false,
        });
        let f = function(node(call, &[0, 1], Shape::new(DType::F32, &[2, 3])));
        let e = f.verify().unwrap_err();
        assert_eq!(e.path, ["call"], "{e}");
        assert!(e.to_string().contains("in the call"), "{e}");
    }
}
