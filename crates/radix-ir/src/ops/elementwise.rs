//! Elementwise ops: unary math, binary arithmetic and logic, comparisons,
//! `select` and `clamp`. Operands must have equal dims and dtypes; a rank-0
//! operand is broadcast implicitly (nothing else is). Tags merge axis by axis;
//! two different tags on one axis are an error.
//!
//! Each unary, binary and comparison op is one row of a table below
//! (`unary_table!`, `binary_table!`, `compare_table!`): its variant,
//! its method name, its StableHLO name, the dtypes it accepts, its
//! properties, its reference semantics and its derivative. Adding such an
//! op is adding a row; the enums, names, printing, evaluation and the
//! properties the passes read ([`Binary::is_commutative`],
//! [`Binary::identity`]) are generated from it here, the tracer's methods
//! from the same row in radix's `tensor/elementwise.rs` and the derivative rules in
//! radix's `autodiff/elementwise.rs` (each table is a macro handing its rows to
//! another macro, so the IR side never names the tracer: a rule is written
//! in the tracer's language, and its names resolve where it is expanded).

use crate::Op;
use crate::literal::{Literal, round_to};
use crate::print::OpPrinter;
use crate::{DType, Shape};

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

/// Integers (not bool).
fn integer(d: DType) -> bool {
    d.is_integer()
}

/// Floats and signed integers.
fn signed(d: DType) -> bool {
    d.is_float() || d != DType::Bool && !d.is_unsigned()
}

/// Defines [`Unary`] from one row per op:
/// `Variant => method, "stablehlo name", dtypes, semantics, vjp: rule, "doc";`
/// where `dtypes` is a `fn(DType) -> bool`, `semantics` a
/// `fn(DType, f64) -> f64` on the operand's dtype and value, and `rule` the
/// derivative (radix's `autodiff/elementwise.rs`: from the operand `x`, the result
/// `z` and its cotangent `g`, the cotangent of `x`, `None` for zero).
macro_rules! unary_ops {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr, $eval:expr, vjp: $vjp:expr, $doc:literal;)*) => {
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

    };
}

/// Defines [`Binary`] from one row per op:
/// `Variant => method, "stablehlo name", dtypes, commutative: bool,
/// identity: Option<f64>, semantics, vjp: rule, "doc";` where `identity` is
/// the `e` with `x op e = x` (and `e op x = x` when commutative),
/// `semantics` a `fn(DType, f64, f64) -> f64` and `rule` the derivative
/// (from `x`, `y`, `z` and `g`, the cotangents of `x` and `y`).
macro_rules! binary_ops {
    ($($v:ident => $method:ident, $mlir:literal, $accepts:expr,
       commutative: $comm:expr, identity: $id:expr, $eval:expr, vjp: $vjp:expr, $doc:literal;)*) => {
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

    };
}

/// The unary ops, one row each, handed to the macro `$then`:
/// `unary_ops!` here, radix's methods and derivative rules there.
#[rustfmt::skip]
#[macro_export]
macro_rules! unary_table {
    ($then:ident) => {
        $then! {
                Neg      => neg,      "negate",                  signed,    |_, x| -x, vjp: |_, _, g| Some(-g),                     "`-x`";
                Abs      => abs,      "abs",                     signed,    |_, x| x.abs(), vjp: |x, _, g| Some(g * x.sign()),                "`|x|`";
                Sign     => sign,     "sign",                    signed,    |_, x| sign(x), vjp: zero,                "-1, 0 or 1";
                Exp      => exp,      "exponential",             float,     |_, x| x.exp(), vjp: |_, z, g| Some(g * z),                "`e^x`";
                Log      => log,      "log",                     float,     |_, x| x.ln(), vjp: |x, _, g| Some(g / x),                 "Natural log";
                Log1p    => log1p,    "log_plus_one",            float,     |_, x| x.ln_1p(), vjp: |x, _, g| Some(g / (x + 1.0)),              "`ln(1 + x)`";
                Expm1    => expm1,    "exponential_minus_one",   float,     |_, x| x.exp_m1(), vjp: |_, z, g| Some(g * (z + 1.0)),             "`e^x - 1`";
                Sqrt     => sqrt,     "sqrt",                    float,     |_, x| x.sqrt(), vjp: |_, z, g| Some(g / (z * 2.0)),               "Square root";
                Rsqrt    => rsqrt,    "rsqrt",                   float,     |_, x| 1.0 / x.sqrt(), vjp: |x, z, g| Some(g * (z / x * -0.5)),         "`1 / sqrt(x)`";
                Tanh     => tanh,     "tanh",                    float,     |_, x| x.tanh(), vjp: |_, z, g| Some(g * (1.0 - z * z)),               "Hyperbolic tangent";
                Sin      => sin,      "sine",                    float,     |_, x| x.sin(), vjp: |x, _, g| Some(g * x.cos()),                "Sine";
                Cos      => cos,      "cosine",                  float,     |_, x| x.cos(), vjp: |x, _, g| Some(-(g * x.sin())),                "Cosine";
                Floor    => floor,    "floor",                   float,     |_, x| x.floor(), vjp: zero,              "Round down";
                Ceil     => ceil,     "ceil",                    float,     |_, x| x.ceil(), vjp: zero,               "Round up";
                Round    => round,    "round_nearest_even",      float,     |_, x| x.round_ties_even(), vjp: zero,    "Round half to even";
                Logistic => logistic, "logistic",                float,     |_, x| 1.0 / (1.0 + (-x).exp()), vjp: |_, z, g| Some(g * (z * (1.0 - z))), "`1 / (1 + e^-x)`";
                Not      => not,      "not",                     not_float, not, vjp: zero,                           "Logical or bitwise not";
        }
    };
}

unary_table!(unary_ops);

/// The binary ops, one row each, handed to the macro `$then`:
/// `binary_ops!` here, radix's methods and derivative rules there.
#[rustfmt::skip]
#[macro_export]
macro_rules! binary_table {
    ($then:ident) => {
        $then! {
                Add => add,     "add",       not_bool,  commutative: true,  identity: Some(0.0), |_, a, b| a + b, vjp: |_, _, _, g| (Some(g), Some(g)), "`x + y`";
                Sub => sub,     "subtract",  not_bool,  commutative: false, identity: Some(0.0), |_, a, b| a - b, vjp: |_, _, _, g| (Some(g), Some(-g)), "`x - y`";
                Mul => mul,     "multiply",  not_bool,  commutative: true,  identity: Some(1.0), |_, a, b| a * b, vjp: |x, y, _, g| (Some(g * y), Some(g * x)), "`x * y`";
                Div => div,     "divide",    not_bool,  commutative: false, identity: Some(1.0), div, vjp: d_div,             "`x / y` (integers truncate)";
                Pow => pow,     "power",     not_bool,  commutative: false, identity: Some(1.0),     |_, a, b| a.powf(b), vjp: d_pow, "`x ^ y`";
                Max => maximum, "maximum",   any,       commutative: true,  identity: None,      |_, a, b| a.max(b), vjp: |x, y, _, g| d_extremum(x.gt(y), x.eq(y), g), "Elementwise maximum";
                Min => minimum, "minimum",   any,       commutative: true,  identity: None,      |_, a, b| a.min(b), vjp: |x, y, _, g| d_extremum(x.lt(y), x.eq(y), g), "Elementwise minimum";
                Rem => rem,     "remainder", not_bool,  commutative: false, identity: None,      |_, a, b| a % b, vjp: |x, y, z, g| (Some(g), Some(-(g * ((x - z) / y)))), "Remainder with the dividend's sign";
                And => and,     "and",       not_float, commutative: true,  identity: None,      |_, a, b| bits(a, b, |x, y| x & y), vjp: zero2, "Logical or bitwise and";
                Or  => or,      "or",        not_float, commutative: true,  identity: Some(0.0), |_, a, b| bits(a, b, |x, y| x | y), vjp: zero2, "Logical or bitwise or";
                Xor => xor,     "xor",       not_float, commutative: true,  identity: Some(0.0), |_, a, b| bits(a, b, |x, y| x ^ y), vjp: zero2, "Logical or bitwise xor";
                ShiftLeft => shift_left, "shift_left", integer, commutative: false, identity: Some(0.0), |d, a, b| shift(d, a, b, shift_left), vjp: zero2, "`x << y`, 0 where `y` (read unsigned) reaches the bit width";
                ShiftRightLogical => shift_right_logical, "shift_right_logical", integer, commutative: false, identity: Some(0.0), |d, a, b| shift(d, a, b, shift_right_logical), vjp: zero2, "`x >> y` filling with zeros, 0 where `y` (read unsigned) reaches the bit width";
                ShiftRightArithmetic => shift_right_arithmetic, "shift_right_arithmetic", integer, commutative: false, identity: Some(0.0), |d, a, b| shift(d, a, b, shift_right_arithmetic), vjp: zero2, "`x >> y` filling with the sign bit, all sign bits where `y` (read unsigned) reaches the bit width";
        }
    };
}

binary_table!(binary_ops);

/// The comparisons, one row each, handed to the macro `$then`:
/// `compare_ops!` here, radix's methods there.
#[rustfmt::skip]
#[macro_export]
macro_rules! compare_table {
    ($then:ident) => {
        $then! {
                Eq => eq, "EQ", commutative: true,  |a, b| a == b, "`x == y`";
                Ne => ne, "NE", commutative: true,  |a, b| a != b, "`x != y`";
                Lt => lt, "LT", commutative: false, |a, b| a < b,  "`x < y`";
                Le => le, "LE", commutative: false, |a, b| a <= b, "`x <= y`";
                Gt => gt, "GT", commutative: false, |a, b| a > b,  "`x > y`";
                Ge => ge, "GE", commutative: false, |a, b| a >= b, "`x >= y`";
        }
    };
}

compare_table!(compare_ops);

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

/// A shift of `a` by `b` on the bit patterns of `dtype`: `f(bits of a, bits
/// of b, bit width)` with both operands as unsigned `width`-bit patterns,
/// the result read back in `dtype` (signed types sign-extend).
fn shift(dtype: DType, a: f64, b: f64, f: fn(u64, u64, u32) -> u64) -> f64 {
    let width = 8 * dtype.size_in_bytes() as u32;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let to_bits = |v: f64| {
        if dtype.is_unsigned() {
            v as u64 & mask
        } else {
            v as i64 as u64 & mask
        }
    };
    let res = f(to_bits(a), to_bits(b), width) & mask;
    if dtype.is_unsigned() {
        res as f64
    } else {
        // Sign-extend the `width`-bit pattern.
        ((res << (64 - width)) as i64 >> (64 - width)) as f64
    }
}

/// `stablehlo.shift_left` on `width`-bit patterns.
fn shift_left(a: u64, b: u64, width: u32) -> u64 {
    if b >= u64::from(width) { 0 } else { a << b }
}

/// `stablehlo.shift_right_logical` on `width`-bit patterns.
fn shift_right_logical(a: u64, b: u64, width: u32) -> u64 {
    if b >= u64::from(width) { 0 } else { a >> b }
}

/// `stablehlo.shift_right_arithmetic` on `width`-bit patterns: the top bit
/// of `a` fills the vacated bits, all of them once `b` reaches the width.
fn shift_right_arithmetic(a: u64, b: u64, width: u32) -> u64 {
    let signed = ((a << (64 - width)) as i64) >> (64 - width);
    (signed >> b.min(u64::from(width) - 1)) as u64
}

/// An elementwise op: the ops of the tables above, `select` and `clamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elementwise {
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
    pub fn name(self) -> &'static str {
        match self {
            Elementwise::Unary(u) => u.name(),
            Elementwise::Binary(b) => b.name(),
            Elementwise::Compare(_) => "compare",
            Elementwise::Select => "select",
            Elementwise::Clamp => "clamp",
        }
    }

    /// Whether swapping the two operands changes nothing.
    pub fn is_commutative(self) -> bool {
        match self {
            Elementwise::Binary(b) => b.is_commutative(),
            Elementwise::Compare(c) => c.is_commutative(),
            _ => false,
        }
    }

    /// The shape rule: operands of one type (`clamp`'s bounds may be
    /// scalars), a dtype the row accepts; the result has that type (bool
    /// for a comparison), with the tags of the operands merged.
    pub fn infer(self, args: &[Shape]) -> Result<Shape, String> {
        let want = match self {
            Elementwise::Unary(_) => 1,
            Elementwise::Binary(_) | Elementwise::Compare(_) => 2,
            Elementwise::Select | Elementwise::Clamp => 3,
        };
        super::arity(args, want)?;
        let same = |a: Shape, b: Shape| super::same_type(a, b).map(|()| merge(a, b).unwrap_or(a));
        let accepted = |s: Shape, ok: bool| {
            if ok {
                Ok(s)
            } else {
                Err(format!("not defined on {}", s.dtype()))
            }
        };
        match self {
            Elementwise::Unary(u) => accepted(args[0], u.accepts(args[0].dtype())),
            Elementwise::Binary(b) => {
                let s = same(args[0], args[1])?;
                accepted(s, b.accepts(s.dtype()))
            }
            Elementwise::Compare(_) => Ok(same(args[0], args[1])?.with_dtype(DType::Bool)),
            Elementwise::Select => {
                let s = same(args[1], args[2])?;
                same(args[0], s.with_dtype(DType::Bool))?;
                Ok(s)
            }
            Elementwise::Clamp => {
                let x = args[1];
                for bound in [args[0], args[2]] {
                    if bound.rank() == 0 {
                        super::scalar(bound, Some(x.dtype()), "a bound")?;
                    } else {
                        same(bound, x)?;
                    }
                }
                accepted(x, x.dtype() != DType::Bool)
            }
        }
    }

    /// The op in generic MLIR form.
    pub fn print(self, p: &mut OpPrinter<'_>) {
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

    /// The reference semantics, element by element (a rank-0 operand
    /// broadcast), rounded to the result's dtype.
    pub fn eval(self, args: &[&Literal], shape: Shape) -> Literal {
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

/// Merges two shapes of an elementwise op: equal dims and dtypes (or a rank-0
/// side), tags merged per axis.
pub fn merge(a: Shape, b: Shape) -> Result<Shape, String> {
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

impl super::Family for Elementwise {
    fn name(&self) -> &'static str {
        Elementwise::name(*self)
    }

    fn infer(&self, args: &[Shape], _: Shape) -> Result<super::Shapes, String> {
        Elementwise::infer(*self, args).map(|s| vec![s])
    }

    fn print(&self, p: &mut OpPrinter<'_>) {
        Elementwise::print(*self, p)
    }

    fn eval(&self, args: &[&Literal], shape: Shape) -> Vec<Literal> {
        vec![Elementwise::eval(*self, args, shape)]
    }
}
