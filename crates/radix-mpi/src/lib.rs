//! MPI across processes for radix.
//!
//! No CPU PJRT plugin moves data between processes, so radix's collectives
//! across processes call MPI, which starts the processes, finds the peers
//! and moves the bytes. MPI is fetched as PJRT plugins are: the pinned
//! `mpich` wheel ([`MPICH`]) into the radix cache on first use, its
//! `libmpi.so.12` opened at run time with the functions radix calls
//! declared by hand ([`abi`]), or a system MPI of the same (MPICH) ABI named
//! by `RADIX_MPI_LIB`. Nothing links MPI at build time.
//!
//! A process started by `mpiexec` (or `srun`, or `radix launch`) joins its
//! job through [`world`]; a process started alone is a world of one that
//! never loads MPI. The collectives ([`World::all_reduce`] and the rest)
//! give the same bits on every rank: a reduction is the ranks' values
//! folded in rank order ([`fold`], also the single-process reference), and
//! every wait has a deadline (`RADIX_MPI_TIMEOUT` seconds, 300 by default),
//! so a dead peer is an [`Error::Timeout`], never a hang.
//!
//! ```no_run
//! # fn main() -> radix_mpi::Result<()> {
//! use radix_mpi::{ReduceOp, world};
//! let world = world()?;
//! let x = [world.rank() as f32; 3];
//! let mut sum = [0f32; 3];
//! world.all_reduce(0, ReduceOp::Sum, &x, &mut sum)?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod abi;
mod error;
mod fetch;
mod heap;
mod kv;
mod launch;
mod library;
mod reduce;
mod world;

pub use error::{Error, Result};
pub use fetch::{MPICH, library_path, mpich_dir, mpiexec};
pub use kv::{KvStore, kv_store};
pub use launch::{JobOutput, mpiexec_command, run_ranks, run_test_as_ranks, say_finished};
pub use library::Mpi;
pub use reduce::{Elem, ReduceOp, fold};
pub use world::{World, check_pairs, launched, world};
