//! Elementwise ops: unary math, binary arithmetic and logic, comparisons,
//! `select` and `clamp`. Operands must have equal dims and dtypes; a rank-0
//! operand is broadcast implicitly (nothing else is). Tags merge axis by axis;
//! two different tags on one axis are an error.

use std::ops;

use crate::ir::Op;
use crate::ir::print::OpPrinter;
use crate::literal::{Literal, round_to};
use crate::tensor::{emit, fail, record};
use crate::{DType, Shape, Tensor};

/// One-operand elementwise ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unary {
    /// `stablehlo.negate`
    Neg,
    /// `stablehlo.abs`
    Abs,
    /// `stablehlo.sign`
    Sign,
    /// `stablehlo.exponential`
    Exp,
    /// `stablehlo.log`
    Log,
    /// `stablehlo.log_plus_one`
    Log1p,
    /// `stablehlo.exponential_minus_one`
    Expm1,
    /// `stablehlo.sqrt`
    Sqrt,
    /// `stablehlo.rsqrt`
    Rsqrt,
    /// `stablehlo.tanh`
    Tanh,
    /// `stablehlo.sine`
    Sin,
    /// `stablehlo.cosine`
    Cos,
    /// `stablehlo.floor`
    Floor,
    /// `stablehlo.ceil`
    Ceil,
    /// `stablehlo.round_nearest_even`
    Round,
    /// `stablehlo.logistic`
    Logistic,
    /// `stablehlo.not`
    Not,
}

/// Two-operand elementwise ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `stablehlo.add`
    Add,
    /// `stablehlo.subtract`
    Sub,
    /// `stablehlo.multiply`
    Mul,
    /// `stablehlo.divide`
    Div,
    /// `stablehlo.power`
    Pow,
    /// `stablehlo.maximum`
    Max,
    /// `stablehlo.minimum`
    Min,
    /// `stablehlo.remainder`
    Rem,
    /// `stablehlo.and`
    And,
    /// `stablehlo.or`
    Or,
    /// `stablehlo.xor`
    Xor,
}

/// Comparison directions of `stablehlo.compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compare {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Unary {
    /// All unary ops.
    pub const ALL: [Unary; 17] = [
        Unary::Neg,
        Unary::Abs,
        Unary::Sign,
        Unary::Exp,
        Unary::Log,
        Unary::Log1p,
        Unary::Expm1,
        Unary::Sqrt,
        Unary::Rsqrt,
        Unary::Tanh,
        Unary::Sin,
        Unary::Cos,
        Unary::Floor,
        Unary::Ceil,
        Unary::Round,
        Unary::Logistic,
        Unary::Not,
    ];

    pub(crate) fn name(self) -> &'static str {
        &self.mlir()["stablehlo.".len()..]
    }

    fn mlir(self) -> &'static str {
        match self {
            Unary::Neg => "stablehlo.negate",
            Unary::Abs => "stablehlo.abs",
            Unary::Sign => "stablehlo.sign",
            Unary::Exp => "stablehlo.exponential",
            Unary::Log => "stablehlo.log",
            Unary::Log1p => "stablehlo.log_plus_one",
            Unary::Expm1 => "stablehlo.exponential_minus_one",
            Unary::Sqrt => "stablehlo.sqrt",
            Unary::Rsqrt => "stablehlo.rsqrt",
            Unary::Tanh => "stablehlo.tanh",
            Unary::Sin => "stablehlo.sine",
            Unary::Cos => "stablehlo.cosine",
            Unary::Floor => "stablehlo.floor",
            Unary::Ceil => "stablehlo.ceil",
            Unary::Round => "stablehlo.round_nearest_even",
            Unary::Logistic => "stablehlo.logistic",
            Unary::Not => "stablehlo.not",
        }
    }

    /// Which dtypes the op accepts.
    fn accepts(self, d: DType) -> bool {
        match self {
            Unary::Neg | Unary::Abs | Unary::Sign => {
                d != DType::Bool && !d.is_unsigned() || d.is_float()
            }
            Unary::Not => !d.is_float(),
            _ => d.is_float(),
        }
    }

    fn eval(self, dtype: DType, x: f64) -> f64 {
        match self {
            Unary::Neg => -x,
            Unary::Abs => x.abs(),
            Unary::Sign => {
                if x.is_nan() || x == 0.0 {
                    x
                } else {
                    x.signum()
                }
            }
            Unary::Exp => x.exp(),
            Unary::Log => x.ln(),
            Unary::Log1p => x.ln_1p(),
            Unary::Expm1 => x.exp_m1(),
            Unary::Sqrt => x.sqrt(),
            Unary::Rsqrt => 1.0 / x.sqrt(),
            Unary::Tanh => x.tanh(),
            Unary::Sin => x.sin(),
            Unary::Cos => x.cos(),
            Unary::Floor => x.floor(),
            Unary::Ceil => x.ceil(),
            Unary::Round => x.round_ties_even(),
            Unary::Logistic => 1.0 / (1.0 + (-x).exp()),
            Unary::Not if dtype == DType::Bool => 1.0 - x,
            Unary::Not => !(x as i64) as f64,
        }
    }
}

impl Binary {
    pub(crate) fn name(self) -> &'static str {
        &self.mlir()["stablehlo.".len()..]
    }

    fn mlir(self) -> &'static str {
        match self {
            Binary::Add => "stablehlo.add",
            Binary::Sub => "stablehlo.subtract",
            Binary::Mul => "stablehlo.multiply",
            Binary::Div => "stablehlo.divide",
            Binary::Pow => "stablehlo.power",
            Binary::Max => "stablehlo.maximum",
            Binary::Min => "stablehlo.minimum",
            Binary::Rem => "stablehlo.remainder",
            Binary::And => "stablehlo.and",
            Binary::Or => "stablehlo.or",
            Binary::Xor => "stablehlo.xor",
        }
    }

    fn accepts(self, d: DType) -> bool {
        match self {
            Binary::And | Binary::Or | Binary::Xor => !d.is_float(),
            Binary::Max | Binary::Min => true,
            _ => d != DType::Bool,
        }
    }

    fn eval(self, dtype: DType, a: f64, b: f64) -> f64 {
        let int = dtype.is_integer() || dtype == DType::Bool;
        match self {
            Binary::Add => a + b,
            Binary::Sub => a - b,
            Binary::Mul => a * b,
            Binary::Div if int => (a / b).trunc(),
            Binary::Div => a / b,
            Binary::Pow => a.powf(b),
            Binary::Max => a.max(b),
            Binary::Min => a.min(b),
            Binary::Rem => a % b,
            Binary::And => ((a as i64) & (b as i64)) as f64,
            Binary::Or => ((a as i64) | (b as i64)) as f64,
            Binary::Xor => ((a as i64) ^ (b as i64)) as f64,
        }
    }
}

impl Compare {
    fn mlir(self) -> &'static str {
        match self {
            Compare::Eq => "EQ",
            Compare::Ne => "NE",
            Compare::Lt => "LT",
            Compare::Le => "LE",
            Compare::Gt => "GT",
            Compare::Ge => "GE",
        }
    }

    fn eval(self, a: f64, b: f64) -> bool {
        match self {
            Compare::Eq => a == b,
            Compare::Ne => a != b,
            Compare::Lt => a < b,
            Compare::Le => a <= b,
            Compare::Gt => a > b,
            Compare::Ge => a >= b,
        }
    }
}

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(self) -> Tensor {
            unary(Unary::$op, self)
        }
    )*};
}

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(self, rhs: Tensor) -> Tensor {
            binary(Binary::$op, self, rhs)
        }
    )*};
}

macro_rules! compare_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(self, rhs: Tensor) -> Tensor {
            compare(Compare::$op, self, rhs)
        }
    )*};
}

#[allow(clippy::should_implement_trait)]
impl Tensor {
    unary_methods! {
        /// `-x` (`stablehlo.negate`).
        neg => Neg;
        /// `|x|` (`stablehlo.abs`).
        abs => Abs;
        /// -1, 0 or 1 (`stablehlo.sign`).
        sign => Sign;
        /// `e^x` (`stablehlo.exponential`).
        exp => Exp;
        /// Natural log (`stablehlo.log`).
        log => Log;
        /// `ln(1 + x)` (`stablehlo.log_plus_one`).
        log1p => Log1p;
        /// `e^x - 1` (`stablehlo.exponential_minus_one`).
        expm1 => Expm1;
        /// Square root (`stablehlo.sqrt`).
        sqrt => Sqrt;
        /// `1 / sqrt(x)` (`stablehlo.rsqrt`).
        rsqrt => Rsqrt;
        /// Hyperbolic tangent (`stablehlo.tanh`).
        tanh => Tanh;
        /// Sine (`stablehlo.sine`).
        sin => Sin;
        /// Cosine (`stablehlo.cosine`).
        cos => Cos;
        /// Round down (`stablehlo.floor`).
        floor => Floor;
        /// Round up (`stablehlo.ceil`).
        ceil => Ceil;
        /// Round half to even (`stablehlo.round_nearest_even`).
        round => Round;
        /// `1 / (1 + e^-x)` (`stablehlo.logistic`).
        logistic => Logistic;
        /// Logical or bitwise not (`stablehlo.not`).
        not => Not;
    }

    binary_methods! {
        /// `x + y` (`stablehlo.add`).
        add => Add;
        /// `x - y` (`stablehlo.subtract`).
        sub => Sub;
        /// `x * y` (`stablehlo.multiply`).
        mul => Mul;
        /// `x / y` (`stablehlo.divide`; integers truncate).
        div => Div;
        /// `x ^ y` (`stablehlo.power`).
        pow => Pow;
        /// Elementwise maximum (`stablehlo.maximum`).
        maximum => Max;
        /// Elementwise minimum (`stablehlo.minimum`).
        minimum => Min;
        /// Remainder with the dividend's sign (`stablehlo.remainder`).
        rem => Rem;
        /// Logical or bitwise and (`stablehlo.and`).
        and => And;
        /// Logical or bitwise or (`stablehlo.or`).
        or => Or;
        /// Logical or bitwise xor (`stablehlo.xor`).
        xor => Xor;
    }

    compare_methods! {
        /// `x == y` as bools (`stablehlo.compare EQ`).
        eq => Eq;
        /// `x != y` (`stablehlo.compare NE`).
        ne => Ne;
        /// `x < y` (`stablehlo.compare LT`).
        lt => Lt;
        /// `x <= y` (`stablehlo.compare LE`).
        le => Le;
        /// `x > y` (`stablehlo.compare GT`).
        gt => Gt;
        /// `x >= y` (`stablehlo.compare GE`).
        ge => Ge;
    }

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
                emit(Op::Select, &[p, t, f], s)
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
        emit(Op::Clamp, &[lo, self, hi], self.shape())
    }
}

/// A rank-0 `t` broadcast to `like`'s dims (tags are not needed on a scalar).
#[track_caller]
fn broadcast_scalar(t: Tensor, like: Shape) -> Tensor {
    if t.rank() == 0 && like.rank() > 0 {
        emit(Op::Broadcast(vec![]), &[t], like.with_dtype(t.dtype()))
    } else {
        t.retag(like.with_dtype(t.dtype()))
    }
}

/// Merges two shapes of an elementwise op: equal dims and dtypes (or a rank-0
/// side), tags merged per axis.
fn merge(a: Shape, b: Shape) -> Result<Shape, String> {
    if a.dtype() != b.dtype() {
        return Err(format!("dtypes differ: {} and {}", a.dtype(), b.dtype()));
    }
    if a.rank() == 0 {
        return Ok(b);
    }
    if b.rank() == 0 {
        return Ok(a);
    }
    if a.dims() != b.dims() {
        return Err(format!(
            "dims differ: {:?} and {:?} (only scalars broadcast implicitly)",
            a.dims(),
            b.dims()
        ));
    }
    let mut res = a;
    for i in 0..a.rank() {
        match (a.tag(i), b.tag(i)) {
            (Some(x), Some(y)) if x != y => {
                return Err(format!("axis {i} is tagged .{x} and .{y}"));
            }
            (None, Some(y)) => res = res.with_tag(i, y.as_str()).unwrap_or(res),
            _ => {}
        }
    }
    Ok(res)
}

#[track_caller]
fn unary(op: Unary, x: Tensor) -> Tensor {
    let res = if op.accepts(x.dtype()) {
        Ok((Op::Unary(op), x.shape()))
    } else {
        Err(format!("not defined on {}", x.dtype()))
    };
    record(op.name(), &[x], res)
}

#[track_caller]
fn binary(op: Binary, a: Tensor, b: Tensor) -> Tensor {
    match merge(a.shape(), b.shape()) {
        Ok(s) if !op.accepts(s.dtype()) => fail(
            op.name(),
            format!("not defined on {}", s.dtype()),
            &[a, b],
            a.shape(),
        ),
        Ok(s) => {
            let (a2, b2) = (broadcast_scalar(a, s), broadcast_scalar(b, s));
            emit(Op::Binary(op), &[a2, b2], s)
        }
        Err(msg) => fail(op.name(), msg, &[a, b], a.shape()),
    }
}

#[track_caller]
fn compare(op: Compare, a: Tensor, b: Tensor) -> Tensor {
    match merge(a.shape(), b.shape()) {
        Ok(s) => {
            let (a2, b2) = (broadcast_scalar(a, s), broadcast_scalar(b, s));
            emit(Op::Compare(op), &[a2, b2], s.with_dtype(DType::Bool))
        }
        Err(msg) => fail("compare", msg, &[a, b], a.shape().with_dtype(DType::Bool)),
    }
}

pub(crate) fn print(op: &Op, p: &mut OpPrinter<'_>) {
    match op {
        Op::Unary(u) => p.generic(u.mlir(), ""),
        Op::Binary(b) => p.generic(b.mlir(), ""),
        Op::Compare(c) => {
            let ty = p.arg_shapes()[0].dtype();
            let kind = if ty.is_float() {
                "FLOAT"
            } else if ty.is_unsigned() || ty == DType::Bool {
                "UNSIGNED"
            } else {
                "SIGNED"
            };
            let attrs = format!(
                "comparison_direction = #stablehlo<comparison_direction {}>, compare_type = #stablehlo<comparison_type {kind}>",
                c.mlir()
            );
            p.generic("stablehlo.compare", &attrs)
        }
        Op::Select => p.generic("stablehlo.select", ""),
        Op::Clamp => p.generic("stablehlo.clamp", ""),
        _ => unreachable!(),
    }
}

pub(crate) fn eval(op: &Op, args: &[&Literal], shape: Shape) -> Literal {
    let at = |k: usize, i: usize| {
        let a = args[k].data();
        if a.len() == 1 { a[0] } else { a[i] }
    };
    let dt = args[0].shape().dtype();
    let data = (0..shape.count())
        .map(|i| match op {
            Op::Unary(u) => u.eval(dt, at(0, i)),
            Op::Binary(b) => b.eval(dt, at(0, i), at(1, i)),
            Op::Compare(c) => c.eval(at(0, i), at(1, i)) as u8 as f64,
            Op::Select => {
                if at(0, i) != 0.0 {
                    at(1, i)
                } else {
                    at(2, i)
                }
            }
            Op::Clamp => at(1, i).max(at(0, i)).min(at(2, i)),
            _ => unreachable!(),
        })
        .map(|v| round_to(shape.dtype(), v))
        .collect();
    Literal::new(shape, data)
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
