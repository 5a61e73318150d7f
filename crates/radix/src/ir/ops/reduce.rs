//! Reductions over axes: `sum`, `max`, `min` as `stablehlo.reduce` with a
//! fixed body. (User-written bodies come with blocks; see `ir`.)

use crate::ir::Op;
use crate::ir::print::{OpPrinter, i64_array, tensor_type};
use crate::literal::{Literal, round_to, strides, unravel};
use crate::shape::Axes;
use crate::tensor::record;
use crate::{DType, Shape, Tensor};

/// The body of a fixed reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reducer {
    /// `stablehlo.add` from 0.
    Sum,
    /// `stablehlo.maximum` from the lowest value.
    Max,
    /// `stablehlo.minimum` from the highest value.
    Min,
}

impl Reducer {
    fn name(self) -> &'static str {
        match self {
            Reducer::Sum => "sum",
            Reducer::Max => "max",
            Reducer::Min => "min",
        }
    }

    fn init(self, dtype: DType) -> f64 {
        match self {
            Reducer::Sum => 0.0,
            Reducer::Max => lowest(dtype),
            Reducer::Min => {
                -lowest(dtype)
                    - if dtype.is_integer() && !dtype.is_unsigned() {
                        1.0
                    } else {
                        0.0
                    }
            }
        }
    }
}

fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::I8 => i8::MIN as f64,
        DType::I16 => i16::MIN as f64,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        d if d.is_unsigned() => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

impl Tensor {
    /// The sum over `axes`, which are removed (`stablehlo.reduce` with `add`).
    #[track_caller]
    pub fn sum(self, axes: impl Axes) -> Tensor {
        reduce(Reducer::Sum, self, &axes)
    }

    /// The maximum over `axes`, which are removed (`stablehlo.reduce` with `maximum`).
    #[track_caller]
    pub fn max(self, axes: impl Axes) -> Tensor {
        reduce(Reducer::Max, self, &axes)
    }

    /// The minimum over `axes`, which are removed (`stablehlo.reduce` with `minimum`).
    #[track_caller]
    pub fn min(self, axes: impl Axes) -> Tensor {
        reduce(Reducer::Min, self, &axes)
    }
}

#[track_caller]
fn reduce(r: Reducer, x: Tensor, axes: &impl Axes) -> Tensor {
    let s = x.shape();
    let res = s.resolve(axes).and_then(|mut a| {
        if s.dtype() == DType::Bool || (r == Reducer::Sum && s.dtype() == DType::Bool) {
            return Err("reduction of bools".into());
        }
        a.sort();
        a.dedup();
        let mut out = s;
        for &i in a.iter().rev() {
            out = out.remove_axis(i).unwrap_or(out);
        }
        Ok((Op::Reduce(r, a), out))
    });
    record(r.name(), &[x], res)
}

pub(crate) fn print(r: Reducer, axes: &[usize], p: &mut OpPrinter<'_>) {
    let dtype = p.shape().dtype();
    let init = p.scalar_constant(Shape::scalar(dtype), r.init(dtype));
    let ty = tensor_type(&Shape::scalar(dtype));
    let body = match r {
        Reducer::Sum => "stablehlo.add",
        Reducer::Max => "stablehlo.maximum",
        Reducer::Min => "stablehlo.minimum",
    };
    let n = p.region_prefix();
    let region = format!(
        "      ^bb0({n}_a: {ty}, {n}_b: {ty}):\n        {n}_c = \"{body}\"({n}_a, {n}_b) : ({ty}, {ty}) -> {ty}\n        \"stablehlo.return\"({n}_c) : ({ty}) -> ()\n"
    );
    let attrs = format!("dimensions = {}", i64_array(axes.iter().map(|&a| a as i64)));
    p.generic_with("stablehlo.reduce", &[init], &region, &attrs)
}

pub(crate) fn eval(r: Reducer, axes: &[usize], args: &[&Literal], shape: Shape) -> Literal {
    let x = args[0];
    let xs = x.shape();
    let ost = strides(shape.dims());
    let mut acc = vec![r.init(xs.dtype()); shape.count()];
    for (i, &v) in x.data().iter().enumerate() {
        let xi = unravel(i, xs.dims());
        let o: usize = (0..xs.rank())
            .filter(|k| !axes.contains(k))
            .zip(&ost)
            .map(|(k, s)| xi[k] * s)
            .sum();
        acc[o] = match r {
            Reducer::Sum => acc[o] + v,
            Reducer::Max => acc[o].max(v),
            Reducer::Min => acc[o].min(v),
        };
    }
    Literal::new(
        shape,
        acc.into_iter()
            .map(|v| round_to(shape.dtype(), v))
            .collect(),
    )
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
