//! `libmpi.so.12` opened at run time: the functions radix calls, looked up
//! once. Nothing links MPI at build time, so `cargo build` needs no MPI.

use std::ffi::{c_char, c_int};
use std::path::{Path, PathBuf};

use crate::abi;
use crate::error::{Error, Result};

/// An opened MPI library of the MPICH ABI.
pub struct Mpi {
    path: PathBuf,
    pub(crate) init_thread: abi::InitThreadFn,
    pub(crate) initialized: abi::FlagFn,
    pub(crate) finalized: abi::FlagFn,
    pub(crate) finalize: abi::FinalizeFn,
    pub(crate) comm_rank: abi::CommIntFn,
    pub(crate) comm_size: abi::CommIntFn,
    pub(crate) set_errhandler: abi::SetErrhandlerFn,
    pub(crate) get_attr: abi::GetAttrFn,
    pub(crate) isend: abi::IsendFn,
    pub(crate) irecv: abi::IrecvFn,
    pub(crate) test: abi::TestFn,
    pub(crate) cancel: abi::CancelFn,
    error_string: abi::ErrorStringFn,
    library_version: abi::LibraryVersionFn,
    // Last, so the functions above are never used after it is closed (it
    // never is: the world keeps its library for the process's life).
    _library: libloading::os::unix::Library,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mpi({})", self.path.display())
    }
}

impl Mpi {
    /// Opens the library at `path` (with `RTLD_GLOBAL`, as MPI libraries
    /// open their own transport modules) and looks up every function radix
    /// calls; an [`Error::Library`] names the file and what is missing.
    pub fn open(path: &Path) -> Result<Mpi> {
        let err = |reason: String| Error::Library {
            path: path.to_path_buf(),
            reason,
        };
        if !path.is_file() {
            return Err(err("no such file".into()));
        }
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: loading runs the library's initializers; an MPI library's
        // do nothing but set up its own state.
        let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| err(e.to_string()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is the MPICH ABI function of this
                // name, whose C signature the target type declares
                // (`abi.rs`, from the wheel's `mpi.h`).
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| err(format!("no function {}: {e}", $name)))?
            };
        }
        Ok(Mpi {
            path: path.to_path_buf(),
            init_thread: sym!("MPI_Init_thread"),
            initialized: sym!("MPI_Initialized"),
            finalized: sym!("MPI_Finalized"),
            finalize: sym!("MPI_Finalize"),
            comm_rank: sym!("MPI_Comm_rank"),
            comm_size: sym!("MPI_Comm_size"),
            set_errhandler: sym!("MPI_Comm_set_errhandler"),
            get_attr: sym!("MPI_Comm_get_attr"),
            isend: sym!("MPI_Isend"),
            irecv: sym!("MPI_Irecv"),
            test: sym!("MPI_Test"),
            cancel: sym!("MPI_Cancel"),
            error_string: sym!("MPI_Error_string"),
            library_version: sym!("MPI_Get_library_version"),
            _library: library,
        })
    }

    /// The library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The library's own version text (`MPI_Get_library_version`, callable
    /// before `MPI_Init`).
    pub fn version(&self) -> Result<String> {
        let mut buf = vec![0u8; abi::MAX_LIBRARY_VERSION_STRING];
        let mut len: c_int = 0;
        // SAFETY: the buffer holds MPI_MAX_LIBRARY_VERSION_STRING bytes.
        let code = unsafe { (self.library_version)(buf.as_mut_ptr().cast::<c_char>(), &mut len) };
        self.check("MPI_Get_library_version", code)?;
        buf.truncate(len.clamp(0, buf.len() as c_int) as usize);
        Ok(String::from_utf8_lossy(&buf)
            .trim_end_matches('\0')
            .trim()
            .to_string())
    }

    /// `Ok` for `MPI_SUCCESS`, else an [`Error::Call`] with the library's
    /// text for the code.
    pub(crate) fn check(&self, function: &'static str, code: c_int) -> Result<()> {
        if code == abi::SUCCESS {
            return Ok(());
        }
        let mut buf = vec![0u8; abi::MAX_ERROR_STRING];
        let mut len: c_int = 0;
        // SAFETY: the buffer holds MPI_MAX_ERROR_STRING bytes.
        let ok = unsafe { (self.error_string)(code, buf.as_mut_ptr().cast::<c_char>(), &mut len) };
        let message = if ok == abi::SUCCESS {
            buf.truncate(len.clamp(0, buf.len() as c_int) as usize);
            String::from_utf8_lossy(&buf).trim().to_string()
        } else {
            "no text for this code".to_string()
        };
        Err(Error::Call {
            function,
            code,
            message,
        })
    }
}
