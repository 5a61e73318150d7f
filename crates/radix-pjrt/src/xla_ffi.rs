//! Hand-declared `#[repr(C)]` mirror of the subset of the XLA FFI C API
//! (`xla/ffi/api/c_api.h`, API 0.3, as shipped in jaxlib 0.10.2 under
//! `jaxlib/include/`) that a custom-call handler sees: the call frame, its
//! buffers and attributes, errors, the execution context's intra-op thread
//! pool and the metadata extension. Names are the C names.
//!
//! The `XLA_FFI_Api` table comes from the plugin inside each call frame; it
//! only ever grows, so an entry is read only when its `struct_size` covers it
//! (see [`api_has`]).

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    dead_code
)]

use std::ffi::{c_char, c_int, c_void};

/// The FFI API version radix's handlers are written against.
pub const XLA_FFI_API_MAJOR: c_int = 0;
/// See [`XLA_FFI_API_MAJOR`].
pub const XLA_FFI_API_MINOR: c_int = 3;

// Opaque handles.
pub enum XLA_FFI_Error {}
pub enum XLA_FFI_ExecutionContext {}
pub enum XLA_FFI_Future {}
pub enum XLA_FFI_InternalApi {}

/// `XLA_FFI_Extension_Type`.
pub type XLA_FFI_Extension_Type = c_int;
pub const XLA_FFI_Extension_Metadata: XLA_FFI_Extension_Type = 1;

#[repr(C)]
pub struct XLA_FFI_Extension_Base {
    pub struct_size: usize,
    pub type_: XLA_FFI_Extension_Type,
    pub next: *mut XLA_FFI_Extension_Base,
}

#[repr(C)]
pub struct XLA_FFI_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

/// `XLA_FFI_Error_Code` (the same numbers as `PJRT_Error_Code`).
pub type XLA_FFI_Error_Code = c_int;
pub const XLA_FFI_Error_Code_INVALID_ARGUMENT: XLA_FFI_Error_Code = 3;
pub const XLA_FFI_Error_Code_INTERNAL: XLA_FFI_Error_Code = 13;

#[repr(C)]
pub struct XLA_FFI_Error_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub message: *const c_char,
    pub errc: XLA_FFI_Error_Code,
}

#[repr(C)]
pub struct XLA_FFI_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub error: *mut XLA_FFI_Error,
}

/// `XLA_FFI_DataType`.
pub type XLA_FFI_DataType = c_int;
pub const XLA_FFI_DataType_INVALID: XLA_FFI_DataType = 0;
pub const XLA_FFI_DataType_PRED: XLA_FFI_DataType = 1;
pub const XLA_FFI_DataType_S8: XLA_FFI_DataType = 2;
pub const XLA_FFI_DataType_S16: XLA_FFI_DataType = 3;
pub const XLA_FFI_DataType_S32: XLA_FFI_DataType = 4;
pub const XLA_FFI_DataType_S64: XLA_FFI_DataType = 5;
pub const XLA_FFI_DataType_U8: XLA_FFI_DataType = 6;
pub const XLA_FFI_DataType_U16: XLA_FFI_DataType = 7;
pub const XLA_FFI_DataType_U32: XLA_FFI_DataType = 8;
pub const XLA_FFI_DataType_U64: XLA_FFI_DataType = 9;
pub const XLA_FFI_DataType_F16: XLA_FFI_DataType = 10;
pub const XLA_FFI_DataType_F32: XLA_FFI_DataType = 11;
pub const XLA_FFI_DataType_F64: XLA_FFI_DataType = 12;
pub const XLA_FFI_DataType_C64: XLA_FFI_DataType = 15;
pub const XLA_FFI_DataType_BF16: XLA_FFI_DataType = 16;
pub const XLA_FFI_DataType_C128: XLA_FFI_DataType = 18;
pub const XLA_FFI_DataType_F8E5M2: XLA_FFI_DataType = 19;
pub const XLA_FFI_DataType_F8E4M3FN: XLA_FFI_DataType = 20;

#[repr(C)]
pub struct XLA_FFI_Buffer {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub dtype: XLA_FFI_DataType,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *mut i64,
}

/// `XLA_FFI_ArgType` / `XLA_FFI_RetType`.
pub type XLA_FFI_ArgType = c_int;
pub const XLA_FFI_ArgType_BUFFER: XLA_FFI_ArgType = 1;
pub type XLA_FFI_RetType = c_int;
pub const XLA_FFI_RetType_BUFFER: XLA_FFI_RetType = 1;

/// `XLA_FFI_AttrType`.
pub type XLA_FFI_AttrType = c_int;
pub const XLA_FFI_AttrType_ARRAY: XLA_FFI_AttrType = 1;
pub const XLA_FFI_AttrType_DICTIONARY: XLA_FFI_AttrType = 2;
pub const XLA_FFI_AttrType_SCALAR: XLA_FFI_AttrType = 3;
pub const XLA_FFI_AttrType_STRING: XLA_FFI_AttrType = 4;

#[repr(C)]
pub struct XLA_FFI_ByteSpan {
    pub ptr: *const c_char,
    pub len: usize,
}

#[repr(C)]
pub struct XLA_FFI_Scalar {
    pub dtype: XLA_FFI_DataType,
    pub value: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Array {
    pub dtype: XLA_FFI_DataType,
    pub size: usize,
    pub data: *mut c_void,
}

/// `XLA_FFI_ExecutionStage`.
pub type XLA_FFI_ExecutionStage = c_int;
pub const XLA_FFI_ExecutionStage_INSTANTIATE: XLA_FFI_ExecutionStage = 0;
pub const XLA_FFI_ExecutionStage_PREPARE: XLA_FFI_ExecutionStage = 1;
pub const XLA_FFI_ExecutionStage_INITIALIZE: XLA_FFI_ExecutionStage = 2;
pub const XLA_FFI_ExecutionStage_EXECUTE: XLA_FFI_ExecutionStage = 3;

#[repr(C)]
pub struct XLA_FFI_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub size: i64,
    pub types: *mut XLA_FFI_ArgType,
    pub args: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Rets {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub size: i64,
    pub types: *mut XLA_FFI_RetType,
    pub rets: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_Attrs {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub size: i64,
    pub types: *mut XLA_FFI_AttrType,
    pub names: *mut *mut XLA_FFI_ByteSpan,
    pub attrs: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub api: *const XLA_FFI_Api,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub stage: XLA_FFI_ExecutionStage,
    pub args: XLA_FFI_Args,
    pub rets: XLA_FFI_Rets,
    pub attrs: XLA_FFI_Attrs,
    pub future: *mut XLA_FFI_Future,
}

/// `XLA_FFI_Handler`: what a custom call target is.
pub type XLA_FFI_Handler = unsafe extern "C" fn(*mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error;

/// `XLA_FFI_Handler_Traits`.
pub type XLA_FFI_Handler_Traits = u32;

/// `XLA_FFI_Task`: a task for the intra-op thread pool.
pub type XLA_FFI_Task = unsafe extern "C" fn(*mut c_void);

#[repr(C)]
pub struct XLA_FFI_ThreadPool_Schedule_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub task: Option<XLA_FFI_Task>,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_ThreadPool_NumThreads_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub ctx: *mut XLA_FFI_ExecutionContext,
    pub num_threads: *mut i64,
}

#[repr(C)]
pub struct XLA_FFI_TypeId {
    pub type_id: i64,
}

#[repr(C)]
pub struct XLA_FFI_Metadata {
    pub struct_size: usize,
    pub api_version: XLA_FFI_Api_Version,
    pub traits: XLA_FFI_Handler_Traits,
    pub state_type_id: XLA_FFI_TypeId,
}

#[repr(C)]
pub struct XLA_FFI_Metadata_Extension {
    pub extension_base: XLA_FFI_Extension_Base,
    pub metadata: *mut XLA_FFI_Metadata,
}

/// An entry of the table radix does not call (only its slot matters).
pub type Unused = Option<unsafe extern "C" fn()>;
/// An entry that returns an error.
pub type Fn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut XLA_FFI_Error>;

/// The `XLA_FFI_Api` table, in header order.
#[repr(C)]
pub struct XLA_FFI_Api {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub api_version: XLA_FFI_Api_Version,
    pub internal_api: *const XLA_FFI_InternalApi,
    pub XLA_FFI_Error_Create: Fn<XLA_FFI_Error_Create_Args>,
    pub XLA_FFI_Error_GetMessage: Unused,
    pub XLA_FFI_Error_Destroy: Option<unsafe extern "C" fn(*mut XLA_FFI_Error_Destroy_Args)>,
    pub XLA_FFI_Handler_Register: Unused,
    pub XLA_FFI_Stream_Get: Unused,
    pub XLA_FFI_Type_Register: Unused,
    pub XLA_FFI_ExecutionContext_Get: Unused,
    pub XLA_FFI_State_Set: Unused,
    pub XLA_FFI_State_Get: Unused,
    pub XLA_FFI_DeviceMemory_Allocate: Unused,
    pub XLA_FFI_DeviceMemory_Free: Unused,
    pub XLA_FFI_ThreadPool_Schedule: Fn<XLA_FFI_ThreadPool_Schedule_Args>,
    pub XLA_FFI_ThreadPool_NumThreads: Fn<XLA_FFI_ThreadPool_NumThreads_Args>,
    pub XLA_FFI_Future_Create: Unused,
    pub XLA_FFI_Future_SetAvailable: Unused,
    pub XLA_FFI_Future_SetError: Unused,
    pub XLA_FFI_RunId_Get: Unused,
    pub XLA_FFI_DeviceOrdinal_Get: Unused,
}

/// Whether a table of `struct_size` bytes holds the entry that ends at
/// byte `end` (an entry's offset plus its size).
pub const fn api_has(struct_size: usize, end: usize) -> bool {
    struct_size >= end
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    // The numbers on the right were printed by a C program compiled with gcc
    // (x86-64) against jaxlib 0.10.2's `include/xla/ffi/api/c_api.h`
    // (XLA_FFI_API_MINOR 3): `sizeof`, `offsetof` and `<name>_STRUCT_SIZE`.
    #[test]
    fn struct_layouts_match_the_header() {
        assert_eq!(size_of::<XLA_FFI_Api>(), 192);
        assert_eq!(offset_of!(XLA_FFI_Api, internal_api), 40);
        assert_eq!(offset_of!(XLA_FFI_Api, XLA_FFI_Error_Create), 48);
        assert_eq!(offset_of!(XLA_FFI_Api, XLA_FFI_ThreadPool_Schedule), 136);
        assert_eq!(offset_of!(XLA_FFI_Api, XLA_FFI_ThreadPool_NumThreads), 144);
        assert_eq!(offset_of!(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get), 184);
        assert_eq!(size_of::<XLA_FFI_CallFrame>(), 176);
        assert_eq!(offset_of!(XLA_FFI_CallFrame, stage), 32);
        assert_eq!(offset_of!(XLA_FFI_CallFrame, args), 40);
        assert_eq!(offset_of!(XLA_FFI_CallFrame, rets), 80);
        assert_eq!(offset_of!(XLA_FFI_CallFrame, attrs), 120);
        assert_eq!(offset_of!(XLA_FFI_CallFrame, future), 168);
        assert_eq!(size_of::<XLA_FFI_Args>(), 40);
        assert_eq!(size_of::<XLA_FFI_Rets>(), 40);
        assert_eq!(size_of::<XLA_FFI_Attrs>(), 48);
        assert_eq!(offset_of!(XLA_FFI_Attrs, names), 32);
        assert_eq!(size_of::<XLA_FFI_Buffer>(), 48);
        assert_eq!(offset_of!(XLA_FFI_Buffer, data), 24);
        assert_eq!(offset_of!(XLA_FFI_Buffer, dims), 40);
        assert_eq!(size_of::<XLA_FFI_Scalar>(), 16);
        assert_eq!(offset_of!(XLA_FFI_Scalar, value), 8);
        assert_eq!(size_of::<XLA_FFI_Array>(), 24);
        assert_eq!(offset_of!(XLA_FFI_Array, data), 16);
        assert_eq!(size_of::<XLA_FFI_ByteSpan>(), 16);
        assert_eq!(size_of::<XLA_FFI_Error_Create_Args>(), 32);
        assert_eq!(offset_of!(XLA_FFI_Error_Create_Args, errc), 24);
        assert_eq!(offset_of!(XLA_FFI_Api, XLA_FFI_Error_Destroy), 64);
        assert_eq!(size_of::<XLA_FFI_Error_Destroy_Args>(), 24);
        assert_eq!(size_of::<XLA_FFI_ThreadPool_Schedule_Args>(), 40);
        assert_eq!(size_of::<XLA_FFI_ThreadPool_NumThreads_Args>(), 32);
        assert_eq!(size_of::<XLA_FFI_Metadata>(), 48);
        assert_eq!(offset_of!(XLA_FFI_Metadata, traits), 32);
        assert_eq!(offset_of!(XLA_FFI_Metadata, state_type_id), 40);
        assert_eq!(size_of::<XLA_FFI_Metadata_Extension>(), 32);
        assert_eq!(size_of::<XLA_FFI_Api_Version>(), 24);
        assert_eq!(size_of::<XLA_FFI_Extension_Base>(), 24);
    }
}
