//! What a reduction across processes computes, defined once: the ranks'
//! values folded left in rank order (`((x₀ ⊕ x₁) ⊕ x₂) ⊕ …`) in the
//! element type, so every rank computes the same bits, and a single
//! process holding every rank's input computes them too ([`fold`] is both
//! the reference semantics and what the collectives run).

use half::{bf16, f16};

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// `x + y` (integers wrap).
    Sum,
    /// The larger; a NaN wins.
    Max,
    /// The smaller; a NaN wins.
    Min,
    /// The sum, then divided by the number of ranks in the element type
    /// (integers: rounded toward zero).
    Mean,
}

impl ReduceOp {
    /// The op's name: `sum`, `max`, `min`, `mean`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Mean => "mean",
        }
    }

    /// The op named `name`, if any.
    pub fn from_name(name: &str) -> Option<ReduceOp> {
        [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean]
            .into_iter()
            .find(|op| op.name() == name)
    }
}

/// A plain element type the collectives move and reduce: every bit pattern
/// is a value and there is no padding, so it moves as bytes.
pub trait Elem: Copy + Send + Sync + 'static + sealed::Sealed {
    /// `a + b` in this type (bf16/f16: through f32, rounded once).
    fn add(a: Self, b: Self) -> Self;
    /// The larger (a NaN wins).
    fn max(a: Self, b: Self) -> Self;
    /// The smaller (a NaN wins).
    fn min(a: Self, b: Self) -> Self;
    /// `a / n`.
    fn div(a: Self, n: usize) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! ints {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Elem for $t {
            #[inline]
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            fn div(a: Self, n: usize) -> Self { a / (n as $t) }
        }
    )*};
}
ints!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! floats {
    ($($t:ty as $w:ty => $to:expr, $from:expr);*) => {$(
        impl sealed::Sealed for $t {}
        impl Elem for $t {
            #[inline]
            fn add(a: Self, b: Self) -> Self { $from($to(a) + $to(b)) }
            fn max(a: Self, b: Self) -> Self {
                if $to(a).is_nan() || $to(a) >= $to(b) { a } else { b }
            }
            fn min(a: Self, b: Self) -> Self {
                if $to(a).is_nan() || $to(a) <= $to(b) { a } else { b }
            }
            fn div(a: Self, n: usize) -> Self { $from($to(a) / n as $w) }
        }
    )*};
}
floats!(
    f32 as f32 => |x: f32| x, |x: f32| x;
    f64 as f64 => |x: f64| x, |x: f64| x;
    bf16 as f32 => |x: bf16| x.to_f32(), bf16::from_f32;
    f16 as f32 => |x: f16| x.to_f32(), f16::from_f32
);

/// Folds `parts` (one slice per rank, in rank order, all as long as `out`)
/// into `out` with `op`: the reference semantics of a reduction across
/// processes. With no parts `out` is left as it is.
pub fn fold<T: Elem>(op: ReduceOp, parts: &[&[T]], out: &mut [T]) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    // One loop per op, each with its function inlined (through a pointer,
    // a call per element kept f32 sums from vectorizing).
    match op {
        ReduceOp::Sum | ReduceOp::Mean => combine(out, first, rest, T::add),
        ReduceOp::Max => combine(out, first, rest, T::max),
        ReduceOp::Min => combine(out, first, rest, T::min),
    }
    if op == ReduceOp::Mean {
        for o in out.iter_mut() {
            *o = T::div(*o, parts.len());
        }
    }
}

/// `out = f(…f(f(first, rest[0]), rest[1])…)` elementwise: the first two
/// parts in one pass (no copy of `first` first), then each further one.
fn combine<T: Elem>(out: &mut [T], first: &[T], rest: &[&[T]], f: impl Fn(T, T) -> T) {
    let Some((second, more)) = rest.split_first() else {
        out.copy_from_slice(first);
        return;
    };
    for ((o, &a), &b) in out.iter_mut().zip(first).zip(second.iter()) {
        *o = f(a, b);
    }
    for part in more {
        for (o, &x) in out.iter_mut().zip(part.iter()) {
            *o = f(*o, x);
        }
    }
}

/// `xs` as bytes.
pub(crate) fn bytes<T: Elem>(xs: &[T]) -> &[u8] {
    // SAFETY: `Elem` types have no padding; any `T` is readable as bytes.
    unsafe { std::slice::from_raw_parts(xs.as_ptr().cast::<u8>(), std::mem::size_of_val(xs)) }
}

/// `bytes` as `T`s; `bytes` must be as long as a whole number of `T`s and
/// aligned for `T` (the collectives' own buffers are).
pub(crate) fn elems<T: Elem>(bytes: &[u8]) -> &[T] {
    let n = bytes.len() / std::mem::size_of::<T>();
    assert!(n * std::mem::size_of::<T>() == bytes.len());
    assert!((bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()));
    // SAFETY: length and alignment checked; every bit pattern is a `T`.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), n) }
}

/// `bytes` as writable `T`s, checked as [`elems`] checks.
pub(crate) fn elems_mut<T: Elem>(bytes: &mut [u8]) -> &mut [T] {
    let n = bytes.len() / std::mem::size_of::<T>();
    assert!(n * std::mem::size_of::<T>() == bytes.len());
    assert!((bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()));
    // SAFETY: length and alignment checked; every bit pattern is a `T`.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<T>(), n) }
}

/// `xs` as writable bytes.
pub(crate) fn bytes_mut<T: Elem>(xs: &mut [T]) -> &mut [u8] {
    // SAFETY: `Elem` types have no padding and every bit pattern is a `T`.
    unsafe {
        std::slice::from_raw_parts_mut(xs.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(xs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_in_rank_order_in_the_element_type() {
        // (1 + 2⁻⁸) + 2⁻⁸ in bf16 rounds at each step: 1; the other order
        // would keep more.
        let one = bf16::from_f32(1.0);
        let tiny = bf16::from_f32(1.0 / 256.0);
        let mut out = [bf16::ZERO];
        fold(ReduceOp::Sum, &[&[one], &[tiny], &[tiny]], &mut out);
        assert_eq!(out[0], one);
        fold(ReduceOp::Sum, &[&[tiny], &[tiny], &[one]], &mut out);
        assert_eq!(out[0], bf16::from_f32(1.0 + 2.0 / 256.0));
        let mut ints = [0i32; 2];
        fold(ReduceOp::Mean, &[&[i32::MAX, -3], &[1, 0]], &mut ints);
        assert_eq!(ints, [i32::MIN / 2, -1]);
        let mut m = [0f32; 2];
        fold(ReduceOp::Max, &[&[1.0, f32::NAN], &[2.0, 0.0]], &mut m);
        assert_eq!(m[0], 2.0);
        assert!(m[1].is_nan());
    }
}
