//! hlobridge's own `#[repr(C)]` declarations of the subset of the PJRT C API
//! (header version 0.81) that this crate uses.
//!
//! Struct, field and function-table names mirror the C names exactly so the
//! layout table in [`crate::layout`] can be checked against the real header
//! (see `tests/layout.rs`). All argument structs start with `struct_size` and
//! `extension_start`; [`PjrtStruct::new`] returns a zeroed value with
//! `struct_size` filled in.
//!
//! Enums are declared as plain `c_int` aliases plus constants so that values
//! unknown to us (from newer plugins) never cause undefined behaviour.

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs
)]

use std::os::raw::c_int;

/// Size and field offsets of one `#[repr(C)]` struct, as seen by Rust.
#[derive(Debug, Clone, Copy)]
pub struct StructLayout {
    /// C type name (e.g. `PJRT_Client_Create_Args`).
    pub name: &'static str,
    /// `size_of` the Rust declaration.
    pub size: usize,
    /// `(C field name, Rust offset_of)` for every declared field.
    pub fields: &'static [(&'static str, usize)],
}

/// Marker for PJRT argument structs: all fields are raw pointers, integers,
/// bools or optional function pointers, so the all-zero bit pattern is valid.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, start with a `usize` `struct_size`
/// field, and be valid when zero-initialised.
pub unsafe trait PjrtStruct: Sized {
    /// A zeroed struct with `struct_size` set to `size_of::<Self>()`.
    #[inline]
    fn new() -> Self {
        // SAFETY: the trait contract guarantees all-zero is a valid value.
        let mut s: Self = unsafe { std::mem::zeroed() };
        // SAFETY: the trait contract guarantees a `usize` at offset 0.
        unsafe { *(&mut s as *mut Self as *mut usize) = std::mem::size_of::<Self>() };
        s
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __pjrt_field_name {
    ($f:ident) => {
        stringify!($f)
    };
    ($f:ident, $c:literal) => {
        $c
    };
}

/// Declares PJRT argument structs (with the common `struct_size` /
/// `extension_start` header) and a layout table for them.
macro_rules! pjrt_structs {
    ($layouts:ident; $( $(#[$m:meta])* $name:ident { $( $field:ident $(= $cname:literal)? : $ty:ty ),* $(,)? } )*) => {
        $(
            $(#[$m])*
            #[repr(C)]
            #[derive(Debug)]
            pub struct $name {
                pub struct_size: usize,
                pub extension_start: *mut $crate::ffi::PJRT_Extension_Base,
                $( pub $field: $ty, )*
            }
            // SAFETY: repr(C), starts with usize struct_size, fields are
            // pointers/integers/bools/Option<fn>, for which zero is valid.
            unsafe impl $crate::ffi::PjrtStruct for $name {}
        )*
        /// Layouts of the structs declared in this module.
        pub const $layouts: &[$crate::ffi::StructLayout] = &[
            $(
                $crate::ffi::StructLayout {
                    name: stringify!($name),
                    size: ::std::mem::size_of::<$name>(),
                    fields: &[
                        ("struct_size", ::std::mem::offset_of!($name, struct_size)),
                        ("extension_start", ::std::mem::offset_of!($name, extension_start)),
                        $( ($crate::__pjrt_field_name!($field $(, $cname)?), ::std::mem::offset_of!($name, $field)), )*
                    ],
                },
            )*
        ];
    };
}

mod api;
mod base;
mod buffer;
mod client;
pub mod dlpack;
mod exec;
mod ffi_ext;
mod topology;

pub use self::api::*;
pub use self::base::*;
pub use self::buffer::*;
pub use self::client::*;
pub use self::exec::*;
pub use self::ffi_ext::*;
pub use self::topology::*;

/// Opaque handle types (never dereferenced on the Rust side).
macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}
opaque!(
    PJRT_Error,
    PJRT_Event,
    PJRT_Client,
    PJRT_Device,
    PJRT_Memory,
    PJRT_DeviceDescription,
    PJRT_TopologyDescription,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_Buffer,
    PJRT_ExecuteContext,
    PJRT_SerializedExecutable,
    PJRT_SendCallbackInfo,
    PJRT_RecvCallbackInfo
);

/// A PJRT function taking an argument struct and returning `PJRT_Error*`.
pub type PjrtFn<A> = Option<unsafe extern "C" fn(args: *mut A) -> *mut PJRT_Error>;
/// A PJRT function taking an argument struct and returning nothing.
pub type PjrtVoidFn<A> = Option<unsafe extern "C" fn(args: *mut A)>;
/// A table slot whose function this crate never calls.
pub type PjrtUnusedFn =
    Option<unsafe extern "C" fn(args: *mut std::ffi::c_void) -> *mut PJRT_Error>;

/// `PJRT_Error_Code` values.
pub type PJRT_Error_Code = c_int;
/// `PJRT_NamedValue_Type` values.
pub type PJRT_NamedValue_Type = c_int;
pub const PJRT_NamedValue_kString: PJRT_NamedValue_Type = 0;
pub const PJRT_NamedValue_kInt64: PJRT_NamedValue_Type = 1;
pub const PJRT_NamedValue_kInt64List: PJRT_NamedValue_Type = 2;
pub const PJRT_NamedValue_kFloat: PJRT_NamedValue_Type = 3;
pub const PJRT_NamedValue_kBool: PJRT_NamedValue_Type = 4;
/// `PJRT_Buffer_Type` values (see [`crate::ElementType`]).
pub type PJRT_Buffer_Type = c_int;
/// `PJRT_HostBufferSemantics` values.
pub type PJRT_HostBufferSemantics = c_int;
pub const PJRT_HostBufferSemantics_kImmutableOnlyDuringCall: PJRT_HostBufferSemantics = 0;
pub const PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes: PJRT_HostBufferSemantics = 1;
pub const PJRT_HostBufferSemantics_kImmutableZeroCopy: PJRT_HostBufferSemantics = 2;
pub const PJRT_HostBufferSemantics_kMutableZeroCopy: PJRT_HostBufferSemantics = 3;
/// `PJRT_Buffer_MemoryLayout_Type` values.
pub type PJRT_Buffer_MemoryLayout_Type = c_int;
pub const PJRT_Buffer_MemoryLayout_Type_Tiled: PJRT_Buffer_MemoryLayout_Type = 0;
pub const PJRT_Buffer_MemoryLayout_Type_Strides: PJRT_Buffer_MemoryLayout_Type = 1;
/// `PJRT_Extension_Type` values.
pub type PJRT_Extension_Type = c_int;

/// All layout tables, for the header layout check.
pub fn all_layouts() -> Vec<StructLayout> {
    let mut v = Vec::new();
    v.extend_from_slice(base::BASE_LAYOUTS);
    v.extend_from_slice(base::base_manual_layouts());
    v.extend_from_slice(client::CLIENT_LAYOUTS);
    v.extend_from_slice(exec::EXEC_LAYOUTS);
    v.extend_from_slice(buffer::BUFFER_LAYOUTS);
    v.extend_from_slice(topology::TOPOLOGY_LAYOUTS);
    v.extend_from_slice(buffer::buffer_manual_layouts());
    v.push(api::api_layout());
    v
}
