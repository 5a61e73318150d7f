//! Scalar functions written so that a loop over a slice of them runs in
//! vector lanes: no branch, no call into libm, no float-to-integer
//! conversion. The kernels of the custom calls use them inside loops
//! compiled for AVX-512 or AVX2 ([`vectorized!`]), where each call is
//! inlined.

/// Defines `$best(args)`: the `#[inline(always)]` loop `$portable(args)`
/// compiled for AVX-512 F where the CPU has it (sixteen f32 lanes), else
/// for AVX2 and FMA (eight), else as it is; and `$paths()`, every copy the
/// CPU can run by name (`portable` first), for the tests that check they
/// give the same bits. They do where the loop is one sequence of f32
/// operations per element: Rust contracts no multiply-add into an FMA, so
/// the instruction set changes only how many elements a step takes.
macro_rules! vectorized {
    ($(#[$doc:meta])* $vis:vis fn $best:ident, $paths:ident = $portable:ident($($arg:ident: $ty:ty),* $(,)?);) => {
        $(#[$doc])*
        $vis fn $best($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512 F, checked just above.
                    return unsafe { avx512::$portable($($arg),*) };
                }
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2 and FMA, checked just above.
                    return unsafe { avx2::$portable($($arg),*) };
                }
            }
            $portable($($arg),*)
        }

        /// Each compiled copy of the loop this CPU can run, by name.
        #[cfg(test)]
        fn $paths() -> Vec<(&'static str, fn($($ty),*))> {
            let mut paths: Vec<(&'static str, fn($($ty),*))> =
                vec![("portable", |$($arg: $ty),*| $portable($($arg),*))];
            #[cfg(target_arch = "x86_64")]
            {
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    // SAFETY (in the closure): the CPU has AVX2 and FMA,
                    // checked just above.
                    paths.push(("avx2", |$($arg: $ty),*| unsafe { avx2::$portable($($arg),*) }));
                }
                if is_x86_feature_detected!("avx512f") {
                    // SAFETY (in the closure): the CPU has AVX-512 F,
                    // checked just above.
                    paths.push(("avx512", |$($arg: $ty),*| unsafe {
                        avx512::$portable($($arg),*)
                    }));
                }
            }
            paths
        }

        #[cfg(target_arch = "x86_64")]
        mod avx512 {
            #[allow(unused_imports)]
            use super::*;
            #[target_feature(enable = "avx512f")]
            pub(super) fn $portable($($arg: $ty),*) {
                super::$portable($($arg),*)
            }
        }

        #[cfg(target_arch = "x86_64")]
        mod avx2 {
            #[allow(unused_imports)]
            use super::*;
            #[target_feature(enable = "avx2,fma")]
            pub(super) fn $portable($($arg: $ty),*) {
                super::$portable($($arg),*)
            }
        }
    };
}

pub(super) use vectorized;

/// `e^x` within 2 ulp for `x` in f32's normal range (the smallest normal
/// below it, the largest finite value above): Cody and Waite's reduction
/// `x = n ln 2 + r`, then Cephes' `expf` polynomial in `r`, and `2^n` built
/// from its bits. `n` is rounded by adding and subtracting `1.5 · 2^23`,
/// which leaves it in the low bits of the sum: no branch and no float to
/// integer conversion (whose saturation Rust checks lane by lane), so a
/// loop over a slice runs in vector lanes.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.336_55, 88.376_26);
    let m = x * std::f32::consts::LOG2_E + ROUND;
    let n = m - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // The low bits of `m` hold `n`: 2^n's exponent field is `n + 127`.
    let two_n = (m.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127)) << 23;
    y * f32::from_bits(two_n)
}

/// The error function by the formula of [`Tensor::erf`](crate::Tensor::erf)
/// (Abramowitz–Stegun 7.1.26, |error| ≤ 1.5e-7), step for step, so that a
/// kernel and the traced ops differ only by f32 rounding.
#[inline(always)]
pub(super) fn erf(x: f32) -> f32 {
    // The traced formula's constants are f64s, rounded to f32 in the program.
    const P: f32 = 0.327_591_1_f64 as f32;
    const A: [f32; 5] = [
        1.061_405_429_f64 as f32,
        -1.453_152_027_f64 as f32,
        1.421_413_741_f64 as f32,
        -0.284_496_736_f64 as f32,
        0.254_829_592_f64 as f32,
    ];
    let a = x.abs();
    let t = 1.0 / (a * P + 1.0);
    let poly = t * (t * (t * (t * (t * A[0] + A[1]) + A[2]) + A[3]) + A[4]);
    let y = 1.0 - poly * exp(-(a * a));
    // `Tensor::sign`: zero at zero, NaN at NaN (selects, no branch).
    let sign = if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    };
    y * sign
}

#[cfg(test)]
mod tests {
    /// The exponential against f64's at the ends of its range and between.
    #[test]
    fn exp_is_within_two_ulp() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = f64::from(x).exp();
            let got = f64::from(super::exp(x));
            let ulp = f64::from(f32::EPSILON) * want;
            assert!(
                (got - want).abs() <= 2.0 * ulp,
                "exp({x}) = {got}, want {want}"
            );
            x += 0.0137;
        }
        assert_eq!(super::exp(0.0), 1.0);
        assert!(super::exp(-1000.0) <= f32::MIN_POSITIVE * 1.01);
        assert!(super::exp(1000.0).is_finite() && super::exp(1000.0) > 1e38);
        assert!(super::exp(f32::NAN).is_nan());
    }

    /// The error function against its series in f64 (libm's `erf` is not
    /// in std): within the formula's 1.5e-7 plus f32 rounding, odd, and
    /// saturating to ±1.
    #[test]
    fn erf_is_within_the_formulas_error() {
        // erf(x) = 2/√π Σ (−1)^n x^(2n+1) / (n! (2n+1)), exact enough in
        // f64 for |x| ≤ 3 with 60 terms.
        let series = |x: f64| {
            let (mut term, mut sum) = (x, 0.0);
            for n in 0..60 {
                sum += term / f64::from(2 * n + 1);
                term *= -x * x / f64::from(n + 1);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        };
        let mut x = -3.0f32;
        while x <= 3.0 {
            let got = f64::from(super::erf(x));
            let want = series(f64::from(x));
            // Near zero `1 − poly · e^(−a²)` cancels: a few units of
            // roundoff of 1 on top of the formula's error.
            let tol = 1.5e-7 + 4.0 * f64::from(f32::EPSILON);
            assert!((got - want).abs() <= tol, "erf({x}) = {got}, want {want}");
            assert_eq!(super::erf(-x), -super::erf(x), "erf is odd at {x}");
            x += 0.0173;
        }
        assert_eq!(super::erf(0.0), 0.0);
        assert_eq!(super::erf(10.0), 1.0);
        assert_eq!(super::erf(-1e30), -1.0);
        assert!(super::erf(f32::NAN).is_nan());
    }
}
