//! Test helpers: compile and call a function on host literals, run the
//! reference interpreter, and compare values with stated tolerances.

use std::sync::OnceLock;

use crate::compile::{self, compile_program};
use crate::{
    Buffer, CacheMode, CompileConfig, CustomCallMode, DType, Executable, Literal, Module, Platform,
    Program, Result, Tensor,
};

/// The shared CPU platform of this process.
///
/// # Panics
/// If no CPU plugin can be loaded (a broken test environment).
pub fn platform() -> Platform {
    static PLATFORM: OnceLock<Platform> = OnceLock::new();
    PLATFORM
        .get_or_init(|| Platform::cpu().unwrap_or_else(|e| panic!("no CPU platform: {e}")))
        .clone()
}

/// Traces `f` over tensors shaped like `inputs`.
#[track_caller]
pub fn trace_fn<O: Module>(inputs: &[Literal], f: impl FnOnce(&[Tensor]) -> O) -> Result<Program> {
    let params: Vec<Tensor> = inputs.iter().map(|l| Tensor::param(l.shape())).collect();
    compile::trace_fn(&params, |xs: Vec<Tensor>| f(&xs))
}

/// Compiles `f` on the CPU and calls it on `inputs`.
#[track_caller]
pub fn run<O: Module>(inputs: &[Literal], f: impl FnOnce(&[Tensor]) -> O) -> Result<Vec<Literal>> {
    let program = trace_fn(inputs, f)?;
    run_program(program, inputs)
}

/// Compiles `program` on the CPU and calls it on `inputs`.
pub fn run_program(program: Program, inputs: &[Literal]) -> Result<Vec<Literal>> {
    let platform = platform();
    call(&compile_program(&platform, program)?, &platform, inputs)
}

/// [`run_program`] with custom calls compiled as `mode` (their kernels, or
/// their fallbacks), uncached, so that both ways run in one process.
pub fn run_program_with(
    program: Program,
    inputs: &[Literal],
    mode: CustomCallMode,
) -> Result<Vec<Literal>> {
    let platform = platform();
    let mut config = CompileConfig::new(&platform);
    config.cache = CacheMode::Disabled;
    config.custom_calls = mode;
    call(
        &compile::compile_program_with(&platform, program, &config)?,
        &platform,
        inputs,
    )
}

fn call(exe: &Executable, platform: &Platform, inputs: &[Literal]) -> Result<Vec<Literal>> {
    let bufs = inputs
        .iter()
        .map(|l| Buffer::from_literal(platform, l))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Buffer> = bufs.iter().collect();
    exe.call(&refs)?.iter().map(Buffer::to_literal).collect()
}

/// Tolerances of a comparison, as `numpy.allclose` reads them: `got` is
/// close to `want` when `|got - want| <= abs + rel * |want|`.
///
/// Results computed on different CPUs differ: XLA's CPU backend picks vector
/// widths, FMA contraction and the blocking of dot products by the machine's
/// features (AVX2 or AVX-512), so a sum of `n` terms comes out in another
/// rounding order. Size a tolerance by what was computed, never by what one
/// machine happened to give: [`Tol::ulps`] for elementwise results,
/// [`Tol::sum`] for results that add up many terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tol {
    /// Relative tolerance.
    pub rel: f64,
    /// Absolute tolerance.
    pub abs: f64,
}

/// `softmax(x)` in f64: the weights a reference attention computes.
pub fn softmax_f64(x: &[f64]) -> Vec<f64> {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|v| v / sum).collect()
}

/// The unit roundoff of `dtype`: the gap between 1 and the next value
/// (2^-23 for f32, 2^-7 for bf16); 0 for integers and booleans, which
/// compare exactly.
pub fn epsilon(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F32 => f64::from(f32::EPSILON),
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 0.0,
    }
}

impl Tol {
    /// Exact equality.
    pub const EXACT: Tol = Tol { rel: 0.0, abs: 0.0 };
    /// A few f32 ops on values of order 1 (84 units of roundoff relative):
    /// room for XLA's approximations of `exp`, `tanh`, `erf`, which differ
    /// from the interpreter's libm by a few units.
    pub const F32: Tol = Tol {
        rel: 1e-5,
        abs: 1e-6,
    };
    /// Chains of f32 ops.
    pub const F32_LOOSE: Tol = Tol {
        rel: 1e-4,
        abs: 1e-5,
    };
    /// f16 results (2 units of roundoff).
    pub const F16: Tol = Tol {
        rel: 2e-3,
        abs: 1e-3,
    };
    /// bf16 results (1.3 units of roundoff).
    pub const BF16: Tol = Tol {
        rel: 1e-2,
        abs: 1e-2,
    };

    /// `k` units of roundoff of `dtype`, relative: a result that went
    /// through a few elementwise ops, each rounded once. The absolute term
    /// is as large for values below 1, so that results near zero (where
    /// a relative bound means nothing) get the same room.
    pub fn ulps(dtype: DType, k: f64) -> Tol {
        let e = k * epsilon(dtype);
        Tol { rel: e, abs: e }
    }

    /// A result that adds up `n` terms of magnitude about `scale` (a dot
    /// product over `n`, a reduction of `n` elements), then went through a
    /// few elementwise ops. Another summation order (another CPU's vector
    /// width, another blocking) moves such a sum by about `eps * n * scale`
    /// in the worst case seen in practice, whatever the size of the sum
    /// itself: when the terms cancel, the error is large relative to the
    /// result. So the absolute term is `2 * eps * n * scale` and the
    /// relative one 4 units of roundoff. Dropping a term of size `scale`,
    /// or a rounding to a narrower dtype, is still far outside it.
    pub fn sum(dtype: DType, n: usize, scale: f64) -> Tol {
        let e = epsilon(dtype);
        Tol {
            rel: 4.0 * e,
            abs: 2.0 * e * n.max(1) as f64 * scale,
        }
    }

    /// Both tolerances at once: the sum of the terms.
    pub fn plus(self, other: Tol) -> Tol {
        Tol {
            rel: self.rel + other.rel,
            abs: self.abs + other.abs,
        }
    }

    /// Whether `got` is close to `want`. NaN is close to NaN only, an
    /// infinity only to itself (a finite value is never close to one).
    pub fn close(self, got: f64, want: f64) -> bool {
        if want.is_nan() || got.is_nan() {
            return want.is_nan() && got.is_nan();
        }
        if want.is_infinite() || got.is_infinite() {
            return got == want;
        }
        (got - want).abs() <= self.abs + self.rel * want.abs()
    }
}

/// Where `got` and `want` differ beyond `tol` (see [`Tol::close`]), as a
/// message naming the first such index and the largest difference.
pub fn compare(got: &[f64], want: &[f64], tol: Tol) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    let Some(i) = (0..got.len()).find(|&i| !tol.close(got[i], want[i])) else {
        return Ok(());
    };
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .filter(|d| !d.is_nan())
        .fold(0.0, f64::max);
    let show = |v: &[f64]| {
        if v.len() <= 32 {
            format!("{v:?}")
        } else {
            format!("{:?} ... ({} values)", &v[..32], v.len())
        }
    };
    Err(format!(
        "at {i}: got {}, expected {} (largest |difference| {worst:e}, tolerance {tol:?})\n got: {}\nwant: {}",
        got[i],
        want[i],
        show(got),
        show(want)
    ))
}

/// Asserts that the f32s `got` are close to `want` (see [`compare`]);
/// `what` names them in the message.
///
/// # Panics
/// When they are not (this is a test assertion).
#[track_caller]
pub fn assert_all_close(what: &str, got: &[f32], want: &[f32], tol: Tol) {
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    if let Err(msg) = compare(&wide(got), &wide(want), tol) {
        panic!("{what}: {msg}");
    }
}

/// Asserts that `got` holds `want` within `tol`.
///
/// # Panics
/// When it does not (this is a test assertion).
#[track_caller]
pub fn assert_close(got: &Literal, want: &[f64], tol: Tol) {
    if let Err(msg) = compare(got.data(), want, tol) {
        panic!("{} {msg}", got.shape());
    }
}

/// Runs `f` on `inputs` through the CPU plugin and through the reference
/// interpreter, asserts both hold `want` within `tol` and that the program
/// [verifies](Program::verify) as traced and optimized, and returns the
/// plugin's result.
///
/// # Panics
/// When tracing or running fails or a value is off (this is a test assertion).
#[track_caller]
pub fn check(
    inputs: &[Literal],
    f: impl FnOnce(&[Tensor]) -> Tensor,
    want: &[f64],
    tol: Tol,
) -> Literal {
    let program = trace_fn(inputs, f).unwrap_or_else(|e| panic!("trace failed: {e}"));
    for p in [program.clone(), program.clone().optimize()] {
        p.verify()
            .unwrap_or_else(|e| panic!("{e}\n{}", p.stablehlo()));
    }
    let interp = program.interpret(inputs).remove(0);
    let text = program.stablehlo();
    let got = run_program(program, inputs)
        .unwrap_or_else(|e| panic!("run failed: {e}\n{text}"))
        .remove(0);
    if let Err(msg) = compare(got.data(), want, tol) {
        panic!("plugin: {} {msg}\n{text}", got.shape());
    }
    if let Err(msg) = compare(interp.data(), want, tol) {
        panic!("interpreter: {} {msg}", interp.shape());
    }
    assert_eq!(got.shape(), interp.shape());
    got
}
