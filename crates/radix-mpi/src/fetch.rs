//! Where MPI comes from: `RADIX_MPI_LIB`, else the pinned `mpich` wheel,
//! fetched on first use into the radix cache as PJRT plugins are.

use std::path::PathBuf;

use radix_fetch::{Package, fetch_package};

use crate::error::{Error, Result};

/// The pinned MPICH wheel: `libmpi.so.12` (the MPICH ABI) and hydra's
/// `mpiexec`, for x86-64 Linux with glibc 2.28 or later.
pub const MPICH: Package = Package {
    name: "mpich",
    version: "5.0.2",
    wheel_tag: "py3-none-manylinux_2_28_x86_64",
    wheel_sha256: "8fed465ebff269ea2ebac179a25de02671ddf8df476e0f115be089015015cfd4",
};

/// The wheel's install tree inside its unpacked folder.
const DATA: &str = "mpich-5.0.2.data/data";

/// The folder holding the wheel's `bin/`, `lib/` and `include/`, fetched
/// first if the cache lacks it.
pub fn mpich_dir() -> Result<PathBuf> {
    fetch_package(&MPICH)
        .map(|d| d.join(DATA))
        .map_err(|e| Error::Fetch(e.to_string()))
}

/// The MPI library radix opens: `$RADIX_MPI_LIB` (a `libmpi.so.12` of the
/// MPICH ABI, such as a cluster's own), else the wheel's.
pub fn library_path() -> Result<PathBuf> {
    match std::env::var_os("RADIX_MPI_LIB").filter(|v| !v.is_empty()) {
        Some(path) => Ok(PathBuf::from(path)),
        None => Ok(mpich_dir()?.join("lib/libmpi.so.12")),
    }
}

/// The wheel's `mpiexec` (hydra), which starts the processes of a job.
pub fn mpiexec() -> Result<PathBuf> {
    let path = mpich_dir()?.join("bin/mpiexec.hydra");
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Fetch(format!(
            "{} is missing from the unpacked mpich wheel",
            path.display()
        )))
    }
}
