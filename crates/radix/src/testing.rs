//! Test helpers: compile and call a function on host literals, run the
//! reference interpreter, and compare values with stated tolerances.

use std::sync::OnceLock;

use crate::compile::{compile_program, trace};
use crate::{Buffer, Literal, Module, Platform, Program, Result, Tensor};

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
    trace(&(), &params, |_, xs: Vec<Tensor>| f(&xs))
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
    let exe = compile_program(&platform, program)?;
    let bufs = inputs
        .iter()
        .map(|l| Buffer::from_literal(&platform, l))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Buffer> = bufs.iter().collect();
    exe.call(&refs)?.iter().map(Buffer::to_literal).collect()
}

/// Tolerances of a comparison: `|got - want| <= abs + rel * |want|`.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    /// Relative tolerance.
    pub rel: f64,
    /// Absolute tolerance.
    pub abs: f64,
}

impl Tol {
    /// Exact equality.
    pub const EXACT: Tol = Tol { rel: 0.0, abs: 0.0 };
    /// Single f32 ops.
    pub const F32: Tol = Tol {
        rel: 1e-5,
        abs: 1e-6,
    };
    /// Chains of f32 ops.
    pub const F32_LOOSE: Tol = Tol {
        rel: 1e-4,
        abs: 1e-5,
    };
    /// f16 results.
    pub const F16: Tol = Tol {
        rel: 2e-3,
        abs: 1e-3,
    };
    /// bf16 results.
    pub const BF16: Tol = Tol {
        rel: 1e-2,
        abs: 1e-2,
    };
}

/// Where `got` and `want` differ beyond `tol` (NaNs equal NaNs), as a message.
pub fn compare(got: &[f64], want: &[f64], tol: Tol) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok =
            (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol.abs + tol.rel * w.abs();
        if !ok {
            return Err(format!(
                "at {i}: got {g}, expected {w} (tolerance {tol:?})\n got: {got:?}\nwant: {want:?}"
            ));
        }
    }
    Ok(())
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
/// interpreter, asserts both hold `want` within `tol`, and returns the
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
