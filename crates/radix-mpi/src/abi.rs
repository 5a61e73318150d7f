//! The MPICH ABI (`libmpi.so.12`: MPICH, Intel MPI, Cray MPICH, MVAPICH),
//! declared by hand: the handles are C `int`s and the constants are those of
//! the mpich 5.0.2 wheel's `include/mpi.h`. Only what radix calls is here.

use std::ffi::{c_char, c_int, c_void};

/// A communicator handle (`MPI_Comm`).
pub type Comm = c_int;
/// A datatype handle (`MPI_Datatype`).
pub type Datatype = c_int;
/// A request handle (`MPI_Request`).
pub type Request = c_int;
/// An error handler handle (`MPI_Errhandler`).
pub type Errhandler = c_int;

/// `MPI_COMM_WORLD`.
pub const COMM_WORLD: Comm = 0x4400_0000;
/// `MPI_BYTE`: radix moves bytes and reduces them itself.
pub const BYTE: Datatype = 0x4c00_010d;
/// `MPI_ANY_SOURCE`: a receive that matches a message from any rank.
pub const ANY_SOURCE: c_int = -2;
/// `MPI_REQUEST_NULL`.
pub const REQUEST_NULL: Request = 0x2c00_0000;
/// `MPI_ERRORS_RETURN`: errors come back as codes instead of aborting.
pub const ERRORS_RETURN: Errhandler = 0x5400_0001;
/// `MPI_SUCCESS`.
pub const SUCCESS: c_int = 0;
/// `MPI_THREAD_MULTIPLE`: XLA may run two collectives on two threads.
pub const THREAD_MULTIPLE: c_int = 3;
/// `MPI_TAG_UB`, the attribute holding the largest tag.
pub const TAG_UB: c_int = 0x6440_0001;
/// `MPI_MAX_ERROR_STRING`.
pub const MAX_ERROR_STRING: usize = 512;
/// `MPI_MAX_LIBRARY_VERSION_STRING`.
pub const MAX_LIBRARY_VERSION_STRING: usize = 8192;

/// `MPI_Status` as MPICH lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Status {
    /// Low bits of the received count.
    pub count_lo: c_int,
    /// High bits of the count and the cancelled flag.
    pub count_hi_and_cancelled: c_int,
    /// `MPI_SOURCE`.
    pub source: c_int,
    /// `MPI_TAG`.
    pub tag: c_int,
    /// `MPI_ERROR`.
    pub error: c_int,
}

const _: () = assert!(std::mem::size_of::<Status>() == 20);

/// `MPI_Init_thread`.
pub type InitThreadFn =
    unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
/// `MPI_Initialized`, `MPI_Finalized`.
pub type FlagFn = unsafe extern "C" fn(*mut c_int) -> c_int;
/// `MPI_Finalize`.
pub type FinalizeFn = unsafe extern "C" fn() -> c_int;
/// `MPI_Comm_rank`, `MPI_Comm_size`.
pub type CommIntFn = unsafe extern "C" fn(Comm, *mut c_int) -> c_int;
/// `MPI_Comm_set_errhandler`.
pub type SetErrhandlerFn = unsafe extern "C" fn(Comm, Errhandler) -> c_int;
/// `MPI_Comm_get_attr`.
pub type GetAttrFn = unsafe extern "C" fn(Comm, c_int, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Isend`.
pub type IsendFn =
    unsafe extern "C" fn(*const c_void, c_int, Datatype, c_int, c_int, Comm, *mut Request) -> c_int;
/// `MPI_Irecv`.
pub type IrecvFn =
    unsafe extern "C" fn(*mut c_void, c_int, Datatype, c_int, c_int, Comm, *mut Request) -> c_int;
/// `MPI_Test`.
pub type TestFn = unsafe extern "C" fn(*mut Request, *mut c_int, *mut Status) -> c_int;
/// `MPI_Cancel`.
pub type CancelFn = unsafe extern "C" fn(*mut Request) -> c_int;
/// `MPI_Error_string`.
pub type ErrorStringFn = unsafe extern "C" fn(c_int, *mut c_char, *mut c_int) -> c_int;
/// `MPI_Get_library_version`.
pub type LibraryVersionFn = unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int;
