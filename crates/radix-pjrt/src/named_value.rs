//! Typed key-value pairs (`PJRT_NamedValue`): plugin attributes and client
//! create options.

use crate::ffi;
use crate::plugin::lossy;

/// A named value: a plugin attribute or a client option.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedValue {
    /// The key, e.g. `stablehlo_current_version`.
    pub name: String,
    /// The typed value.
    pub value: Value,
}

/// The value of a [`NamedValue`], one variant per `PJRT_NamedValue_Type`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `PJRT_NamedValue_kString`.
    String(String),
    /// `PJRT_NamedValue_kInt64`.
    Int64(i64),
    /// `PJRT_NamedValue_kInt64List`.
    Int64List(Vec<i64>),
    /// `PJRT_NamedValue_kFloat`.
    Float(f32),
    /// `PJRT_NamedValue_kBool`.
    Bool(bool),
}

impl NamedValue {
    /// A named value.
    pub fn new(name: impl Into<String>, value: Value) -> NamedValue {
        NamedValue {
            name: name.into(),
            value,
        }
    }

    /// Copies `n` named values returned by a plugin.
    ///
    /// # Safety
    /// `ptr` is null or points to `n` valid `PJRT_NamedValue`s.
    pub(crate) unsafe fn read_all(ptr: *const ffi::PJRT_NamedValue, n: usize) -> Vec<NamedValue> {
        if ptr.is_null() {
            return Vec::new();
        }
        // SAFETY: forwarded from the caller.
        let raw = unsafe { std::slice::from_raw_parts(ptr, n) };
        raw.iter()
            .filter_map(|nv| {
                // SAFETY: the plugin's strings and arrays are valid for their sizes,
                // and the union member read is the one `type_` names.
                unsafe {
                    let name = lossy(nv.name, nv.name_size);
                    let value = match nv.type_ {
                        ffi::PJRT_NamedValue_kString => {
                            Value::String(lossy(nv.value.string_value, nv.value_size))
                        }
                        ffi::PJRT_NamedValue_kInt64 => Value::Int64(nv.value.int64_value),
                        ffi::PJRT_NamedValue_kInt64List => {
                            let p = nv.value.int64_array_value;
                            if p.is_null() || nv.value_size == 0 {
                                Value::Int64List(Vec::new())
                            } else {
                                Value::Int64List(
                                    std::slice::from_raw_parts(p, nv.value_size).to_vec(),
                                )
                            }
                        }
                        ffi::PJRT_NamedValue_kFloat => Value::Float(nv.value.float_value),
                        ffi::PJRT_NamedValue_kBool => Value::Bool(nv.value.bool_value),
                        _ => return None,
                    };
                    Some(NamedValue { name, value })
                }
            })
            .collect()
    }

    /// The C view of `self`; it borrows `self`'s strings and arrays.
    pub(crate) fn to_ffi(&self) -> ffi::PJRT_NamedValue {
        let mut nv = ffi::PJRT_NamedValue::new();
        nv.name = self.name.as_ptr().cast();
        nv.name_size = self.name.len();
        match &self.value {
            Value::String(s) => {
                nv.type_ = ffi::PJRT_NamedValue_kString;
                nv.value.string_value = s.as_ptr().cast();
                nv.value_size = s.len();
            }
            Value::Int64(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kInt64;
                nv.value.int64_value = *v;
                nv.value_size = 1;
            }
            Value::Int64List(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kInt64List;
                nv.value.int64_array_value = v.as_ptr();
                nv.value_size = v.len();
            }
            Value::Float(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kFloat;
                nv.value.float_value = *v;
                nv.value_size = 1;
            }
            Value::Bool(v) => {
                nv.type_ = ffi::PJRT_NamedValue_kBool;
                nv.value.bool_value = *v;
                nv.value_size = 1;
            }
        }
        nv
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::String(s) => write!(f, "{s:?}"),
            Value::Int64(v) => write!(f, "{v}"),
            Value::Int64List(v) => write!(f, "{v:?}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
        }
    }
}
