//! Extension chain, version, errors, named values, plugin and event structs.

use super::*;
use std::os::raw::{c_char, c_int, c_void};

/// `PJRT_Extension_Base`: header of every extension in the chain.
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_Extension_Base {
    pub struct_size: usize,
    pub type_: PJRT_Extension_Type,
    pub next: *mut PJRT_Extension_Base,
}

/// `PJRT_NamedValue` (the C anonymous union is the `value` field).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const c_char,
    pub name_size: usize,
    pub type_: PJRT_NamedValue_Type,
    pub value: PJRT_NamedValue_Value,
    pub value_size: usize,
}
// SAFETY: repr(C), starts with usize, zero is valid for all fields.
unsafe impl PjrtStruct for PJRT_NamedValue {}

/// The anonymous value union of `PJRT_NamedValue`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union PJRT_NamedValue_Value {
    pub string_value: *const c_char,
    pub int64_value: i64,
    pub int64_array_value: *const i64,
    pub float_value: f32,
    pub bool_value: bool,
}

/// Callback used by plugins to build a `PJRT_Error` inside our callbacks.
pub type PJRT_CallbackError = Option<
    unsafe extern "C" fn(
        code: PJRT_Error_Code,
        message: *const c_char,
        size: usize,
    ) -> *mut PJRT_Error,
>;
/// `PJRT_Event_OnReadyCallback`.
pub type PJRT_Event_OnReadyCallback =
    Option<unsafe extern "C" fn(error: *mut PJRT_Error, user_arg: *mut c_void)>;

pjrt_structs! { BASE_LAYOUTS;
    PJRT_Api_Version { major_version: c_int, minor_version: c_int }
    PJRT_Error_Destroy_Args { error: *mut PJRT_Error }
    PJRT_Error_Message_Args { error: *const PJRT_Error, message: *const c_char, message_size: usize }
    PJRT_Error_GetCode_Args { error: *const PJRT_Error, code: PJRT_Error_Code }
    PJRT_Plugin_Initialize_Args {}
    PJRT_Plugin_Attributes_Args { attributes: *const PJRT_NamedValue, num_attributes: usize }
    PJRT_Event_Destroy_Args { event: *mut PJRT_Event }
    PJRT_Event_IsReady_Args { event: *mut PJRT_Event, is_ready: bool }
    PJRT_Event_Error_Args { event: *mut PJRT_Event }
    PJRT_Event_Await_Args { event: *mut PJRT_Event }
    PJRT_Event_OnReady_Args { event: *mut PJRT_Event, callback: PJRT_Event_OnReadyCallback, user_arg: *mut c_void }
}

/// Layouts of the hand-written (non-macro) structs in this module.
pub fn base_manual_layouts() -> &'static [StructLayout] {
    use std::mem::{offset_of, size_of};
    const L: &[StructLayout] = &[
        StructLayout {
            name: "PJRT_Extension_Base",
            size: size_of::<PJRT_Extension_Base>(),
            fields: &[
                ("struct_size", offset_of!(PJRT_Extension_Base, struct_size)),
                ("type", offset_of!(PJRT_Extension_Base, type_)),
                ("next", offset_of!(PJRT_Extension_Base, next)),
            ],
        },
        StructLayout {
            name: "PJRT_NamedValue",
            size: size_of::<PJRT_NamedValue>(),
            fields: &[
                ("struct_size", offset_of!(PJRT_NamedValue, struct_size)),
                (
                    "extension_start",
                    offset_of!(PJRT_NamedValue, extension_start),
                ),
                ("name", offset_of!(PJRT_NamedValue, name)),
                ("name_size", offset_of!(PJRT_NamedValue, name_size)),
                ("type", offset_of!(PJRT_NamedValue, type_)),
                ("int64_value", offset_of!(PJRT_NamedValue, value)),
                ("string_value", offset_of!(PJRT_NamedValue, value)),
                ("float_value", offset_of!(PJRT_NamedValue, value)),
                ("value_size", offset_of!(PJRT_NamedValue, value_size)),
            ],
        },
    ];
    L
}
