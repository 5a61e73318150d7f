//! Reductions with a body, `stablehlo.reduce` (variadic) and
//! `stablehlo.reduce_window`: the window, its shape rule, the identities of
//! `max`/`min`, printing and reference semantics (which run the body).

use crate::literal::{Literal, strides, unravel};
use crate::print::{OpPrinter, i64_array, i64_list};
use crate::{DType, Shape};
use crate::{Function, interp};
use std::sync::Arc;

/// The reductions with a body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// `stablehlo.reduce` over axes: operands are the tensors, then one
    /// initial value each; `body` is hermetic over scalars (accumulators,
    /// then elements). Several results when it has several operands.
    Reduce {
        /// Accumulators and elements to accumulators.
        body: Arc<Function>,
        /// The axes summed away, ascending.
        axes: Vec<usize>,
    },
    /// `stablehlo.reduce_window` (operand, initial value).
    ReduceWindow {
        /// Two scalars to one.
        body: Arc<Function>,
        /// The window's sizes, strides and padding.
        window: Window,
    },
}

/// The window of a `reduce_window`, one entry per axis of the operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Window {
    /// The window's size along each axis.
    pub dims: Vec<i64>,
    /// How far the window moves between outputs along each axis (>= 1).
    pub strides: Vec<i64>,
    /// Elements of the initial value added before and after each axis (>= 0).
    pub padding: Vec<[i64; 2]>,
}

/// The shape rule of `reduce_window`: each axis counts the window's
/// positions over the padded operand.
pub fn windowed_shape(s: Shape, w: &Window) -> Result<Shape, String> {
    let r = s.rank();
    if w.dims.len() != r || w.strides.len() != r || w.padding.len() != r {
        return Err(format!("window {w:?} does not have {r} axes"));
    }
    let mut out = s;
    for k in 0..r {
        let padded = s.dims()[k] + w.padding[k][0] + w.padding[k][1];
        let bad = w.dims[k] < 1
            || w.strides[k] < 1
            || w.padding[k].iter().any(|&p| p < 0)
            || padded < w.dims[k];
        if bad {
            return Err(format!("window {w:?} does not fit {s}"));
        }
        out = super::shape_ops::resized(out, k, (padded - w.dims[k]) / w.strides[k] + 1);
    }
    Ok(out)
}

/// The lowest value of `dtype` (the identity of `maximum`).
pub fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::I8 => i8::MIN as f64,
        DType::I16 => i16::MIN as f64,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        d if d.is_unsigned() => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

/// The highest value of `dtype` (the identity of `minimum`).
pub fn highest(dtype: DType) -> f64 {
    match dtype {
        DType::I8 => i8::MAX as f64,
        DType::I16 => i16::MAX as f64,
        DType::I32 => i32::MAX as f64,
        DType::I64 => i64::MAX as f64,
        DType::U8 => u8::MAX as f64,
        DType::U16 => u16::MAX as f64,
        DType::U32 => u32::MAX as f64,
        DType::U64 => u64::MAX as f64,
        _ => f64::INFINITY,
    }
}

/// `body` applied to scalars `args` (one per parameter).
pub fn apply(body: &Function, args: &[f64]) -> Vec<f64> {
    let lits: Vec<Literal> = body
        .params
        .iter()
        .zip(args)
        .map(|(&p, &v)| Literal::new(body.node(p).shape, vec![v]))
        .collect();
    interp::eval(body, &lits)
        .into_iter()
        .map(|l| l.data()[0])
        .collect()
}
fn result_shapes(arg_shapes: &[Shape], axes: &[usize]) -> Vec<Shape> {
    let n = arg_shapes.len() / 2;
    arg_shapes[..n]
        .iter()
        .map(|&s| {
            axes.iter()
                .rev()
                .fold(s, |s, &i| s.remove_axis(i).unwrap_or(s))
        })
        .collect()
}

impl super::Family for Reduction {
    fn name(&self) -> &'static str {
        match self {
            Reduction::Reduce { .. } => "reduce",
            Reduction::ReduceWindow { .. } => "reduce_window",
        }
    }

    /// The shape rules of the reductions. `reduce`: operands of one dims, an
    /// initial scalar each of its dtype, a body from (accumulators, elements)
    /// to accumulators, distinct axes; each result is its operand without the
    /// axes. `reduce_window`: an operand and its initial scalar, a body over two
    /// scalars, the result [`windowed_shape`].
    fn infer(&self, args: &[Shape], _: Shape) -> Result<super::Shapes, String> {
        match self {
            Reduction::Reduce { body, axes } => {
                let n = args.len() / 2;
                let (operands, inits) = args.split_at(n);
                let first = *operands.first().ok_or("no operands")?;
                if !args.len().is_multiple_of(2) {
                    return Err(format!("{} operands and initial values", args.len()));
                }
                if let Some(t) = operands.iter().find(|t| t.dims() != first.dims()) {
                    return Err(format!("operands {first} and {t} differ"));
                }
                let scalars: Vec<Shape> =
                    operands.iter().map(|t| Shape::scalar(t.dtype())).collect();
                for (&i, s) in inits.iter().zip(&scalars) {
                    super::scalar(i, Some(s.dtype()), "the initial value")?;
                }
                let params: Vec<Shape> = scalars.iter().chain(&scalars).copied().collect();
                super::signature(body, "body", &params, &scalars)?;
                let mut sorted = axes.clone();
                sorted.sort();
                sorted.dedup();
                if sorted != *axes || axes.iter().any(|&a| a >= first.rank()) {
                    return Err(format!("axes {axes:?} of {first}"));
                }
                Ok(operands
                    .iter()
                    .map(|&t| {
                        axes.iter()
                            .rev()
                            .fold(t, |s, &i| s.remove_axis(i).unwrap_or(s))
                    })
                    .collect())
            }
            Reduction::ReduceWindow { body, window } => {
                super::arity(args, 2)?;
                let scalar = Shape::scalar(args[0].dtype());
                super::scalar(args[1], Some(scalar.dtype()), "the initial value")?;
                super::signature(body, "body", &[scalar, scalar], &[scalar])?;
                windowed_shape(args[0], window).map(|s| vec![s])
            }
        }
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        match self {
            Reduction::Reduce { body, axes } => {
                let n = body.results.len();
                let region = p.region(0, body, 2 * n, &[]);
                let attrs = format!("dimensions = {}", i64_array(axes.iter().map(|&a| a as i64)));
                if n == 1 {
                    p.generic_with("stablehlo.reduce", &region, &attrs)
                } else {
                    let shapes = result_shapes(p.arg_shapes(), axes);
                    p.multi("stablehlo.reduce", 2 * n, &[region], &attrs, &shapes)
                }
            }
            Reduction::ReduceWindow { body, window } => {
                let region = p.region(0, body, 2, &[]);
                let pads: Vec<String> = window
                    .padding
                    .iter()
                    .map(|&[lo, hi]| i64_list([lo, hi]))
                    .collect();
                let attrs = format!(
                    "window_dimensions = {}, window_strides = {}, padding = dense<[{}]> : tensor<{}x2xi64>",
                    i64_array(window.dims.iter().copied()),
                    i64_array(window.strides.iter().copied()),
                    pads.join(", "),
                    window.dims.len()
                );
                p.generic_with("stablehlo.reduce_window", &region, &attrs)
            }
        }
    }

    /// The results of a reduction: one literal per operand (`Reduce`), or
    /// the single windowed result (`ReduceWindow`).
    fn eval(&self, args: &[&Literal], _: Shape) -> Vec<Literal> {
        match self {
            Reduction::Reduce { body, axes } => {
                let n = body.results.len();
                let shapes: Vec<Shape> =
                    result_shapes(&args.iter().map(|l| l.shape()).collect::<Vec<_>>(), axes);
                let xs = args[0].shape();
                let ost = strides(shapes[0].dims());
                let mut acc: Vec<Vec<f64>> = (0..shapes[0].count())
                    .map(|_| args[n..].iter().map(|l| l.data()[0]).collect())
                    .collect();
                for i in 0..xs.count() {
                    let xi = unravel(i, xs.dims());
                    let o: usize = (0..xs.rank())
                        .filter(|k| !axes.contains(k))
                        .zip(&ost)
                        .map(|(k, s)| xi[k] * s)
                        .sum();
                    let mut a = acc[o].clone();
                    a.extend(args[..n].iter().map(|l| l.data()[i]));
                    acc[o] = apply(body, &a);
                }
                (0..n)
                    .map(|k| Literal::new(shapes[k], acc.iter().map(|a| a[k]).collect()))
                    .collect()
            }
            Reduction::ReduceWindow { body, window } => {
                let (x, init) = (args[0], args[1].data()[0]);
                let xs = x.shape();
                let shape = windowed_shape(xs, window).expect("checked when traced");
                let xst = strides(xs.dims());
                let data = (0..shape.count())
                    .map(|o| {
                        let oi = unravel(o, shape.dims());
                        let wshape = Shape::new(DType::F32, &window.dims);
                        (0..wshape.count()).fold(init, |acc, w| {
                            let wi = unravel(w, &window.dims);
                            let mut off = Some(0usize);
                            for k in 0..xs.rank() {
                                let at = oi[k] as i64 * window.strides[k] + wi[k] as i64
                                    - window.padding[k][0];
                                if at < 0 || at >= xs.dims()[k] {
                                    off = None;
                                }
                                off = off.map(|f| f + at.max(0) as usize * xst[k]);
                            }
                            let v = off.map_or(init, |f| x.data()[f]);
                            apply(body, &[acc, v])[0]
                        })
                    })
                    .collect();
                vec![Literal::new(shape, data)]
            }
        }
    }
}

/// The binary op a scalar body `(acc, x) -> op(acc, x)` applies, if it is
/// one such op on its two parameters (either order).
pub fn body_binary(body: &Function) -> Option<super::Binary> {
    let [r] = body.results[..] else { return None };
    let n = body.node(r);
    let crate::Op::Elementwise(super::Elementwise::Binary(b)) = n.op else {
        return None;
    };
    let params: Vec<crate::ValueId> = body.params.clone();
    let mut args = n.args.clone();
    args.sort();
    (params.len() == 2 && args == params).then_some(b)
}
