//! The parameter shapes of a compiled program, read from the optimized HLO
//! module the plugin returns (`PJRT_Executable_OptimizedProgram`). The C API
//! has no call for them, and the CPU plugin accepts an argument of the wrong
//! element type when its byte size matches, so `execute` checks them itself.

use prost::Message;

use crate::ElementType;
use crate::client::raw_slice;
use crate::ffi;
use crate::plugin::Plugin;

/// The element type and dimensions of one parameter, as compiled (per shard).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamShape {
    /// `None` for a type radix does not model (the check then skips it).
    pub(crate) ty: Option<ElementType>,
    pub(crate) dims: Vec<i64>,
}

/// `xla.HloModuleProtoWithConfig` (subset).
#[derive(Clone, PartialEq, prost::Message)]
struct HloModuleProtoWithConfig {
    #[prost(message, optional, tag = "1")]
    hlo_module: Option<HloModuleProto>,
}

/// `xla.HloModuleProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
struct HloModuleProto {
    #[prost(message, optional, tag = "4")]
    host_program_shape: Option<ProgramShapeProto>,
}

/// `xla.ProgramShapeProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
struct ProgramShapeProto {
    #[prost(message, repeated, tag = "1")]
    parameters: Vec<ShapeProto>,
}

/// `xla.ShapeProto` (subset).
#[derive(Clone, PartialEq, prost::Message)]
struct ShapeProto {
    #[prost(int32, tag = "2")]
    element_type: i32,
    #[prost(int64, repeated, tag = "3")]
    dimensions: Vec<i64>,
}

/// The element type of an `xla.PrimitiveType` value.
fn from_primitive_type(t: i32) -> Option<ElementType> {
    use ElementType::*;
    Some(match t {
        1 => Bool,
        2 => S8,
        3 => S16,
        4 => S32,
        5 => S64,
        6 => U8,
        7 => U16,
        8 => U32,
        9 => U64,
        10 => F16,
        11 => F32,
        12 => F64,
        15 => C64,
        16 => BF16,
        18 => C128,
        19 => F8E5M2,
        20 => F8E4M3FN,
        _ => return None,
    })
}

/// The parameter shapes of `exe`, or `None` where the plugin does not say
/// (no `OptimizedProgram`, an unknown format, or a tupled entry).
pub(crate) fn parameter_shapes(
    p: &Plugin,
    exe: *mut ffi::PJRT_Executable,
) -> Option<Vec<ParamShape>> {
    const FORMAT: &str = "hlo_with_config";
    let mut program = ffi::PJRT_Program::new();
    program.format = FORMAT.as_ptr().cast();
    program.format_size = FORMAT.len();
    let mut args = ffi::PJRT_Executable_OptimizedProgram_Args::new();
    args.executable = exe;
    args.program = &mut program;
    // SAFETY: a null `code` asks for the size only.
    unsafe { call!(p, PJRT_Executable_OptimizedProgram, &mut args) }.ok()?;
    let mut code = vec![0u8; program.code_size];
    program.code = code.as_mut_ptr().cast();
    args.program = &mut program;
    // SAFETY: `code` has the size the plugin asked for.
    unsafe { call!(p, PJRT_Executable_OptimizedProgram, &mut args) }.ok()?;
    code.truncate(program.code_size);
    // SAFETY: the format string is owned by the plugin and valid for its size.
    let format = unsafe { raw_slice(program.format.cast::<u8>(), program.format_size) };
    let module = match format {
        b"hlo_with_config" => {
            HloModuleProtoWithConfig::decode(&code[..])
                .ok()?
                .hlo_module?
        }
        b"hlo" => HloModuleProto::decode(&code[..]).ok()?,
        _ => return None,
    };
    let params = module.host_program_shape?.parameters;
    const TUPLE: i32 = 13;
    if params.iter().any(|s| s.element_type == TUPLE) {
        return None;
    }
    Some(
        params
            .into_iter()
            .map(|s| ParamShape {
                ty: from_primitive_type(s.element_type),
                dims: s.dimensions,
            })
            .collect(),
    )
}
