//! The radix error type.

use std::fmt;

use crate::Shape;

/// A radix result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while tracing, compiling or running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op was misused while tracing (the first such misuse of a trace).
    #[error("{0}")]
    Trace(TraceError),
    /// An argument given to [`crate::Executable::call`] or `bind` does not
    /// match what the executable was compiled for.
    #[error("argument {index} ({path}): expected {expected}, got {got}")]
    Argument {
        /// The argument's position in the executable's ABI (weights first).
        index: usize,
        /// The argument's path in the model or input tree (`layers.0.weight`).
        path: String,
        /// What was expected.
        expected: String,
        /// What was given.
        got: String,
    },
    /// The wrong number of arguments was given.
    #[error("{what}: expected {expected} arguments, got {got}")]
    ArgumentCount {
        /// Which list (`weights` or `inputs`).
        what: &'static str,
        /// How many were expected.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// A buffer given to a call was consumed by an earlier call that
    /// donated it (see [`crate::Tensor::reuse_buffer`]).
    #[error("argument {index} ({path}): the buffer was donated to an earlier call")]
    Donated {
        /// The argument's position in the executable's ABI.
        index: usize,
        /// The argument's path in the model or input tree.
        path: String,
    },
    /// A sharding does not fit its mesh: a split axis that does not divide,
    /// a missing mesh axis, a mesh larger than the platform, or a buffer
    /// split differently from what the executable expects.
    #[error("sharding: {0}")]
    Sharding(String),
    /// Host data does not fit the shape it is given for.
    #[error("host data: {0}")]
    Host(String),
    /// A custom call cannot be declared, or cannot run on the platform (no
    /// Rust implementation there and no fallback).
    #[error("custom call {name}: {reason}")]
    CustomCall {
        /// The call's name.
        name: String,
        /// What is wrong, naming the platform where it matters.
        reason: String,
    },
    /// A node of a program is not what its op's shape rule gives from its
    /// operands ([`crate::Program::verify`]): the node, where it was traced
    /// and what is wrong. The tracer checks every op as it is recorded, so
    /// this names a fault in radix (a pass or a derivative rule), never in
    /// the traced code.
    #[error("ill-typed program: {0}")]
    Verify(String),
    /// MPI, which collectives across processes use, cannot be used.
    #[error("MPI: {0}")]
    Mpi(String),
    /// The PJRT runtime failed (compile or execute).
    #[error(transparent)]
    Runtime(#[from] radix_pjrt::Error),
}

impl Error {
    /// The trace error, if this is one.
    pub fn as_trace(&self) -> Option<&TraceError> {
        match self {
            Error::Trace(e) => Some(e),
            _ => None,
        }
    }
}

/// A misused op: which op, why, on which shapes, and where in the user's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// The op's name (`add`, `dot`, ...).
    pub op: &'static str,
    /// What is wrong.
    pub message: String,
    /// The shapes of the op's tensor operands.
    pub shapes: Vec<Shape>,
    /// The source file of the call.
    pub file: &'static str,
    /// The source line of the call.
    pub line: u32,
    /// The source column of the call.
    pub column: u32,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.column, self.op, self.message
        )?;
        if !self.shapes.is_empty() {
            f.write_str(" (shapes: ")?;
            for (i, s) in self.shapes.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{s}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}
