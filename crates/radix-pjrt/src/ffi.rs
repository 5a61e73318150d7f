//! Hand-declared `#[repr(C)]` mirror of the subset of `pjrt_c_api.h` (v0.81)
//! that radix uses. Names are the C names so they can be grepped in the header.
//!
//! Every argument struct starts with `struct_size` and `extension_start`; the
//! `new()` constructors zero the struct and set `struct_size` to the header's
//! `PJRT_STRUCT_SIZE` (offset of the last field plus its size). Newer plugins
//! (0.106, 0.115) accept these sizes: PJRT only ever appends fields.
//!
//! The `PJRT_Api` table is copied at load into a zeroed [`PJRT_Api`] of our
//! size, so an entry the plugin does not provide reads as `None`.

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs
)]

use std::ffi::{c_char, c_int, c_void};

/// Declares an argument struct with the common header and a `new()`.
macro_rules! args {
    ($(
        $name:ident { $($field:ident : $ty:ty),* $(,)? }
    )*) => {$(
        #[repr(C)]
        pub struct $name {
            pub struct_size: usize,
            pub extension_start: *mut PJRT_Extension_Base,
            $(pub $field: $ty,)*
        }

        #[allow(dead_code)]
        impl $name {
            /// `PJRT_STRUCT_SIZE` of this struct: the end of its last field.
            pub const STRUCT_SIZE: usize = {
                #[allow(unused_mut)]
                let mut end = std::mem::offset_of!($name, extension_start)
                    + std::mem::size_of::<*mut PJRT_Extension_Base>();
                $(
                    let e = std::mem::offset_of!($name, $field) + std::mem::size_of::<$ty>();
                    if e > end { end = e; }
                )*
                end
            };

            /// A zeroed struct with `struct_size` set.
            #[inline]
            pub fn new() -> Self {
                // SAFETY: every field is an integer, a bool, a raw pointer, an
                // `Option` of a fn pointer or a union of those: all-zero is valid.
                let mut s: Self = unsafe { std::mem::zeroed() };
                s.struct_size = Self::STRUCT_SIZE;
                s
            }
        }
    )*};
}

// Opaque handles.
pub enum PJRT_Error {}
pub enum PJRT_Event {}
pub enum PJRT_Client {}
pub enum PJRT_Device {}
pub enum PJRT_DeviceDescription {}
pub enum PJRT_Memory {}
pub enum PJRT_Executable {}
pub enum PJRT_LoadedExecutable {}
pub enum PJRT_Buffer {}
pub enum PJRT_ExecuteContext {}
pub enum PJRT_SerializedExecutable {}

#[repr(C)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub type_: c_int,
    pub next: *mut PJRT_Extension_Base,
}

/// `PJRT_Error_Code`.
pub type PJRT_Error_Code = c_int;
pub const PJRT_Error_Code_INVALID_ARGUMENT: PJRT_Error_Code = 3;
pub const PJRT_Error_Code_DEADLINE_EXCEEDED: PJRT_Error_Code = 4;
pub const PJRT_Error_Code_NOT_FOUND: PJRT_Error_Code = 5;
pub const PJRT_Error_Code_RESOURCE_EXHAUSTED: PJRT_Error_Code = 8;
pub const PJRT_Error_Code_INTERNAL: PJRT_Error_Code = 13;
pub const PJRT_Error_Code_UNAVAILABLE: PJRT_Error_Code = 14;
/// `PJRT_CallbackError`: the plugin's maker of an error for a callback to
/// return; it copies `message`.
pub type PJRT_CallbackError = Option<
    unsafe extern "C" fn(
        code: PJRT_Error_Code,
        message: *const c_char,
        message_size: usize,
    ) -> *mut PJRT_Error,
>;
/// `PJRT_KeyValueGetCallback_ValueDeleter` (and the identical
/// `PJRT_KeyValueTryGetCallback_ValueDeleter`): frees a value a key-value
/// callback returned.
pub type PJRT_KeyValue_ValueDeleter = Option<unsafe extern "C" fn(value: *mut c_char)>;
/// `PJRT_NamedValue_Type`.
pub type PJRT_NamedValue_Type = c_int;
pub const PJRT_NamedValue_kString: PJRT_NamedValue_Type = 0;
pub const PJRT_NamedValue_kInt64: PJRT_NamedValue_Type = 1;
pub const PJRT_NamedValue_kInt64List: PJRT_NamedValue_Type = 2;
pub const PJRT_NamedValue_kFloat: PJRT_NamedValue_Type = 3;
pub const PJRT_NamedValue_kBool: PJRT_NamedValue_Type = 4;
/// `PJRT_Buffer_Type`.
pub type PJRT_Buffer_Type = c_int;
/// `PJRT_HostBufferSemantics`.
pub type PJRT_HostBufferSemantics = c_int;
pub const PJRT_HostBufferSemantics_kImmutableOnlyDuringCall: PJRT_HostBufferSemantics = 0;

#[repr(C)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

args! {
    PJRT_NamedValue {
        name: *const c_char,
        name_size: usize,
        type_: PJRT_NamedValue_Type,
        value: PJRT_NamedValue_Value,
        value_size: usize,
    }

    PJRT_Error_Destroy_Args { error: *mut PJRT_Error }
    PJRT_Error_Message_Args { error: *const PJRT_Error, message: *const c_char, message_size: usize }
    PJRT_Error_GetCode_Args { error: *const PJRT_Error, code: PJRT_Error_Code }

    PJRT_Plugin_Initialize_Args {}
    PJRT_Plugin_Attributes_Args { attributes: *const PJRT_NamedValue, num_attributes: usize }

    PJRT_Event_Destroy_Args { event: *mut PJRT_Event }
    PJRT_Event_IsReady_Args { event: *mut PJRT_Event, is_ready: bool }
    PJRT_Event_Error_Args { event: *mut PJRT_Event }
    PJRT_Event_Await_Args { event: *mut PJRT_Event }

    PJRT_Client_Create_Args {
        create_options: *const PJRT_NamedValue,
        num_options: usize,
        kv_get_callback: Fn<PJRT_KeyValueGetCallback_Args>,
        kv_get_user_arg: *mut c_void,
        kv_put_callback: Fn<PJRT_KeyValuePutCallback_Args>,
        kv_put_user_arg: *mut c_void,
        client: *mut PJRT_Client,
        kv_try_get_callback: Fn<PJRT_KeyValueTryGetCallback_Args>,
        kv_try_get_user_arg: *mut c_void,
    }
    PJRT_KeyValueGetCallback_Args {
        key: *const c_char,
        key_size: usize,
        timeout_in_ms: c_int,
        callback_error: *mut PJRT_CallbackError,
        user_arg: *mut c_void,
        value: *mut c_char,
        value_size: usize,
        value_deleter_callback: PJRT_KeyValue_ValueDeleter,
    }
    PJRT_KeyValueTryGetCallback_Args {
        key: *const c_char,
        key_size: usize,
        callback_error: *mut PJRT_CallbackError,
        user_arg: *mut c_void,
        value: *mut c_char,
        value_size: usize,
        value_deleter_callback: PJRT_KeyValue_ValueDeleter,
    }
    PJRT_KeyValuePutCallback_Args {
        key: *const c_char,
        key_size: usize,
        value: *const c_char,
        value_size: usize,
        callback_error: *mut PJRT_CallbackError,
        user_arg: *mut c_void,
    }
    PJRT_Client_Destroy_Args { client: *mut PJRT_Client }
    PJRT_Client_PlatformName_Args { client: *mut PJRT_Client, platform_name: *const c_char, platform_name_size: usize }
    PJRT_Client_ProcessIndex_Args { client: *mut PJRT_Client, process_index: c_int }
    PJRT_Client_PlatformVersion_Args { client: *mut PJRT_Client, platform_version: *const c_char, platform_version_size: usize }
    PJRT_Client_Devices_Args { client: *mut PJRT_Client, devices: *const *mut PJRT_Device, num_devices: usize }
    PJRT_Client_AddressableDevices_Args {
        client: *mut PJRT_Client,
        addressable_devices: *const *mut PJRT_Device,
        num_addressable_devices: usize,
    }

    PJRT_Program { code: *mut c_char, code_size: usize, format: *const c_char, format_size: usize }
    PJRT_Client_Compile_Args {
        client: *mut PJRT_Client,
        program: *const PJRT_Program,
        compile_options: *const c_char,
        compile_options_size: usize,
        executable: *mut PJRT_LoadedExecutable,
    }
    PJRT_Client_BufferFromHostBuffer_Args {
        client: *mut PJRT_Client,
        data: *const c_void,
        type_: PJRT_Buffer_Type,
        dims: *const i64,
        num_dims: usize,
        byte_strides: *const i64,
        num_byte_strides: usize,
        host_buffer_semantics: PJRT_HostBufferSemantics,
        device: *mut PJRT_Device,
        memory: *mut PJRT_Memory,
        device_layout: *mut c_void,
        done_with_host_buffer: *mut PJRT_Event,
        buffer: *mut PJRT_Buffer,
    }

    PJRT_Client_CreateUninitializedBuffer_Args {
        client: *mut PJRT_Client,
        shape_dims: *const i64,
        shape_num_dims: usize,
        shape_element_type: PJRT_Buffer_Type,
        shape_layout: *mut c_void,
        device: *mut PJRT_Device,
        memory: *mut PJRT_Memory,
        buffer: *mut PJRT_Buffer,
    }

    PJRT_Client_CreateViewOfDeviceBuffer_Args {
        client: *mut PJRT_Client,
        device_buffer_ptr: *mut c_void,
        dims: *const i64,
        num_dims: usize,
        element_type: PJRT_Buffer_Type,
        layout: *mut c_void,
        device: *mut PJRT_Device,
        on_delete_callback: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
        on_delete_callback_arg: *mut c_void,
        stream: isize,
        buffer: *mut PJRT_Buffer,
        memory: *mut PJRT_Memory,
    }

    PJRT_DeviceDescription_Id_Args { device_description: *mut PJRT_DeviceDescription, id: c_int }
    PJRT_DeviceDescription_ProcessIndex_Args { device_description: *mut PJRT_DeviceDescription, process_index: c_int }
    PJRT_DeviceDescription_Kind_Args {
        device_description: *mut PJRT_DeviceDescription,
        device_kind: *const c_char,
        device_kind_size: usize,
    }
    PJRT_DeviceDescription_DebugString_Args {
        device_description: *mut PJRT_DeviceDescription,
        debug_string: *const c_char,
        debug_string_size: usize,
    }
    PJRT_Device_GetDescription_Args { device: *mut PJRT_Device, device_description: *mut PJRT_DeviceDescription }
    PJRT_Device_IsAddressable_Args { device: *mut PJRT_Device, is_addressable: bool }
    PJRT_Device_LocalHardwareId_Args { device: *mut PJRT_Device, local_hardware_id: c_int }

    PJRT_Executable_Destroy_Args { executable: *mut PJRT_Executable }
    PJRT_LoadedExecutable_Destroy_Args { executable: *mut PJRT_LoadedExecutable }
    PJRT_LoadedExecutable_GetExecutable_Args { loaded_executable: *mut PJRT_LoadedExecutable, executable: *mut PJRT_Executable }
    PJRT_Executable_Name_Args { executable: *mut PJRT_Executable, executable_name: *const c_char, executable_name_size: usize }
    PJRT_Executable_NumReplicas_Args { executable: *mut PJRT_Executable, num_replicas: usize }
    PJRT_Executable_NumPartitions_Args { executable: *mut PJRT_Executable, num_partitions: usize }
    PJRT_Executable_NumOutputs_Args { executable: *mut PJRT_Executable, num_outputs: usize }
    PJRT_LoadedExecutable_AddressableDevices_Args {
        executable: *mut PJRT_LoadedExecutable,
        addressable_devices: *const *mut PJRT_Device,
        num_addressable_devices: usize,
    }
    PJRT_ExecuteOptions {
        send_callbacks: *mut c_void,
        recv_callbacks: *mut c_void,
        num_send_ops: usize,
        num_recv_ops: usize,
        launch_id: c_int,
        non_donatable_input_indices: *const i64,
        num_non_donatable_input_indices: usize,
        context: *mut PJRT_ExecuteContext,
        call_location: *const c_char,
        num_tasks: usize,
        task_ids: *mut c_int,
        incarnation_ids: *mut i64,
    }
    PJRT_LoadedExecutable_Execute_Args {
        executable: *mut PJRT_LoadedExecutable,
        options: *mut PJRT_ExecuteOptions,
        argument_lists: *const *const *mut PJRT_Buffer,
        num_devices: usize,
        num_args: usize,
        output_lists: *const *mut *mut PJRT_Buffer,
        device_complete_events: *mut *mut PJRT_Event,
        execute_device: *mut PJRT_Device,
    }
    PJRT_Executable_OutputElementTypes_Args {
        executable: *mut PJRT_Executable,
        output_types: *mut PJRT_Buffer_Type,
        num_output_types: usize,
    }
    PJRT_Executable_OutputDimensions_Args {
        executable: *mut PJRT_Executable,
        num_outputs: usize,
        dims: *const i64,
        dim_sizes: *const usize,
    }
    PJRT_Executable_OptimizedProgram_Args { executable: *mut PJRT_Executable, program: *mut PJRT_Program }
    PJRT_Executable_Serialize_Args {
        executable: *const PJRT_Executable,
        serialized_bytes: *const c_char,
        serialized_bytes_size: usize,
        serialized_executable: *mut PJRT_SerializedExecutable,
        serialized_executable_deleter: Option<unsafe extern "C" fn(*mut PJRT_SerializedExecutable)>,
    }
    PJRT_Executable_DeserializeAndLoad_Args {
        client: *mut PJRT_Client,
        serialized_executable: *const c_char,
        serialized_executable_size: usize,
        loaded_executable: *mut PJRT_LoadedExecutable,
        overridden_serialized_compile_options: *const c_char,
        overridden_serialized_compile_options_size: usize,
    }

    PJRT_Buffer_Destroy_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_ElementType_Args { buffer: *mut PJRT_Buffer, type_: PJRT_Buffer_Type }
    PJRT_Buffer_Dimensions_Args { buffer: *mut PJRT_Buffer, dims: *const i64, num_dims: usize }
    PJRT_Buffer_OnDeviceSizeInBytes_Args { buffer: *mut PJRT_Buffer, on_device_size_in_bytes: usize }
    PJRT_Buffer_Device_Args { buffer: *mut PJRT_Buffer, device: *mut PJRT_Device }
    PJRT_Buffer_Delete_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_IsDeleted_Args { buffer: *mut PJRT_Buffer, is_deleted: bool }
    PJRT_Buffer_UnsafePointer_Args { buffer: *mut PJRT_Buffer, buffer_pointer: usize }
    PJRT_Buffer_IncreaseExternalReferenceCount_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_DecreaseExternalReferenceCount_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_ToHostBuffer_Args {
        src: *mut PJRT_Buffer,
        host_layout: *mut c_void,
        dst: *mut c_void,
        dst_size: usize,
        event: *mut PJRT_Event,
    }
    PJRT_Buffer_ReadyEvent_Args { buffer: *mut PJRT_Buffer, event: *mut PJRT_Event }
}

/// `PJRT_Extension_Type_FFI`: the FFI extension in the `PJRT_Api`'s chain.
pub const PJRT_Extension_Type_FFI: c_int = 5;

/// `PJRT_FFI_Register_Handler_Args` (pjrt_c_api_ffi_extension.h, newest form:
/// no `extension_start`, no `api_version`; only typed handlers).
#[repr(C)]
pub struct PJRT_FFI_Register_Handler_Args {
    pub struct_size: usize,
    pub target_name: *const c_char,
    pub target_name_size: usize,
    pub handler: *mut c_void,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
    pub traits: u32,
}

impl PJRT_FFI_Register_Handler_Args {
    /// `PJRT_STRUCT_SIZE`: the end of `traits`.
    pub const STRUCT_SIZE: usize =
        std::mem::offset_of!(PJRT_FFI_Register_Handler_Args, traits) + std::mem::size_of::<u32>();
}

/// `PJRT_FFI_Extension`: the extension header and its three entries.
#[repr(C)]
pub struct PJRT_FFI_Extension {
    pub base: PJRT_Extension_Base,
    pub type_id_register: Unused,
    pub user_data_add: Unused,
    pub register_handler: Fn<PJRT_FFI_Register_Handler_Args>,
}

/// A PJRT entry point that returns an error.
pub type Fn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut PJRT_Error>;
/// A PJRT entry point that returns nothing.
pub type VoidFn<A> = Option<unsafe extern "C" fn(*mut A)>;
/// An entry point radix does not call (only its slot matters).
pub type Unused = Option<unsafe extern "C" fn()>;

/// The function table returned by `GetPjrtApi`, in header order.
#[repr(C)]
pub struct PJRT_Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,

    pub PJRT_Error_Destroy: VoidFn<PJRT_Error_Destroy_Args>,
    pub PJRT_Error_Message: VoidFn<PJRT_Error_Message_Args>,
    pub PJRT_Error_GetCode: Fn<PJRT_Error_GetCode_Args>,

    pub PJRT_Plugin_Initialize: Fn<PJRT_Plugin_Initialize_Args>,
    pub PJRT_Plugin_Attributes: Fn<PJRT_Plugin_Attributes_Args>,

    pub PJRT_Event_Destroy: Fn<PJRT_Event_Destroy_Args>,
    pub PJRT_Event_IsReady: Fn<PJRT_Event_IsReady_Args>,
    pub PJRT_Event_Error: Fn<PJRT_Event_Error_Args>,
    pub PJRT_Event_Await: Fn<PJRT_Event_Await_Args>,
    pub PJRT_Event_OnReady: Unused,

    pub PJRT_Client_Create: Fn<PJRT_Client_Create_Args>,
    pub PJRT_Client_Destroy: Fn<PJRT_Client_Destroy_Args>,
    pub PJRT_Client_PlatformName: Fn<PJRT_Client_PlatformName_Args>,
    pub PJRT_Client_ProcessIndex: Fn<PJRT_Client_ProcessIndex_Args>,
    pub PJRT_Client_PlatformVersion: Fn<PJRT_Client_PlatformVersion_Args>,
    pub PJRT_Client_Devices: Fn<PJRT_Client_Devices_Args>,
    pub PJRT_Client_AddressableDevices: Fn<PJRT_Client_AddressableDevices_Args>,
    pub PJRT_Client_LookupDevice: Unused,
    pub PJRT_Client_LookupAddressableDevice: Unused,
    pub PJRT_Client_AddressableMemories: Unused,
    pub PJRT_Client_Compile: Fn<PJRT_Client_Compile_Args>,
    pub PJRT_Client_DefaultDeviceAssignment: Unused,
    pub PJRT_Client_BufferFromHostBuffer: Fn<PJRT_Client_BufferFromHostBuffer_Args>,

    pub PJRT_DeviceDescription_Id: Fn<PJRT_DeviceDescription_Id_Args>,
    pub PJRT_DeviceDescription_ProcessIndex: Fn<PJRT_DeviceDescription_ProcessIndex_Args>,
    pub PJRT_DeviceDescription_Attributes: Unused,
    pub PJRT_DeviceDescription_Kind: Fn<PJRT_DeviceDescription_Kind_Args>,
    pub PJRT_DeviceDescription_DebugString: Fn<PJRT_DeviceDescription_DebugString_Args>,
    pub PJRT_DeviceDescription_ToString: Unused,

    pub PJRT_Device_GetDescription: Fn<PJRT_Device_GetDescription_Args>,
    pub PJRT_Device_IsAddressable: Fn<PJRT_Device_IsAddressable_Args>,
    pub PJRT_Device_LocalHardwareId: Fn<PJRT_Device_LocalHardwareId_Args>,
    pub PJRT_Device_AddressableMemories: Unused,
    pub PJRT_Device_DefaultMemory: Unused,
    pub PJRT_Device_MemoryStats: Unused,

    pub PJRT_Memory_Id: Unused,
    pub PJRT_Memory_Kind: Unused,
    pub PJRT_Memory_DebugString: Unused,
    pub PJRT_Memory_ToString: Unused,
    pub PJRT_Memory_AddressableByDevices: Unused,

    pub PJRT_Executable_Destroy: Fn<PJRT_Executable_Destroy_Args>,
    pub PJRT_Executable_Name: Fn<PJRT_Executable_Name_Args>,
    pub PJRT_Executable_NumReplicas: Fn<PJRT_Executable_NumReplicas_Args>,
    pub PJRT_Executable_NumPartitions: Fn<PJRT_Executable_NumPartitions_Args>,
    pub PJRT_Executable_NumOutputs: Fn<PJRT_Executable_NumOutputs_Args>,
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes: Unused,
    pub PJRT_Executable_GetCostAnalysis: Unused,
    pub PJRT_Executable_OutputMemoryKinds: Unused,
    pub PJRT_Executable_OptimizedProgram: Fn<PJRT_Executable_OptimizedProgram_Args>,
    pub PJRT_Executable_Serialize: Fn<PJRT_Executable_Serialize_Args>,

    pub PJRT_LoadedExecutable_Destroy: Fn<PJRT_LoadedExecutable_Destroy_Args>,
    pub PJRT_LoadedExecutable_GetExecutable: Fn<PJRT_LoadedExecutable_GetExecutable_Args>,
    pub PJRT_LoadedExecutable_AddressableDevices: Fn<PJRT_LoadedExecutable_AddressableDevices_Args>,
    pub PJRT_LoadedExecutable_Delete: Unused,
    pub PJRT_LoadedExecutable_IsDeleted: Unused,
    pub PJRT_LoadedExecutable_Execute: Fn<PJRT_LoadedExecutable_Execute_Args>,
    pub PJRT_Executable_DeserializeAndLoad: Fn<PJRT_Executable_DeserializeAndLoad_Args>,
    pub PJRT_LoadedExecutable_Fingerprint: Unused,

    pub PJRT_Buffer_Destroy: Fn<PJRT_Buffer_Destroy_Args>,
    pub PJRT_Buffer_ElementType: Fn<PJRT_Buffer_ElementType_Args>,
    pub PJRT_Buffer_Dimensions: Fn<PJRT_Buffer_Dimensions_Args>,
    pub PJRT_Buffer_UnpaddedDimensions: Unused,
    pub PJRT_Buffer_DynamicDimensionIndices: Unused,
    pub PJRT_Buffer_GetMemoryLayout: Unused,
    pub PJRT_Buffer_OnDeviceSizeInBytes: Fn<PJRT_Buffer_OnDeviceSizeInBytes_Args>,
    pub PJRT_Buffer_Device: Fn<PJRT_Buffer_Device_Args>,
    pub PJRT_Buffer_Memory: Unused,
    pub PJRT_Buffer_Delete: Fn<PJRT_Buffer_Delete_Args>,
    pub PJRT_Buffer_IsDeleted: Fn<PJRT_Buffer_IsDeleted_Args>,
    pub PJRT_Buffer_CopyToDevice: Unused,
    pub PJRT_Buffer_ToHostBuffer: Fn<PJRT_Buffer_ToHostBuffer_Args>,
    pub PJRT_Buffer_IsOnCpu: Unused,
    pub PJRT_Buffer_ReadyEvent: Fn<PJRT_Buffer_ReadyEvent_Args>,
    pub PJRT_Buffer_UnsafePointer: Fn<PJRT_Buffer_UnsafePointer_Args>,
    pub PJRT_Buffer_IncreaseExternalReferenceCount:
        Fn<PJRT_Buffer_IncreaseExternalReferenceCount_Args>,
    pub PJRT_Buffer_DecreaseExternalReferenceCount:
        Fn<PJRT_Buffer_DecreaseExternalReferenceCount_Args>,
    pub PJRT_Buffer_OpaqueDeviceMemoryDataPointer: Unused,

    pub PJRT_CopyToDeviceStream_Destroy: Unused,
    pub PJRT_CopyToDeviceStream_AddChunk: Unused,
    pub PJRT_CopyToDeviceStream_TotalBytes: Unused,
    pub PJRT_CopyToDeviceStream_GranuleSize: Unused,
    pub PJRT_CopyToDeviceStream_CurrentBytes: Unused,

    pub PJRT_TopologyDescription_Create: Unused,
    pub PJRT_TopologyDescription_Destroy: Unused,
    pub PJRT_TopologyDescription_PlatformName: Unused,
    pub PJRT_TopologyDescription_PlatformVersion: Unused,
    pub PJRT_TopologyDescription_GetDeviceDescriptions: Unused,
    pub PJRT_TopologyDescription_Serialize: Unused,
    pub PJRT_TopologyDescription_Attributes: Unused,

    pub PJRT_Compile: Unused,

    pub PJRT_Executable_OutputElementTypes: Fn<PJRT_Executable_OutputElementTypes_Args>,
    pub PJRT_Executable_OutputDimensions: Fn<PJRT_Executable_OutputDimensions_Args>,

    pub PJRT_Buffer_CopyToMemory: Unused,
    pub PJRT_Client_CreateViewOfDeviceBuffer: Fn<PJRT_Client_CreateViewOfDeviceBuffer_Args>,
    pub PJRT_Executable_Fingerprint: Unused,
    pub PJRT_Client_TopologyDescription: Unused,
    pub PJRT_Executable_GetCompiledMemoryStats: Unused,
    pub PJRT_Memory_Kind_Id: Unused,
    pub PJRT_ExecuteContext_Create: Unused,
    pub PJRT_ExecuteContext_Destroy: Unused,
    pub PJRT_Buffer_CopyRawToHost: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_Destroy: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_TransferData: Unused,
    pub PJRT_Client_CreateBuffersForAsyncHostToDevice: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_Device: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_BufferCount: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_BufferSize: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_SetBufferError: Unused,
    pub PJRT_AsyncHostToDeviceTransferManager_AddMetadata: Unused,
    pub PJRT_Client_DmaMap: Unused,
    pub PJRT_Client_DmaUnmap: Unused,
    pub PJRT_Client_CreateUninitializedBuffer: Fn<PJRT_Client_CreateUninitializedBuffer_Args>,
    pub PJRT_Client_UpdateGlobalProcessInfo: Unused,
    pub PJRT_TopologyDescription_Deserialize: Unused,
    pub PJRT_Client_CreateAliasBuffer: Unused,
    pub PJRT_Client_FulfillAliasBuffer: Unused,
    pub PJRT_LoadedExecutable_GetDeviceAssignment: Unused,
}

/// The signature of the plugin's one exported symbol.
pub type GetPjrtApiFn = unsafe extern "C" fn() -> *const PJRT_Api;

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    // The numbers on the right were printed by a C program compiled with gcc
    // (x86-64) against /tmp/pjrt/pjrt_c_api.h (PJRT_API_MINOR 81): the
    // `<name>_STRUCT_SIZE` enums and `offsetof`.
    #[test]
    fn struct_sizes_match_the_header() {
        assert_eq!(size_of::<PJRT_Api>(), 984);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Error_Destroy), 40);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Client_Compile), 200);
        assert_eq!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_Execute), 480);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_ToHostBuffer), 600);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Executable_OutputDimensions), 768);
        assert_eq!(PJRT_NamedValue::STRUCT_SIZE, 56);
        assert_eq!(offset_of!(PJRT_NamedValue, value), 40);
        assert_eq!(PJRT_Client_Create_Args::STRUCT_SIZE, 88);
        assert_eq!(offset_of!(PJRT_Client_Create_Args, client), 64);
        assert_eq!(offset_of!(PJRT_Client_Create_Args, kv_try_get_user_arg), 80);
        // `PJRT_KeyValue*Callback_Args` as pjrt_c_api.h declares them
        // (openxla/xla, with `kv_try_get_callback`), compiled the same way.
        assert_eq!(PJRT_KeyValueGetCallback_Args::STRUCT_SIZE, 80);
        assert_eq!(
            offset_of!(PJRT_KeyValueGetCallback_Args, callback_error),
            40
        );
        assert_eq!(PJRT_KeyValueTryGetCallback_Args::STRUCT_SIZE, 72);
        assert_eq!(offset_of!(PJRT_KeyValueTryGetCallback_Args, value), 48);
        assert_eq!(PJRT_KeyValuePutCallback_Args::STRUCT_SIZE, 64);
        assert_eq!(
            offset_of!(PJRT_KeyValuePutCallback_Args, callback_error),
            48
        );
        assert_eq!(PJRT_Client_Compile_Args::STRUCT_SIZE, 56);
        assert_eq!(PJRT_Client_BufferFromHostBuffer_Args::STRUCT_SIZE, 120);
        assert_eq!(PJRT_Client_CreateUninitializedBuffer_Args::STRUCT_SIZE, 80);
        assert_eq!(PJRT_Client_CreateViewOfDeviceBuffer_Args::STRUCT_SIZE, 112);
        assert_eq!(
            offset_of!(PJRT_Api, PJRT_Client_CreateViewOfDeviceBuffer),
            784
        );
        assert_eq!(
            offset_of!(PJRT_Client_CreateUninitializedBuffer_Args, shape_layout),
            48
        );
        assert_eq!(
            offset_of!(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics),
            72
        );
        assert_eq!(PJRT_ExecuteOptions::STRUCT_SIZE, 112);
        assert_eq!(
            offset_of!(PJRT_ExecuteOptions, non_donatable_input_indices),
            56
        );
        assert_eq!(PJRT_LoadedExecutable_Execute_Args::STRUCT_SIZE, 80);
        assert_eq!(PJRT_Executable_DeserializeAndLoad_Args::STRUCT_SIZE, 64);
        assert_eq!(PJRT_Buffer_ToHostBuffer_Args::STRUCT_SIZE, 56);
        assert_eq!(PJRT_Event_IsReady_Args::STRUCT_SIZE, 25);
        assert_eq!(PJRT_Plugin_Initialize_Args::STRUCT_SIZE, 16);
        // From pjrt_c_api_ffi_extension.h (openxla/xla, FFI extension
        // version 2 without `api_version`), compiled the same way.
        assert_eq!(PJRT_FFI_Register_Handler_Args::STRUCT_SIZE, 52);
        assert_eq!(offset_of!(PJRT_FFI_Register_Handler_Args, handler), 24);
        assert_eq!(
            offset_of!(PJRT_FFI_Register_Handler_Args, platform_name),
            32
        );
        assert_eq!(size_of::<PJRT_FFI_Extension>(), 48);
        assert_eq!(offset_of!(PJRT_FFI_Extension, register_handler), 40);
    }
}
