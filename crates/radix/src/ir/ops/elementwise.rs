//! Elementwise ops: unary math, binary arithmetic and logic, comparisons,
//! `select` and `clamp`. Operands must have equal dims and dtypes; a rank-0
//! operand is broadcast implicitly (nothing else is). Tags merge axis by axis;
//! two different tags on one axis are an error.
//!
//! Each unary, binary and comparison op is one row of a table below
//! ([`unary_ops!`], [`binary_ops!`], [`compare_ops!`]): its variant, its
//! `Tensor` method, its StableHLO name, the dtypes it accepts, its
//! properties and its reference semantics. Adding such an op is adding a
//! row; the enums, methods, names, printing, evaluation and the properties
//! the passes read ([`Binary::is_commutative`], [`Binary::identity`]) are
//! generated from it.

use std::ops;

use crate::ir::Op;
use crate::ir::print::OpPrinter;
use crate::literal::{Literal, round_to};
use crate::tensor::{emit, fail, record};
use crate::{DType, Shape, Tensor};

/// Any dtype.
fn any(_: DType) -> bool {
    true
}

/// Floating-point dtypes.
fn float(d: DType) -> bool {
    d.is_float()
}

/// Booleans and integers.
fn not_float(d: DType) -> bool {
    !d.is_float()
}

/// Every dtype but bool.
fn not_bool(d: DType) -> bool {
    d != DType::Bool
}

/// Floats and signed integers.
fn signed(d: DType) -> bool {
    d.is_float() || d != DType::Bool && !d.is_unsigned()
}

/// Defines [`Unary`] from one row per op:
/// `Variant => method, "stablehlo name", dtypes, semantics, "doc";`
/// where `dtypes` is a `fn(DType) -> bool` and `semantics` a
/// `fn(DType, f64) -> f64` on the operand's dtype and value.
macro_rules! unary_ops {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr, $eval:expr, $doc:literal;)*) => {
        /// One-operand elementwise ops.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Unary {
            $(#[doc = concat!("`stablehlo.", $mlir, "`")] $v,)*
        }

        impl Unary {
            /// All unary ops.
            pub const ALL: &[Unary] = &[$(Unary::$v),*];

            /// The StableHLO op name without its `stablehlo.` prefix.
            pub fn name(self) -> &'static str {
                match self { $(Unary::$v => $mlir,)* }
            }

            /// Whether the op accepts operands of dtype `d`.
            pub fn accepts(self, d: DType) -> bool {
                let f: fn(DType) -> bool = match self { $(Unary::$v => $accepts,)* };
                f(d)
            }

            /// The reference semantics on one element of dtype `dtype`.
            pub fn eval(self, dtype: DType, x: f64) -> f64 {
                let f: fn(DType, f64) -> f64 = match self { $(Unary::$v => $eval,)* };
                f(dtype, x)
            }
        }

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

/// Defines [`Binary`] from one row per op:
/// `Variant => method, "stablehlo name", dtypes, commutative: bool,
/// identity: Option<f64>, semantics, "doc";` where `identity` is the `e`
/// with `x op e = x` (and `e op x = x` when commutative) and `semantics` a
/// `fn(DType, f64, f64) -> f64`.
macro_rules! binary_ops {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr,
       commutative: $comm:expr, identity: $id:expr, $eval:expr, $doc:literal;)*) => {
        /// Two-operand elementwise ops.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Binary {
            $(#[doc = concat!("`stablehlo.", $mlir, "`")] $v,)*
        }

        impl Binary {
            /// All binary ops.
            pub const ALL: &[Binary] = &[$(Binary::$v),*];

            /// The StableHLO op name without its `stablehlo.` prefix.
            pub fn name(self) -> &'static str {
                match self { $(Binary::$v => $mlir,)* }
            }

            /// Whether the op accepts operands of dtype `d`.
            pub fn accepts(self, d: DType) -> bool {
                let f: fn(DType) -> bool = match self { $(Binary::$v => $accepts,)* };
                f(d)
            }

            /// Whether `x op y = y op x`.
            pub fn is_commutative(self) -> bool {
                match self { $(Binary::$v => $comm,)* }
            }

            /// The `e` with `x op e = x` (and `e op x = x` when the op is
            /// commutative), where the op has one for every dtype it accepts.
            pub fn identity(self) -> Option<f64> {
                match self { $(Binary::$v => $id,)* }
            }

            /// The reference semantics on one pair of elements of dtype `dtype`.
            pub fn eval(self, dtype: DType, a: f64, b: f64) -> f64 {
                let f: fn(DType, f64, f64) -> f64 = match self { $(Binary::$v => $eval,)* };
                f(dtype, a, b)
            }
        }

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

/// Defines [`Compare`] from one row per direction:
/// `Variant => method, "DIRECTION", commutative: bool, semantics, "doc";`
/// with `semantics` a `fn(f64, f64) -> bool`. Comparisons accept every dtype.
macro_rules! compare_ops {
    ($($v:ident => $method:ident, $dir:literal, commutative: $comm:expr, $eval:expr, $doc:literal;)*) => {
        /// Comparison directions of `stablehlo.compare`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Compare {
            $(#[doc = $doc] $v,)*
        }

        impl Compare {
            /// All comparisons.
            pub const ALL: &[Compare] = &[$(Compare::$v),*];

            /// The `comparison_direction` of `stablehlo.compare`.
            pub fn direction(self) -> &'static str {
                match self { $(Compare::$v => $dir,)* }
            }

            /// Whether `x op y = y op x`.
            pub fn is_commutative(self) -> bool {
                match self { $(Compare::$v => $comm,)* }
            }

            /// The reference semantics on one pair of elements.
            pub fn eval(self, a: f64, b: f64) -> bool {
                let f: fn(f64, f64) -> bool = match self { $(Compare::$v => $eval,)* };
                f(a, b)
            }
        }

        impl Tensor {
            $(
                #[doc = concat!($doc, " as bools (`stablehlo.compare ", $dir, "`).")]
                #[track_caller]
                pub fn $method(self, rhs: Tensor) -> Tensor {
                    compare(Compare::$v, self, rhs)
                }
            )*
        }
    };
}

#[rustfmt::skip]
unary_ops! {
    Neg      => neg,      "negate",                  signed,    |_, x| -x,                     "`-x`";
    Abs      => abs,      "abs",                     signed,    |_, x| x.abs(),                "`|x|`";
    Sign     => sign,     "sign",                    signed,    |_, x| sign(x),                "-1, 0 or 1";
    Exp      => exp,      "exponential",             float,     |_, x| x.exp(),                "`e^x`";
    Log      => log,      "log",                     float,     |_, x| x.ln(),                 "Natural log";
    Log1p    => log1p,    "log_plus_one",            float,     |_, x| x.ln_1p(),              "`ln(1 + x)`";
    Expm1    => expm1,    "exponential_minus_one",   float,     |_, x| x.exp_m1(),             "`e^x - 1`";
    Sqrt     => sqrt,     "sqrt",                    float,     |_, x| x.sqrt(),               "Square root";
    Rsqrt    => rsqrt,    "rsqrt",                   float,     |_, x| 1.0 / x.sqrt(),         "`1 / sqrt(x)`";
    Tanh     => tanh,     "tanh",                    float,     |_, x| x.tanh(),               "Hyperbolic tangent";
    Sin      => sin,      "sine",                    float,     |_, x| x.sin(),                "Sine";
    Cos      => cos,      "cosine",                  float,     |_, x| x.cos(),                "Cosine";
    Floor    => floor,    "floor",                   float,     |_, x| x.floor(),              "Round down";
    Ceil     => ceil,     "ceil",                    float,     |_, x| x.ceil(),               "Round up";
    Round    => round,    "round_nearest_even",      float,     |_, x| x.round_ties_even(),    "Round half to even";
    Logistic => logistic, "logistic",                float,     |_, x| 1.0 / (1.0 + (-x).exp()), "`1 / (1 + e^-x)`";
    Not      => not,      "not",                     not_float, not,                           "Logical or bitwise not";
}

#[rustfmt::skip]
binary_ops! {
    Add => add,     "add",       not_bool,  commutative: true,  identity: Some(0.0), |_, a, b| a + b, "`x + y`";
    Sub => sub,     "subtract",  not_bool,  commutative: false, identity: Some(0.0), |_, a, b| a - b, "`x - y`";
    Mul => mul,     "multiply",  not_bool,  commutative: true,  identity: Some(1.0), |_, a, b| a * b, "`x * y`";
    Div => div,     "divide",    not_bool,  commutative: false, identity: Some(1.0), div,             "`x / y` (integers truncate)";
    Pow => pow,     "power",     not_bool,  commutative: false, identity: Some(1.0),     |_, a, b| a.powf(b), "`x ^ y`";
    Max => maximum, "maximum",   any,       commutative: true,  identity: None,      |_, a, b| a.max(b), "Elementwise maximum";
    Min => minimum, "minimum",   any,       commutative: true,  identity: None,      |_, a, b| a.min(b), "Elementwise minimum";
    Rem => rem,     "remainder", not_bool,  commutative: false, identity: None,      |_, a, b| a % b, "Remainder with the dividend's sign";
    And => and,     "and",       not_float, commutative: true,  identity: None,      |_, a, b| bits(a, b, |x, y| x & y), "Logical or bitwise and";
    Or  => or,      "or",        not_float, commutative: true,  identity: Some(0.0), |_, a, b| bits(a, b, |x, y| x | y), "Logical or bitwise or";
    Xor => xor,     "xor",       not_float, commutative: true,  identity: Some(0.0), |_, a, b| bits(a, b, |x, y| x ^ y), "Logical or bitwise xor";
}

#[rustfmt::skip]
compare_ops! {
    Eq => eq, "EQ", commutative: true,  |a, b| a == b, "`x == y`";
    Ne => ne, "NE", commutative: true,  |a, b| a != b, "`x != y`";
    Lt => lt, "LT", commutative: false, |a, b| a < b,  "`x < y`";
    Le => le, "LE", commutative: false, |a, b| a <= b, "`x <= y`";
    Gt => gt, "GT", commutative: false, |a, b| a > b,  "`x > y`";
    Ge => ge, "GE", commutative: false, |a, b| a >= b, "`x >= y`";
}

/// `stablehlo.sign`: NaN and ±0 stay as they are.
fn sign(x: f64) -> f64 {
    if x.is_nan() || x == 0.0 {
        x
    } else {
        x.signum()
    }
}

/// `stablehlo.not`: logical on bools, bitwise on integers.
fn not(dtype: DType, x: f64) -> f64 {
    if dtype == DType::Bool {
        1.0 - x
    } else {
        !(x as i64) as f64
    }
}

/// `stablehlo.divide`: integer division truncates.
fn div(dtype: DType, a: f64, b: f64) -> f64 {
    if dtype.is_integer() || dtype == DType::Bool {
        (a / b).trunc()
    } else {
        a / b
    }
}

/// A bitwise op on the integer values of `a` and `b`.
fn bits(a: f64, b: f64, f: fn(i64, i64) -> i64) -> f64 {
    f(a as i64, b as i64) as f64
}

/// An elementwise op: the ops of the tables above, `select` and `clamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Elementwise {
    /// A one-operand op.
    Unary(Unary),
    /// A two-operand op.
    Binary(Binary),
    /// `stablehlo.compare`.
    Compare(Compare),
    /// `stablehlo.select(pred, on_true, on_false)`.
    Select,
    /// `stablehlo.clamp(min, x, max)`.
    Clamp,
}

impl Elementwise {
    /// The op's short name for error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Elementwise::Unary(u) => u.name(),
            Elementwise::Binary(b) => b.name(),
            Elementwise::Compare(_) => "compare",
            Elementwise::Select => "select",
            Elementwise::Clamp => "clamp",
        }
    }

    /// Whether swapping the two operands changes nothing.
    pub(crate) fn is_commutative(self) -> bool {
        match self {
            Elementwise::Binary(b) => b.is_commutative(),
            Elementwise::Compare(c) => c.is_commutative(),
            _ => false,
        }
    }

    pub(crate) fn print(self, p: &mut OpPrinter<'_>) {
        match self {
            Elementwise::Unary(u) => p.generic(&format!("stablehlo.{}", u.name()), ""),
            Elementwise::Binary(b) => p.generic(&format!("stablehlo.{}", b.name()), ""),
            Elementwise::Compare(c) => {
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
                    c.direction()
                );
                p.generic("stablehlo.compare", &attrs)
            }
            Elementwise::Select => p.generic("stablehlo.select", ""),
            Elementwise::Clamp => p.generic("stablehlo.clamp", ""),
        }
    }

    pub(crate) fn eval(self, args: &[&Literal], shape: Shape) -> Literal {
        let at = |k: usize, i: usize| {
            let a = args[k].data();
            if a.len() == 1 { a[0] } else { a[i] }
        };
        let dt = args[0].shape().dtype();
        let data = (0..shape.count())
            .map(|i| match self {
                Elementwise::Unary(u) => u.eval(dt, at(0, i)),
                Elementwise::Binary(b) => b.eval(dt, at(0, i), at(1, i)),
                Elementwise::Compare(c) => c.eval(at(0, i), at(1, i)) as u8 as f64,
                Elementwise::Select => {
                    if at(0, i) != 0.0 {
                        at(1, i)
                    } else {
                        at(2, i)
                    }
                }
                Elementwise::Clamp => at(1, i).max(at(0, i)).min(at(2, i)),
            })
            .map(|v| round_to(shape.dtype(), v))
            .collect();
        Literal::new(shape, data)
    }
}

impl From<Unary> for Op {
    fn from(u: Unary) -> Op {
        Op::Elementwise(Elementwise::Unary(u))
    }
}

impl From<Binary> for Op {
    fn from(b: Binary) -> Op {
        Op::Elementwise(Elementwise::Binary(b))
    }
}

impl From<Compare> for Op {
    fn from(c: Compare) -> Op {
        Op::Elementwise(Elementwise::Compare(c))
    }
}

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
        Ok((op.into(), x.shape()))
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
            emit(op.into(), &[a2, b2], s)
        }
        Err(msg) => fail(op.name(), msg, &[a, b], a.shape()),
    }
}

#[track_caller]
fn compare(op: Compare, a: Tensor, b: Tensor) -> Tensor {
    match merge(a.shape(), b.shape()) {
        Ok(s) => {
            let (a2, b2) = (broadcast_scalar(a, s), broadcast_scalar(b, s));
            emit(op.into(), &[a2, b2], s.with_dtype(DType::Bool))
        }
        Err(msg) => fail("compare", msg, &[a, b], a.shape().with_dtype(DType::Bool)),
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
