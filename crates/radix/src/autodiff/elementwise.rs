//! The derivative rules of the elementwise ops: one per row of the tables
//! in `ir/ops/elementwise.rs` (the `vjp:` column, expanded here, where its
//! `Tensor` methods and the named rules below resolve), and `select`'s and
//! `clamp`'s.

use crate::autodiff::Rule;
use crate::ir::ops::elementwise::Elementwise;
use crate::{Binary, Tensor, Unary};
use radix_ir::{binary_table, unary_table};

/// A unary op's derivative rule: `(x, z = op(x), g = the cotangent of z)`
/// to the cotangent of `x` (`None`: zero).
type UnaryRule = fn(Tensor, Tensor, Tensor) -> Option<Tensor>;

/// A binary op's derivative rule: `(x, y, z = op(x, y), g = the cotangent
/// of z)` to the cotangents of `x` and `y` (`None`: zero).
type BinaryRule = fn(Tensor, Tensor, Tensor, Tensor) -> (Option<Tensor>, Option<Tensor>);

/// `unary_rule`, from the unary table's `vjp:` column.
macro_rules! unary_rules {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr, $eval:expr, vjp: $vjp:expr, $doc:literal;)*) => {
        /// The derivative rule of `u`.
        fn unary_rule(u: Unary) -> UnaryRule {
            match u { $(Unary::$v => $vjp,)* }
        }
    };
}

/// `binary_rule`, from the binary table's `vjp:` column.
macro_rules! binary_rules {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr,
       commutative: $comm:expr, identity: $id:expr, $eval:expr, vjp: $vjp:expr, $doc:literal;)*) => {
        /// The derivative rule of `b`.
        fn binary_rule(b: Binary) -> BinaryRule {
            match b { $(Binary::$v => $vjp,)* }
        }
    };
}

unary_table!(unary_rules);
binary_table!(binary_rules);

/// The derivative rule of every elementwise op: a rank-0 operand is
/// broadcast first and its cotangent summed back, then the row's rule
/// (or `select`'s, `clamp`'s) runs on equal shapes.
pub(super) fn vjp(op: Elementwise, args: &[Tensor], z: Tensor, g: Tensor) -> Rule {
    let shape = z.shape();
    let wide: Vec<Tensor> = args
        .iter()
        .map(|&a| match a.rank() == 0 && shape.rank() > 0 {
            true => a.broadcast_in_dim(shape, &[]),
            false => a,
        })
        .collect();
    let res = match op {
        Elementwise::Unary(u) => vec![unary_rule(u)(wide[0], z, g)],
        Elementwise::Binary(b) => {
            let (dx, dy) = binary_rule(b)(wide[0], wide[1], z, g);
            vec![dx, dy]
        }
        Elementwise::Compare(_) => vec![None, None],
        Elementwise::Select => {
            let (p, zero) = (wide[0], Tensor::zeros(g.shape()));
            vec![None, Some(p.select(g, zero)), Some(p.select(zero, g))]
        }
        Elementwise::Clamp => {
            let (lo, x, hi) = (wide[0], wide[1], wide[2]);
            let (below, above) = (x.lt(lo), x.gt(hi));
            let zero = Tensor::zeros(g.shape());
            vec![
                Some(below.select(g, zero)),
                Some(below.or(above).select(zero, g)),
                Some(above.select(g, zero)),
            ]
        }
    };
    Ok(res
        .into_iter()
        .zip(args)
        .map(|(ct, a)| ct.map(|ct| unbroadcast(ct, a)))
        .collect())
}

/// `ct`, the cotangent of `a` broadcast from rank 0, summed back to `a`'s
/// shape.
fn unbroadcast(ct: Tensor, a: &Tensor) -> Tensor {
    match a.rank() == 0 && ct.rank() > 0 {
        true => ct.sum((0..ct.rank()).collect::<Vec<_>>().as_slice()),
        false => ct,
    }
}

/// A piecewise-constant op: zero derivative.
fn zero(_: Tensor, _: Tensor, _: Tensor) -> Option<Tensor> {
    None
}

/// A binary op on integers or bools: no derivative.
fn zero2(_: Tensor, _: Tensor, _: Tensor, _: Tensor) -> (Option<Tensor>, Option<Tensor>) {
    (None, None)
}

/// `d (x / y) = (1 / y, -z / y)`.
fn d_div(_: Tensor, y: Tensor, z: Tensor, g: Tensor) -> (Option<Tensor>, Option<Tensor>) {
    let dx = g / y;
    (Some(dx), Some(-(dx * z)))
}

/// `d x^y = (y x^(y-1), z ln x)`, as JAX: `ln` of 1 where `x` is 0, so
/// that `0^y` has a finite derivative in `y`.
fn d_pow(x: Tensor, y: Tensor, z: Tensor, g: Tensor) -> (Option<Tensor>, Option<Tensor>) {
    let one = Tensor::full(x.shape(), 1.0);
    let dx = g * (x.pow(y - one) * y);
    let safe = x.eq(Tensor::zeros(x.shape())).select(one, x);
    (Some(dx), Some(g * (z * safe.log())))
}

/// `max`/`min`: the cotangent goes to the operand that `wins`, half to
/// each where they tie (as JAX).
fn d_extremum(wins: Tensor, ties: Tensor, g: Tensor) -> (Option<Tensor>, Option<Tensor>) {
    let s = g.shape();
    let tie_share = ties.select(Tensor::full(s, 0.5), Tensor::zeros(s));
    let dx = g * wins.select(Tensor::full(s, 1.0), tie_share);
    (Some(dx), Some(g - dx))
}
