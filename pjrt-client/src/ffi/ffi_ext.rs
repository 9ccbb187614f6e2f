//! The PJRT FFI extension (`PJRT_Extension_Type_FFI`): registering XLA FFI
//! custom-call handlers with a plugin's XLA runtime.
//!
//! `pjrt_c_api_ffi_extension.h` is not shipped with the plugin wheels, so
//! these declarations cannot be compiled against a header at test time.
//! Their facts were read from the xla-cpu-pjrt 0.0.1 binary: its
//! `PJRT_FFI_Register_Handler` checks `struct_size >= 52` and reads the
//! target name at offsets 8/16 and the platform name at 32/40, and its
//! extension struct is 48 bytes (three function slots). At run time
//! [`crate::host_kernels`] refuses an extension whose `struct_size` is
//! smaller than this declaration.

use super::*;
use std::os::raw::{c_char, c_void};

/// `PJRT_FFI_Register_Handler_Args` (no `extension_start` in this struct).
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_FFI_Register_Handler_Args {
    pub struct_size: usize,
    pub target_name: *const c_char,
    pub target_name_size: usize,
    /// An `XLA_FFI_Handler*`.
    pub handler: *mut c_void,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
    /// `PJRT_FFI_Handler_TraitsBits`.
    pub traits: u32,
}

/// The size the plugin checks: `offsetof(traits) + sizeof(traits)`, without
/// the tail padding Rust adds.
pub const PJRT_FFI_Register_Handler_Args_STRUCT_SIZE: usize =
    std::mem::offset_of!(PJRT_FFI_Register_Handler_Args, traits) + 4;

/// `PJRT_FFI_Extension`.
#[repr(C)]
#[derive(Debug)]
pub struct PJRT_FFI_Extension {
    pub base: PJRT_Extension_Base,
    pub type_register: PjrtUnusedFn,
    pub user_data_add: PjrtUnusedFn,
    pub register_handler: PjrtFn<PJRT_FFI_Register_Handler_Args>,
}

/// `PJRT_Extension_Type_FFI`.
pub const PJRT_Extension_Type_FFI: PJRT_Extension_Type = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_the_plugin_binary() {
        assert_eq!(PJRT_FFI_Register_Handler_Args_STRUCT_SIZE, 52);
        assert_eq!(offset_of!(PJRT_FFI_Register_Handler_Args, handler), 24);
        assert_eq!(
            offset_of!(PJRT_FFI_Register_Handler_Args, platform_name),
            32
        );
        assert_eq!(size_of::<PJRT_FFI_Extension>(), 48);
    }
}
