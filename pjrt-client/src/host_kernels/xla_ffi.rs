//! hlobridge's own `#[repr(C)]` declarations of the subset of the XLA FFI C
//! API (`xla/ffi/api/c_api.h`, API 0.x) that host kernels need: the call
//! frame a handler receives, buffers, the metadata handshake and
//! `XLA_FFI_Error_Create`.
//!
//! `tests/layout.rs` checks every struct here against the `c_api.h` that
//! jaxlib ships (`jaxlib/include/xla/ffi/api/c_api.h`).

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs
)]

use crate::ffi::StructLayout;
use std::os::raw::{c_char, c_int, c_void};

/// The FFI API major version these declarations follow.
pub const XLA_FFI_API_MAJOR: c_int = 0;
/// The newest FFI API minor version these declarations follow.
pub const XLA_FFI_API_MINOR: c_int = 3;

pub type XLA_FFI_Extension_Type = c_int;
pub const XLA_FFI_Extension_Metadata: XLA_FFI_Extension_Type = 1;

pub type XLA_FFI_ExecutionStage = c_int;
pub const XLA_FFI_ExecutionStage_EXECUTE: XLA_FFI_ExecutionStage = 3;

pub type XLA_FFI_DataType = c_int;
pub const XLA_FFI_DataType_F32: XLA_FFI_DataType = 11;
pub const XLA_FFI_DataType_F64: XLA_FFI_DataType = 12;
pub const XLA_FFI_DataType_F16: XLA_FFI_DataType = 10;
pub const XLA_FFI_DataType_BF16: XLA_FFI_DataType = 16;

pub type XLA_FFI_ArgType = c_int;
pub const XLA_FFI_ArgType_BUFFER: XLA_FFI_ArgType = 1;
pub type XLA_FFI_RetType = c_int;
pub const XLA_FFI_RetType_BUFFER: XLA_FFI_RetType = 1;

pub type XLA_FFI_Error_Code = c_int;
pub const XLA_FFI_Error_Code_INVALID_ARGUMENT: XLA_FFI_Error_Code = 3;
pub const XLA_FFI_Error_Code_INTERNAL: XLA_FFI_Error_Code = 13;

/// Opaque `XLA_FFI_Error`.
#[repr(C)]
pub struct XLA_FFI_Error {
    _private: [u8; 0],
}

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

#[repr(C)]
pub struct XLA_FFI_Error_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub message: *const c_char,
    pub errc: XLA_FFI_Error_Code,
}

pub type XLA_FFI_Error_Create =
    Option<unsafe extern "C" fn(args: *mut XLA_FFI_Error_Create_Args) -> *mut XLA_FFI_Error>;
/// A function slot this crate never calls.
pub type XLA_FFI_UnusedFn = Option<unsafe extern "C" fn(args: *mut c_void) -> *mut c_void>;

#[repr(C)]
pub struct XLA_FFI_Buffer {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub dtype: XLA_FFI_DataType,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *mut i64,
}

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
    pub types: *mut c_int,
    pub names: *mut *mut c_void,
    pub attrs: *mut *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub api: *const XLA_FFI_Api,
    pub ctx: *mut c_void,
    pub stage: XLA_FFI_ExecutionStage,
    pub args: XLA_FFI_Args,
    pub rets: XLA_FFI_Rets,
    pub attrs: XLA_FFI_Attrs,
    pub future: *mut c_void,
}

#[repr(C)]
pub struct XLA_FFI_TypeId {
    pub type_id: i64,
}

#[repr(C)]
pub struct XLA_FFI_Metadata {
    pub struct_size: usize,
    pub api_version: XLA_FFI_Api_Version,
    pub traits: u32,
    pub state_type_id: XLA_FFI_TypeId,
}

#[repr(C)]
pub struct XLA_FFI_Metadata_Extension {
    pub extension_base: XLA_FFI_Extension_Base,
    pub metadata: *mut XLA_FFI_Metadata,
}

#[repr(C)]
pub struct XLA_FFI_Api {
    pub struct_size: usize,
    pub extension_start: *mut XLA_FFI_Extension_Base,
    pub api_version: XLA_FFI_Api_Version,
    pub internal_api: *const c_void,
    pub XLA_FFI_Error_Create: XLA_FFI_Error_Create,
    pub XLA_FFI_Error_GetMessage: XLA_FFI_UnusedFn,
    pub XLA_FFI_Error_Destroy: XLA_FFI_UnusedFn,
    pub XLA_FFI_Handler_Register: XLA_FFI_UnusedFn,
    pub XLA_FFI_Stream_Get: XLA_FFI_UnusedFn,
    pub XLA_FFI_Type_Register: XLA_FFI_UnusedFn,
    pub XLA_FFI_ExecutionContext_Get: XLA_FFI_UnusedFn,
    pub XLA_FFI_State_Set: XLA_FFI_UnusedFn,
    pub XLA_FFI_State_Get: XLA_FFI_UnusedFn,
    pub XLA_FFI_DeviceMemory_Allocate: XLA_FFI_UnusedFn,
    pub XLA_FFI_DeviceMemory_Free: XLA_FFI_UnusedFn,
    pub XLA_FFI_ThreadPool_Schedule: XLA_FFI_UnusedFn,
    pub XLA_FFI_ThreadPool_NumThreads: XLA_FFI_UnusedFn,
    pub XLA_FFI_Future_Create: XLA_FFI_UnusedFn,
    pub XLA_FFI_Future_SetAvailable: XLA_FFI_UnusedFn,
    pub XLA_FFI_Future_SetError: XLA_FFI_UnusedFn,
    pub XLA_FFI_RunId_Get: XLA_FFI_UnusedFn,
    pub XLA_FFI_DeviceOrdinal_Get: XLA_FFI_UnusedFn,
}

macro_rules! layout {
    ($name:ident { $($field:ident $(= $cname:literal)?),* }) => {
        StructLayout {
            name: stringify!($name),
            size: ::std::mem::size_of::<$name>(),
            fields: &[$(($crate::__pjrt_field_name!($field $(, $cname)?), ::std::mem::offset_of!($name, $field)),)*],
        }
    };
}

/// Layouts of every struct declared here, for the header check.
pub fn layouts() -> Vec<StructLayout> {
    vec![
        layout!(XLA_FFI_Extension_Base { struct_size, type_ = "type", next }),
        layout!(XLA_FFI_Api_Version {
            struct_size,
            extension_start,
            major_version,
            minor_version
        }),
        layout!(XLA_FFI_Error_Create_Args {
            struct_size,
            extension_start,
            message,
            errc
        }),
        layout!(XLA_FFI_Buffer {
            struct_size,
            extension_start,
            dtype,
            data,
            rank,
            dims
        }),
        layout!(XLA_FFI_Args {
            struct_size,
            extension_start,
            size,
            types,
            args
        }),
        layout!(XLA_FFI_Rets {
            struct_size,
            extension_start,
            size,
            types,
            rets
        }),
        layout!(XLA_FFI_Attrs {
            struct_size,
            extension_start,
            size,
            types,
            names,
            attrs
        }),
        layout!(XLA_FFI_CallFrame {
            struct_size,
            extension_start,
            api,
            ctx,
            stage,
            args,
            rets,
            attrs,
            future
        }),
        layout!(XLA_FFI_TypeId { type_id }),
        layout!(XLA_FFI_Metadata {
            struct_size,
            api_version,
            traits,
            state_type_id
        }),
        layout!(XLA_FFI_Metadata_Extension {
            extension_base,
            metadata
        }),
        layout!(XLA_FFI_Api {
            struct_size,
            extension_start,
            api_version,
            internal_api,
            XLA_FFI_Error_Create,
            XLA_FFI_Error_GetMessage,
            XLA_FFI_Error_Destroy,
            XLA_FFI_Handler_Register,
            XLA_FFI_Stream_Get,
            XLA_FFI_Type_Register,
            XLA_FFI_ExecutionContext_Get,
            XLA_FFI_State_Set,
            XLA_FFI_State_Get,
            XLA_FFI_DeviceMemory_Allocate,
            XLA_FFI_DeviceMemory_Free,
            XLA_FFI_ThreadPool_Schedule,
            XLA_FFI_ThreadPool_NumThreads,
            XLA_FFI_Future_Create,
            XLA_FFI_Future_SetAvailable,
            XLA_FFI_Future_SetError,
            XLA_FFI_RunId_Get,
            XLA_FFI_DeviceOrdinal_Get
        }),
    ]
}
