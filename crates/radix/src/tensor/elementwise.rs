//! The elementwise ops as `Tensor` methods and operators, generated from the
//! rows of the tables in `ir/ops/elementwise.rs` (which also hold the shape
//! rule, printing and reference semantics): a scalar operand is broadcast
//! here, where nodes can be recorded.

use crate::ir::ops::Movement;
use std::ops;

use crate::ir::Op;
use crate::ir::ops::elementwise::{Elementwise, merge};
use crate::tensor::{emit, fail, record_inferred};
use crate::{Binary, Compare, DType, Shape, Tensor, Unary};
use radix_ir::{binary_table, compare_table, unary_table};

/// The methods of the unary table's rows.
macro_rules! unary_methods {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr, $eval:expr, vjp: $vjp:expr, $doc:literal;)*) => {
        #[allow(clippy::should_implement_trait)]
        impl Tensor {
            $(
                #[doc = concat!($doc, " (`stablehlo.", $mlir, "`).")]
                #[track_caller]
                pub fn $method(self) -> Tensor {
                    unary(Unary::$v, self)
                }
            )*
        }
    };
}

/// The methods of the binary table's rows.
macro_rules! binary_methods {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr,
       commutative: $comm:expr, identity: $id:expr, $eval:expr, vjp: $vjp:expr, $doc:literal;)*) => {
        #[allow(clippy::should_implement_trait)]
        impl Tensor {
            $(
                #[doc = concat!($doc, " (`stablehlo.", $mlir, "`).")]
                #[track_caller]
                pub fn $method(self, rhs: Tensor) -> Tensor {
                    binary(Binary::$v, self, rhs)
                }
            )*
        }
    };
}

/// The methods of the comparison table's rows.
macro_rules! compare_methods {
    ($($v:ident => $method:ident, $dir:literal, commutative: $comm:expr, $eval:expr, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = concat!($doc, " as bools (`stablehlo.compare ", $dir, "`).")]
                #[track_caller]
                pub fn $method(self, rhs: Tensor) -> Tensor {
                    binary(Compare::$v, self, rhs)
                }
            )*
        }
    };
}

unary_table!(unary_methods);
binary_table!(binary_methods);
compare_table!(compare_methods);

impl Tensor {
    /// Where `self` (bools) is true `on_true`, else `on_false`
    /// (`stablehlo.select`). A rank-0 predicate or branch is broadcast.
    #[track_caller]
    pub fn select(self, on_true: Tensor, on_false: Tensor) -> Tensor {
        let args = [self, on_true, on_false];
        if self.dtype() != DType::Bool {
            return fail(
                "select",
                "the predicate must be bool".into(),
                &args,
                on_true.shape(),
            );
        }
        let res = merge(on_true.shape(), on_false.shape()).and_then(|s| {
            let s = if self.rank() == 0 {
                s
            } else {
                merge(self.shape().with_dtype(s.dtype()), s)?
            };
            Ok(s)
        });
        match res {
            Ok(s) => {
                let [p, t, f] = args.map(|a| broadcast_scalar(a, s));
                emit(Op::Elementwise(Elementwise::Select), &[p, t, f], s)
            }
            Err(msg) => fail("select", msg, &args, on_true.shape()),
        }
    }

    /// `min(max(x, lo), hi)` with scalar bounds of `x`'s dtype (`stablehlo.clamp`).
    #[track_caller]
    pub fn clamp(self, lo: f64, hi: f64) -> Tensor {
        let lo = Tensor::scalar(lo, self.dtype());
        let hi = Tensor::scalar(hi, self.dtype());
        if self.dtype() == DType::Bool {
            return fail("clamp", "clamp of bools".into(), &[self], self.shape());
        }
        emit(
            Op::Elementwise(Elementwise::Clamp),
            &[lo, self, hi],
            self.shape(),
        )
    }
}

/// A rank-0 `t` broadcast to `like`'s dims (tags are not needed on a scalar).
#[track_caller]
fn broadcast_scalar(t: Tensor, like: Shape) -> Tensor {
    if t.rank() == 0 && like.rank() > 0 {
        emit(
            Op::Movement(Movement::Broadcast(vec![])),
            &[t],
            like.with_dtype(t.dtype()),
        )
    } else {
        t.retag(like.with_dtype(t.dtype()))
    }
}

#[track_caller]
fn unary(op: Unary, x: Tensor) -> Tensor {
    record_inferred(op.name(), &[x], Ok(op.into()))
}

/// A two-operand op (a row of the binary or the comparison table), a
/// rank-0 operand broadcast to the other's shape first.
#[track_caller]
fn binary(op: impl Into<Op>, a: Tensor, b: Tensor) -> Tensor {
    let op = op.into();
    match merge(a.shape(), b.shape()) {
        Ok(s) => {
            let (a2, b2) = (broadcast_scalar(a, s), broadcast_scalar(b, s));
            record_inferred(op.name(), &[a2, b2], Ok(op))
        }
        Err(msg) => fail(op.name(), msg, &[a, b], a.shape()),
    }
}

macro_rules! operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                binary(Binary::$op, self, rhs)
            }
        }
        impl ops::$trait<f64> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f64) -> Tensor {
                binary(Binary::$op, self, Tensor::scalar(rhs, self.dtype()))
            }
        }
        impl ops::$trait<Tensor> for f64 {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                binary(Binary::$op, Tensor::scalar(self, rhs.dtype()), rhs)
            }
        }
    };
}

operator!(Add, add, Add);
operator!(Sub, sub, Sub);
operator!(Mul, mul, Mul);
operator!(Div, div, Div);
operator!(Rem, rem, Rem);

impl ops::Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        unary(Unary::Neg, self)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{Tol, check};
    use crate::{DType, Literal, Shape, Tensor};

    type UnaryFn = fn(Tensor) -> Tensor;
    type BinaryFn = fn(Tensor, Tensor) -> Tensor;

    fn f32s(v: &[f32]) -> Literal {
        Literal::from_slice(v, &[v.len() as i64])
    }

    #[test]
    fn unary_math() {
        let x = [f32s(&[-1.5, 0.0, 0.5, 2.0])];
        let cases: [(UnaryFn, [f64; 4]); 14] = [
            (Tensor::neg, [1.5, 0.0, -0.5, -2.0]),
            (Tensor::abs, [1.5, 0.0, 0.5, 2.0]),
            (Tensor::sign, [-1.0, 0.0, 1.0, 1.0]),
            (Tensor::exp, [0.223130167, 1.0, 1.64872122, 7.38905621]),
            (Tensor::expm1, [-0.776869833, 0.0, 0.648721278, 6.38905621]),
            (Tensor::tanh, [-0.905148268, 0.0, 0.462117165, 0.964027584]),
            (Tensor::sin, [-0.997494996, 0.0, 0.47942555, 0.909297407]),
            (Tensor::cos, [0.070737198, 1.0, 0.87758255, -0.416146845]),
            (
                Tensor::logistic,
                [0.182425529, 0.5, 0.622459352, 0.880797088],
            ),
            (Tensor::floor, [-2.0, 0.0, 0.0, 2.0]),
            (Tensor::ceil, [-1.0, 0.0, 1.0, 2.0]),
            (Tensor::round, [-2.0, 0.0, 0.0, 2.0]),
            (Tensor::relu, [0.0, 0.0, 0.5, 2.0]),
            (|x| -x, [1.5, 0.0, -0.5, -2.0]),
        ];
        for (f, want) in cases {
            check(&x, |xs| f(xs[0]), &want, Tol::F32);
        }
        let p = [f32s(&[0.25, 1.0, 2.5, 4.0])];
        let cases: [(UnaryFn, [f64; 4]); 4] = [
            (Tensor::log, [-1.38629436, 0.0, 0.91629076, 1.38629436]),
            (
                Tensor::log1p,
                [0.223143548, 0.693147182, 1.25276291, 1.60943794],
            ),
            (Tensor::sqrt, [0.5, 1.0, 1.58113885, 2.0]),
            (Tensor::rsqrt, [2.0, 1.0, 0.632455528, 0.5]),
        ];
        for (f, want) in cases {
            check(&p, |xs| f(xs[0]), &want, Tol::F32);
        }
    }

    #[test]
    fn activations() {
        let x = [f32s(&[-2.0, -0.5, 0.0, 1.0, 3.0])];
        check(
            &x,
            |x| x[0].gelu_tanh(),
            &[-0.0454023059, -0.15428599, 0.0, 0.841191991, 2.99636261],
            Tol::F32,
        );
        let erf_tol = Tol {
            rel: 1e-5,
            abs: 1e-6,
        };
        check(
            &x,
            |x| x[0].gelu_erf(),
            &[-0.0455002639, -0.154268769, 0.0, 0.841344746, 2.99595031],
            erf_tol,
        );
        check(
            &x,
            |x| x[0].silu(),
            &[-0.238405844, -0.188770334, 0.0, 0.731058579, 2.85772238],
            Tol::F32,
        );
    }

    #[test]
    fn binary_and_scalars() {
        let ab = [f32s(&[7.0, -7.0, 2.0, 9.0]), f32s(&[2.0, 2.0, -4.0, 0.5])];
        let cases: [(BinaryFn, [f64; 4]); 8] = [
            (|a, b| a + b, [9.0, -5.0, -2.0, 9.5]),
            (|a, b| a - b, [5.0, -9.0, 6.0, 8.5]),
            (|a, b| a * b, [14.0, -14.0, -8.0, 4.5]),
            (|a, b| a / b, [3.5, -3.5, -0.5, 18.0]),
            (|a, b| a % b, [1.0, -1.0, 2.0, 0.0]),
            (Tensor::maximum, [7.0, 2.0, 2.0, 9.0]),
            (Tensor::minimum, [2.0, -7.0, -4.0, 0.5]),
            (|a, b| a.abs().pow(b), [49.0, 49.0, 0.0625, 3.0]),
        ];
        for (f, want) in cases {
            check(&ab, |xs| f(xs[0], xs[1]), &want, Tol::F32);
        }
        check(
            &ab[..1],
            |x| 2.0 - x[0] * 3.0,
            &[-19.0, 23.0, -4.0, -25.0],
            Tol::F32,
        );
        check(
            &ab[..1],
            |x| x[0].clamp(0.0, 5.0),
            &[5.0, 0.0, 2.0, 5.0],
            Tol::F32,
        );
        check(
            &ab[..1],
            |x| x[0] + Tensor::scalar(1.0, DType::F32),
            &[8.0, -6.0, 3.0, 10.0],
            Tol::F32,
        );
    }

    #[test]
    fn integers_and_logic() {
        let ab = [
            Literal::from_slice(&[7i32, -7, 6, 12], &[4]),
            Literal::from_slice(&[2i32, 2, -4, 10], &[4]),
        ];
        check(&ab, |x| x[0] / x[1], &[3.0, -3.0, -1.0, 1.0], Tol::EXACT);
        check(&ab, |x| x[0] % x[1], &[1.0, -1.0, 2.0, 2.0], Tol::EXACT);
        check(&ab, |x| x[0].and(x[1]), &[2.0, 0.0, 4.0, 8.0], Tol::EXACT);
        check(&ab, |x| x[0].xor(x[1]), &[5.0, -5.0, -6.0, 6.0], Tol::EXACT);
        check(&ab, |x| x[0].not(), &[-8.0, 6.0, -7.0, -13.0], Tol::EXACT);
        check(&ab, |x| x[0].lt(x[1]), &[0.0, 1.0, 0.0, 0.0], Tol::EXACT);
        check(
            &ab,
            |x| x[0].ge(x[1]).or(x[0].eq(Tensor::scalar(-7.0, DType::I32))),
            &[1.0, 1.0, 1.0, 1.0],
            Tol::EXACT,
        );
        let sel = check(
            &ab,
            |x| x[0].gt(x[1]).select(x[0], x[1]),
            &[7.0, 2.0, 6.0, 12.0],
            Tol::EXACT,
        );
        assert_eq!(sel.shape().dtype(), DType::I32);
    }

    #[test]
    fn shifts_by_any_amount() {
        // Amounts are read unsigned: -1 is a huge shift. At or past the bit
        // width, left and logical shifts give 0, arithmetic ones the sign.
        let i32s = [
            Literal::from_slice(&[1i32, -8, 1 << 30, -1, 5, -5, 7, i32::MIN], &[8]),
            Literal::from_slice(&[3i32, 1, 1, 31, 32, 33, -1, 31], &[8]),
        ];
        let min = f64::from(i32::MIN);
        let cases: [(BinaryFn, [f64; 8]); 3] = [
            (
                Tensor::shift_left,
                [8.0, -16.0, min, min, 0.0, 0.0, 0.0, 0.0],
            ),
            (
                Tensor::shift_right_logical,
                [0.0, 2147483644.0, 536870912.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            ),
            (
                Tensor::shift_right_arithmetic,
                [0.0, -4.0, 536870912.0, -1.0, 0.0, -1.0, 0.0, -1.0],
            ),
        ];
        for (f, want) in cases {
            check(&i32s, |xs| f(xs[0], xs[1]), &want, Tol::EXACT);
        }
        // Unsigned operands: the arithmetic shift fills with the top bit.
        let u8s = [
            Literal::from_slice(&[0x81u8, 0xFF, 1, 0xF0], &[4]),
            Literal::from_slice(&[1u8, 7, 8, 255], &[4]),
        ];
        let cases: [(BinaryFn, [f64; 4]); 3] = [
            (Tensor::shift_left, [2.0, 128.0, 0.0, 0.0]),
            (Tensor::shift_right_logical, [64.0, 1.0, 0.0, 0.0]),
            (Tensor::shift_right_arithmetic, [192.0, 255.0, 0.0, 255.0]),
        ];
        for (f, want) in cases {
            check(&u8s, |xs| f(xs[0], xs[1]), &want, Tol::EXACT);
        }
        let u32s = [
            Literal::from_slice(&[0x8000_0001u32, u32::MAX], &[2]),
            Literal::from_slice(&[31u32, 4], &[2]),
        ];
        let cases: [(BinaryFn, [f64; 2]); 3] = [
            (Tensor::shift_left, [2147483648.0, 4294967280.0]),
            (Tensor::shift_right_logical, [1.0, 268435455.0]),
            (Tensor::shift_right_arithmetic, [4294967295.0, 4294967295.0]),
        ];
        for (f, want) in cases {
            check(&u32s, |xs| f(xs[0], xs[1]), &want, Tol::EXACT);
        }
        // A scalar amount broadcasts; constant operands fold to the same.
        check(
            &u8s[..1],
            |x| x[0].shift_right_logical(Tensor::scalar(4.0, DType::U8)),
            &[8.0, 15.0, 0.0, 15.0],
            Tol::EXACT,
        );
        check(
            &u8s[..1],
            |x| {
                let c = Tensor::from_slice(&[-128i8, 64], &[2]);
                let folded = c.shift_right_arithmetic(Tensor::scalar(9.0, DType::I8));
                x[0].slice(0, 0..2).bitcast(DType::I8) + folded
            },
            &[-128.0, -1.0],
            Tol::EXACT,
        );
    }

    #[test]
    fn tags_merge_and_half_precision() {
        let x = Literal::new(
            Shape::tagged(DType::BF16, &[("b", 2), ("d", 2)]),
            vec![1.0, 2.0, 3.0, 4.0],
        );
        let y = Literal::new(
            Shape::new(DType::BF16, &[2, 2]),
            vec![0.5, 0.25, 0.125, 1.0],
        );
        let got = check(
            &[x, y],
            |t| (t[0] * t[1]).exp(),
            &[1.6487, 1.6487, 1.4550, 54.598],
            Tol::BF16,
        );
        assert_eq!(
            got.shape(),
            Shape::tagged(DType::BF16, &[("b", 2), ("d", 2)])
        );
        let h = Literal::new(Shape::new(DType::F16, &[3]), vec![0.1, 1.0, 10.0]);
        check(
            &[h],
            |t| t[0].sqrt() + 1.0,
            &[1.3162, 2.0, 4.1623],
            Tol::F16,
        );
    }
}
