//! Reductions with a user-written body: [`reduce`] (`stablehlo.reduce`,
//! variadic) and [`Tensor::reduce_window`] (`stablehlo.reduce_window`), and
//! what is built on them: `sum`, `max`, `min`, `cumsum`, `max_pool`.
//!
//! A body is a *hermetic* block over scalar tensors: it may use only its
//! arguments and constants it makes itself (a captured tensor is an error
//! naming the value and the line). XLA may combine partial results in any
//! order, so a body must be associative and commutative, with the initial
//! value as its identity: `sum of squares` is `(x * x).reduce(0, add)`, not
//! `acc + x * x`.
//!
//! These are the methods that record the ops while tracing; the ops' printing
//! and reference semantics are in `ir/ops/reduce.rs`.

use crate::ir::Op;
use crate::ir::ops::Binary;
use crate::ir::ops::reduce::*;
use crate::shape::{Axes, AxisRef};
use crate::tensor::control::{poison, record_multi};
use crate::tensor::{Block, emit, fail, located, record_inferred, trace_hermetic_block};
use crate::{DType, Shape, Tensor};
use std::panic::Location;
use std::sync::Arc;

/// Reduces `operands` (tensors of equal dims) over `axes`, which are
/// removed, starting from the scalar `inits` (one per operand, of its
/// dtype) (`stablehlo.reduce`). `body(acc, x)` gets one scalar per operand
/// on each side and returns the combined scalars; it is a hermetic block
/// and must be associative and commutative with `inits` as identity.
/// Result `i` has operand `i`'s remaining axes and tags.
#[track_caller]
pub fn reduce(
    operands: &[Tensor],
    inits: &[Tensor],
    axes: impl Axes,
    body: impl FnOnce(&[Tensor], &[Tensor]) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let n = operands.len();
    let dtypes: Vec<DType> = operands.iter().map(|t| t.dtype()).collect();
    let block = scalar_block("reduce body", &dtypes, 2, |s| body(&s[..n], &s[n..]));
    reduce_with_block("reduce", operands, inits, &axes, block)
}

impl Tensor {
    /// Reduces `self` over `axes` (removed) from the scalar `init` with the
    /// hermetic `body(acc, x)` (`stablehlo.reduce`): `x.reduce(one, axes,
    /// |a, b| a * b)` is the product. See [`reduce`] for several operands.
    #[track_caller]
    pub fn reduce(
        self,
        init: Tensor,
        axes: impl Axes,
        body: impl FnOnce(Tensor, Tensor) -> Tensor,
    ) -> Tensor {
        let block = scalar_block("reduce body", &[self.dtype()], 2, |s| {
            vec![body(s[0], s[1])]
        });
        reduce_with_block("reduce", &[self], &[init], &axes, block)[0]
    }

    /// The sum over `axes`, which are removed (`stablehlo.reduce` with `add`).
    #[track_caller]
    pub fn sum(self, axes: impl Axes) -> Tensor {
        self.builtin("sum", &axes, 0.0, Binary::Add)
    }

    /// The maximum over `axes`, which are removed (`stablehlo.reduce` with `maximum`).
    #[track_caller]
    pub fn max(self, axes: impl Axes) -> Tensor {
        let init = lowest(self.dtype());
        self.builtin("max", &axes, init, Binary::Max)
    }

    /// The minimum over `axes`, which are removed (`stablehlo.reduce` with `minimum`).
    #[track_caller]
    pub fn min(self, axes: impl Axes) -> Tensor {
        let init = highest(self.dtype());
        self.builtin("min", &axes, init, Binary::Min)
    }

    /// Reduces windows of `self` (padded with `init`) with the hermetic
    /// `body(acc, x)` starting from the scalar `init`
    /// (`stablehlo.reduce_window`). Axis `i` of the result has
    /// `(d + pad_lo + pad_hi - window) / stride + 1` elements and keeps its tag.
    #[track_caller]
    pub fn reduce_window(
        self,
        init: Tensor,
        window: &Window,
        body: impl FnOnce(Tensor, Tensor) -> Tensor,
    ) -> Tensor {
        let block = scalar_block("reduce_window body", &[self.dtype()], 2, |s| {
            vec![body(s[0], s[1])]
        });
        let op = check_body(&block, &[self.dtype()]).map(|()| {
            Op::Reduction(Reduction::ReduceWindow {
                body: Arc::new(block.function),
                window: window.clone(),
            })
        });
        record_inferred("reduce_window", &[self, init], op)
    }

    /// The running sum along `axis` (`stablehlo.reduce_window` with a window
    /// of the whole axis, padded in front): `[1, 2, 3]` gives `[1, 3, 6]`.
    #[track_caller]
    pub fn cumsum(self, axis: impl Into<AxisRef>) -> Tensor {
        let axis = axis.into();
        let s = self.shape();
        let Some(a) = s.axis(axis) else {
            return fail("cumsum", format!("no axis {axis} in {s}"), &[self], s);
        };
        let n = s.dims()[a];
        let window = Window {
            dims: (0..s.rank()).map(|k| if k == a { n } else { 1 }).collect(),
            strides: vec![1; s.rank()],
            padding: (0..s.rank())
                .map(|k| if k == a { [n - 1, 0] } else { [0, 0] })
                .collect(),
        };
        let zero = Tensor::scalar(0.0, self.dtype());
        located(Location::caller(), || {
            self.reduce_window(zero, &window, |a, b| a + b)
        })
    }

    /// The maximum of each window (`stablehlo.reduce_window` with
    /// `maximum`); padding never wins.
    #[track_caller]
    pub fn max_pool(self, window: &Window) -> Tensor {
        let init = Tensor::scalar(lowest(self.dtype()), self.dtype());
        self.reduce_window(init, window, Tensor::maximum)
    }

    /// A one-operand reduction with the binary `op` as body.
    #[track_caller]
    fn builtin(self, name: &'static str, axes: &impl Axes, init: f64, op: Binary) -> Tensor {
        if self.dtype() == DType::Bool {
            return fail(name, "reduction of bools".into(), &[self], self.shape());
        }
        let init = Tensor::scalar(init, self.dtype());
        reduce_with_block(name, &[self], &[init], axes, binary_body(self.dtype(), op))[0]
    }
}

/// The body `op(acc, x)` over scalars of `dtype`, at the caller's line
/// (equal reductions compare equal wherever they are traced: bodies
/// compare by structure, not place).
#[track_caller]
fn binary_body(dtype: DType, op: Binary) -> Block {
    located(Location::caller(), || {
        scalar_block("reduce body", &[dtype], 2, |s| {
            vec![emit(op.into(), &s[..2], Shape::scalar(dtype))]
        })
    })
}

/// Traces the hermetic block `f` over `n_sides * dtypes.len()` scalars
/// (`dtypes` repeated `n_sides` times).
#[track_caller]
pub(crate) fn scalar_block(
    kind: &'static str,
    dtypes: &[DType],
    n_sides: usize,
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> Block {
    let shapes: Vec<Shape> = (0..n_sides)
        .flat_map(|_| dtypes.iter().map(|&d| Shape::scalar(d)))
        .collect();
    trace_hermetic_block(kind, &shapes, f)
}

/// Whether `block` returns one scalar of each of `dtypes`.
pub(crate) fn check_body(block: &Block, dtypes: &[DType]) -> Result<(), String> {
    let got: Vec<Shape> = block.results.iter().map(|t| t.shape()).collect();
    let want: Vec<Shape> = dtypes.iter().map(|&d| Shape::scalar(d)).collect();
    let same = got.len() == want.len()
        && got
            .iter()
            .zip(&want)
            .all(|(g, w)| g.dims() == w.dims() && g.dtype() == w.dtype());
    if same {
        Ok(())
    } else {
        Err(format!("the body gives {got:?}, not {want:?}"))
    }
}

#[track_caller]
fn reduce_with_block(
    name: &'static str,
    operands: &[Tensor],
    inits: &[Tensor],
    axes: &impl Axes,
    block: Block,
) -> Vec<Tensor> {
    let dtypes: Vec<DType> = operands.iter().map(|t| t.dtype()).collect();
    let mut args = operands.to_vec();
    args.extend_from_slice(inits);
    let fallback: Vec<Shape> = operands.iter().map(|t| t.shape()).collect();
    let axes = match operands.first() {
        None => Err("no operands".to_string()),
        // The split of `args` into operands and initial values is the
        // tracer's to check; the rule checks their types.
        Some(_) if inits.len() != operands.len() => Err(format!(
            "{} operands but {} initial values",
            operands.len(),
            inits.len()
        )),
        Some(first) => first.shape().resolve(axes).and_then(|mut a| {
            a.sort();
            a.dedup();
            check_body(&block, &dtypes).map(|()| a)
        }),
    };
    match axes {
        Ok(axes) => {
            let op = Op::Reduction(Reduction::Reduce {
                body: Arc::new(block.function),
                axes,
            });
            record_multi(name, op, &args, &fallback)
        }
        Err(msg) => poison(name, msg, &args, &fallback),
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, Literal, Shape};

    fn x() -> [Literal; 1] {
        [Literal::new(
            Shape::tagged(DType::F32, &[("b", 2), ("d", 3)]),
            vec![1., 2., 3., 1., 1., 1.],
        )]
    }

    #[test]
    fn sum_max_min_mean_keep_other_tags() {
        let s = check(&x(), |x| x[0].sum("d"), &[6., 3.], Tol::F32);
        assert_eq!(s.shape(), Shape::tagged(DType::F32, &[("b", 2)]));
        check(&x(), |x| x[0].sum(["b", "d"]), &[9.], Tol::F32);
        check(&x(), |x| x[0].max("b"), &[1., 2., 3.], Tol::F32);
        check(&x(), |x| x[0].min(1), &[1., 1.], Tol::F32);
        check(&x(), |x| x[0].mean("d"), &[2., 1.], Tol::F32);
        let i = [Literal::from_slice(&[5i32, -3, 9, 0], &[2, 2])];
        check(&i, |x| x[0].max(1), &[5., 9.], Tol::EXACT);
        check(&i, |x| x[0].min(0), &[5., -3.], Tol::EXACT);
        let h = [Literal::new(
            Shape::new(DType::BF16, &[4]),
            vec![0.5, 1.5, 2.0, 4.0],
        )];
        check(&h, |x| x[0].sum(0), &[8.0], Tol::BF16);
    }

    #[test]
    fn softmax_log_sum_exp_argmax() {
        let want = [
            0.0900305732,
            0.244728471,
            0.665240956,
            1. / 3.,
            1. / 3.,
            1. / 3.,
        ];
        let s = check(&x(), |x| x[0].softmax("d"), &want, Tol::F32);
        assert_eq!(s.shape(), x()[0].shape());
        check(
            &x(),
            |x| x[0].log_sum_exp("d"),
            &[3.40760596, 2.09861229],
            Tol::F32,
        );
        let a = check(&x(), |x| x[0].argmax("d"), &[2., 0.], Tol::EXACT);
        assert_eq!(a.shape(), Shape::tagged(DType::I32, &[("b", 2)]));
    }
}
