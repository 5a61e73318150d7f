//! `nn::gelu_erf` (the custom call `radix.gelu_erf`) against GELU computed
//! in f64 here, through the interpreter, the CPU plugin's kernel and the
//! in-graph fallback ([`Tensor::gelu_erf`]); and its gradient against the
//! formula's.

mod blocks;

use blocks::Rng;
use radix::testing::{Tol, assert_all_close, run_program_with, trace_fn};
use radix::{CustomCallMode, DType, Literal, Shape, Tensor};

/// Values on `[-6, 6)`, where GELU bends, and its ends: `[3, 5, 7]`, 105
/// elements (not whole vectors, so every loop's tail runs too).
const AXES: [(&str, i64); 3] = [("a", 3), ("b", 5), ("c", 7)];

fn x_literal(rng: &mut Rng) -> (Vec<f32>, Literal) {
    let mut x: Vec<f32> = (0..105).map(|_| 6.0 * rng.unit()).collect();
    // Both zeros, a value past erf's saturation, and the smallest normal.
    x[..4].copy_from_slice(&[0.0, -0.0, -30.0, f32::MIN_POSITIVE]);
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let literal = Literal::from_bytes(Shape::tagged(DType::F32, &AXES), &bytes);
    (x, literal)
}

/// `0.5 x (1 + erf(x / √2))` in f64, erf by its Taylor series below 3 and
/// its asymptotic expansion above.
fn reference(x: f32) -> f32 {
    let x = f64::from(x);
    let z = x / std::f64::consts::SQRT_2;
    let erf = if z.abs() < 3.0 {
        let (mut term, mut sum) = (z, 0.0);
        for n in 0..80 {
            sum += term / f64::from(2 * n + 1);
            term *= -z * z / f64::from(n + 1);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(z) ≈ e^(-z²) / (z √π) (1 - 1/(2z²)): below 1e-4 here.
        let erfc =
            (-z * z).exp() / (z.abs() * std::f64::consts::PI.sqrt()) * (1.0 - 1.0 / (2.0 * z * z));
        (1.0 - erfc).copysign(z)
    };
    (0.5 * x * (1.0 + erf)) as f32
}

#[test]
fn matches_gelu_every_way_it_runs() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let (x, input) = x_literal(&mut rng);
    let inputs = [input];
    let program = trace_fn(&inputs, |t| radix::nn::gelu_erf(t[0])).expect("trace");
    let want: Vec<f32> = x.iter().map(|&x| reference(x)).collect();
    // Abramowitz–Stegun's erf is within 1.5e-7 of erf, times |x| / 2 ≤ 3
    // here, plus a dozen f32 roundings of values of order 1.
    let tol = Tol {
        rel: 0.0,
        abs: 4.5e-7,
    }
    .plus(Tol::ulps(DType::F32, 16.0));
    let interp = program.interpret(&inputs)[0].to_vec::<f32>();
    assert_all_close("interpreter", &interp, &want, tol);
    for mode in [CustomCallMode::Native, CustomCallMode::Fallback] {
        let out = run_program_with(program.clone(), &inputs, mode).expect("compile and run");
        let got = out[0].to_vec::<f32>();
        assert_all_close(&format!("{mode:?}"), &got, &want, tol);
        assert_eq!(&got[..3], &[0.0, 0.0, 0.0], "{mode:?}: zeros and -30");
    }
}

/// An f32 `x` is the call; other dtypes are the formula in ops (the kernel
/// is f32 only).
#[test]
fn f32_is_the_call_and_bf16_the_formula() {
    let text = |dtype: DType| {
        let shape = Shape::tagged(dtype, &AXES);
        let zeros = Literal::from_bytes(shape, &vec![0; shape.byte_size()]);
        let program = trace_fn(&[zeros], |t| radix::nn::gelu_erf(t[0])).expect("trace");
        program.stablehlo()
    };
    assert!(text(DType::F32).contains("radix.gelu_erf"));
    let bf16 = text(DType::BF16);
    assert!(
        !bf16.contains("custom_call") && bf16.contains("exponential"),
        "{bf16}"
    );
}

/// The gradient through the call (its derivative is the formula's vjp)
/// against the gradient of the formula in ops.
#[test]
fn gradient_is_the_formulas() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (_, input) = x_literal(&mut rng);
    let inputs = [input];
    let grad = |through_call: bool| {
        let program = trace_fn(&inputs, move |t| {
            let loss = |x: &Tensor, _: &()| {
                let y = if through_call {
                    radix::nn::gelu_erf(*x)
                } else {
                    x.gelu_erf()
                };
                (y * y).sum(["a", "b", "c"])
            };
            let one = Tensor::scalar(1.0, DType::F32);
            radix::vjp(loss, &t[0], &(), &one).1
        })
        .expect("trace");
        run_program_with(program, &inputs, CustomCallMode::Native).expect("compile and run")[0]
            .to_vec::<f32>()
    };
    // `2 y gelu'(x)`: the call's `y` and the formula's differ by f32
    // rounding, the rest is the same ops.
    let tol = Tol::ulps(DType::F32, 16.0);
    assert_all_close("gradient", &grad(true), &grad(false), tol);
}
