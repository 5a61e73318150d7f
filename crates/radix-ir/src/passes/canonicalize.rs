//! Canonicalization: constant folding and algebraic identities.
//!
//! - Elementwise ops, `convert`, `reshape`, `transpose` and `broadcast` whose
//!   operands are all constants fold into a constant, computed with the op's
//!   own reference semantics ([`Op::eval`]); no arithmetic is written here.
//!   Splats (one value repeated) fold on one element and stay splats, so a
//!   broadcast of a scalar constant becomes a splat constant of any size.
//!   Other constants fold only up to [`FOLD_LIMIT`] elements, and 64-bit
//!   integers only while every value is exact in an `f64`.
//! - A constant whose elements are all equal becomes a splat.
//! - `x op e` → `x` where `e` is the op's identity element, and `e op x` →
//!   `x` when the op is commutative: `x + 0`, `x - 0`, `x * 1`, `x / 1`,
//!   `x ^ 1`, `x | 0`, `x xor 0`. The identities are a column of the binary
//!   op table ([`Binary::identity`](crate::Binary::identity)), not written here.
//! - `reshape(reshape(x))` → `reshape(x)`; a reshape to the operand's own
//!   dims → the operand. Likewise `transpose ∘ transpose` composes, and an
//!   identity transpose, a `convert` to the same type and a `broadcast` that
//!   changes nothing vanish.
//!
//! Floating point: `x + 0` → `x` differs from IEEE only for `x = -0.0`
//! (where `-0 + 0 = +0`), the same liberty XLA's simplifier takes.

use crate::ops::{Conversion, Movement, Source};
use std::sync::Arc;

use crate::literal::Literal;
use crate::ops::Elementwise;
use crate::{DType, Shape};
use crate::{Function, Node, Op, ValueId};

/// The most elements a non-splat constant fold may read or produce.
pub const FOLD_LIMIT: usize = 4096;

/// What a node simplifies to.
// Returned once per node and moved straight into the function: boxing the
// node would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Simplified {
    /// An existing value of the function.
    Value(ValueId),
    /// A node (the original or a simpler one) still to be added.
    Node(Node),
}

/// `node` (whose operands are already in `f` and canonical) simplified.
pub fn simplify(f: &Function, mut node: Node) -> Simplified {
    // A rewrite may enable another (reshape(reshape(x)) to x's own dims).
    for _ in 0..4 {
        match step(f, &node) {
            Some(Simplified::Node(n)) => node = n,
            Some(v @ Simplified::Value(_)) => return v,
            None => break,
        }
    }
    Simplified::Node(node)
}

/// One rewrite of `node`, or `None` when no rule applies.
fn step(f: &Function, node: &Node) -> Option<Simplified> {
    if let Op::Source(Source::Constant(bytes)) = &node.op {
        return splat(bytes, node.shape).map(|b| {
            Simplified::Node(Node {
                op: Op::Source(Source::Constant(b)),
                ..node.clone()
            })
        });
    }
    if let Some(folded) = fold(f, node) {
        return Some(Simplified::Node(folded));
    }
    identity(f, node)
}

/// The algebraic identities.
fn identity(f: &Function, node: &Node) -> Option<Simplified> {
    let arg = |i: usize| node.args[i];
    let same_type = |id: ValueId| same_type(f.node(id).shape, node.shape);
    let keep = |id: ValueId| same_type(id).then_some(Simplified::Value(id));
    match &node.op {
        Op::Elementwise(Elementwise::Binary(b)) => {
            let e = b.identity()?;
            let (x, y) = (arg(0), arg(1));
            if is_splat_of(f, y, e) {
                keep(x)
            } else if b.is_commutative() && is_splat_of(f, x, e) {
                keep(y)
            } else {
                None
            }
        }
        Op::Conversion(Conversion::Convert) => keep(arg(0)),
        Op::Movement(Movement::Reshape) => {
            let inner = f.node(arg(0));
            if matches!(inner.op, Op::Movement(Movement::Reshape)) {
                return Some(Simplified::Node(Node {
                    args: inner.args.clone(),
                    ..node.clone()
                }));
            }
            keep(arg(0))
        }
        Op::Movement(Movement::Transpose(outer)) => {
            if outer.iter().enumerate().all(|(i, &p)| i == p) {
                return keep(arg(0));
            }
            let inner = f.node(arg(0));
            let Op::Movement(Movement::Transpose(first)) = &inner.op else {
                return None;
            };
            // t1[i] = x[first[i]], t2[i] = t1[outer[i]] = x[first[outer[i]]].
            let perm = outer.iter().map(|&i| first[i]).collect();
            Some(Simplified::Node(Node {
                op: Op::Movement(Movement::Transpose(perm)),
                args: inner.args.clone(),
                ..node.clone()
            }))
        }
        Op::Movement(Movement::Broadcast(map)) => {
            let unchanged =
                map.iter().enumerate().all(|(i, &m)| i == m) && map.len() == node.shape.rank();
            if unchanged { keep(arg(0)) } else { None }
        }
        _ => None,
    }
}

/// `node` evaluated into a constant, when all its operands are constants.
fn fold(f: &Function, node: &Node) -> Option<Node> {
    let elementwise = matches!(
        node.op,
        Op::Elementwise(_) | Op::Conversion(Conversion::Convert)
    );
    let layout = matches!(
        node.op,
        Op::Movement(Movement::Reshape)
            | Op::Movement(Movement::Transpose(_))
            | Op::Movement(Movement::Broadcast(_))
    );
    if !(elementwise || layout) || node.args.is_empty() {
        return None;
    }
    let consts = node
        .args
        .iter()
        .map(|&a| match &f.node(a).op {
            Op::Source(Source::Constant(b)) => Some((b.clone(), f.node(a).shape)),
            _ => None,
        })
        .collect::<Option<Vec<(Arc<[u8]>, Shape)>>>()?;
    let is_splat = |(b, s): &(Arc<[u8]>, Shape)| b.len() == s.dtype().size_in_bytes();
    let constant = |bytes: Arc<[u8]>| Node {
        op: Op::Source(Source::Constant(bytes)),
        args: vec![],
        ..node.clone()
    };
    if consts.iter().all(is_splat) {
        if layout {
            // Moving a repeated value around leaves the same splat.
            return Some(constant(consts[0].0.clone()));
        }
        let scalars: Vec<Literal> = consts
            .iter()
            .map(|(b, s)| Literal::from_bytes(Shape::scalar(s.dtype()), b))
            .collect();
        let res = eval(&node.op, &scalars, Shape::scalar(node.shape.dtype()))?;
        return Some(constant(res.to_bytes().into()));
    }
    if node.shape.count() > FOLD_LIMIT || consts.iter().any(|(_, s)| s.count() > FOLD_LIMIT) {
        return None;
    }
    let literals: Vec<Literal> = consts
        .iter()
        .flat_map(|(b, s)| Op::Source(Source::Constant(b.clone())).eval(&[], *s))
        .collect();
    let res = eval(&node.op, &literals, node.shape)?;
    let bytes = res.to_bytes();
    Some(constant(
        splat(&bytes, node.shape).unwrap_or_else(|| bytes.into()),
    ))
}

/// `op` applied to `args` by its reference semantics, unless a 64-bit
/// integer operand or result is not exact in an `f64`.
fn eval(op: &Op, args: &[Literal], shape: Shape) -> Option<Literal> {
    if args.iter().any(|l| !exact(l)) {
        return None;
    }
    let refs: Vec<&Literal> = args.iter().collect();
    let res = op.eval(&refs, shape).into_iter().next()?;
    exact(&res).then_some(res)
}

/// Whether the `f64` values of `l` stand for its elements exactly.
fn exact(l: &Literal) -> bool {
    const LIMIT: f64 = (1u64 << 53) as f64;
    !matches!(l.shape().dtype(), DType::I64 | DType::U64)
        || l.data().iter().all(|v| v.abs() < LIMIT)
}

/// One element's bytes if `bytes` (of `shape`) holds more than one element,
/// all equal.
fn splat(bytes: &[u8], shape: Shape) -> Option<Arc<[u8]>> {
    let n = shape.dtype().size_in_bytes();
    if bytes.len() <= n || n == 0 {
        return None;
    }
    let first = &bytes[..n];
    bytes
        .chunks_exact(n)
        .all(|c| c == first)
        .then(|| Arc::from(first))
}

/// Whether `id` is a constant whose every element equals `v`.
fn is_splat_of(f: &Function, id: ValueId, v: f64) -> bool {
    let node = f.node(id);
    let Op::Source(Source::Constant(bytes)) = &node.op else {
        return false;
    };
    let n = node.shape.dtype().size_in_bytes();
    if bytes.len() != n {
        return false; // constants reaching here are splats if they can be
    }
    Literal::from_bytes(Shape::scalar(node.shape.dtype()), bytes).data()[0] == v
}

/// Same dims and element type (tags may differ).
fn same_type(a: Shape, b: Shape) -> bool {
    a.dims() == b.dims() && a.dtype() == b.dtype()
}
