//! Faults the generation worker injects for the server's tests.

use anyhow::{Result, anyhow};

/// A fault the worker injects for the server's tests, from
/// `RADIX_SERVE_FAULT=<kind>:<max_tokens>[,...]`: at the first decode step
/// that runs a sequence asking for exactly `max_tokens` tokens,
/// `step-error` fails the step (as a device error would, through the
/// batch's own error path), `panic` panics, `hang` stops the thread's loop
/// until the server stops, and `exit` ends the thread; `hold` runs no
/// decode step while such a sequence runs, until its client leaves
/// (requests are still admitted), so that a test can fill the slots and
/// the queue, or gather sequences into one batch, without a race. Unset,
/// nothing is injected.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// What goes wrong.
    pub kind: FaultKind,
    /// The `max_tokens` of the sequence it strikes.
    pub max_tokens: usize,
}

/// The faults, as [`Fault`] describes them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `step-error`.
    StepError,
    /// `panic`.
    Panic,
    /// `hang`.
    Hang,
    /// `exit`.
    Exit,
    /// `hold`.
    Hold,
}

impl Fault {
    /// The faults `RADIX_SERVE_FAULT` asks for.
    pub fn from_env() -> Result<Vec<Fault>> {
        let Some(v) = std::env::var_os("RADIX_SERVE_FAULT") else {
            return Ok(vec![]);
        };
        let v = v.to_string_lossy();
        v.split(',')
            .map(|one| {
                let (kind, n) = one.split_once(':')?;
                let kind = match kind {
                    "step-error" => FaultKind::StepError,
                    "panic" => FaultKind::Panic,
                    "hang" => FaultKind::Hang,
                    "exit" => FaultKind::Exit,
                    "hold" => FaultKind::Hold,
                    _ => return None,
                };
                let max_tokens = n.parse().ok()?;
                Some(Fault { kind, max_tokens })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                anyhow!(
                    "RADIX_SERVE_FAULT={v:?}: expected step-error|panic|hang|exit|hold:<max_tokens>, \
                     comma-separated"
                )
            })
    }
}
