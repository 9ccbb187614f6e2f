//! Buffer structs: host transfers, views, layouts, queries.

use super::*;
use std::os::raw::c_void;

/// `on_delete_callback` of `PJRT_Client_CreateViewOfDeviceBuffer_Args`.
pub type PJRT_OnDeleteCallback =
    Option<unsafe extern "C" fn(device_buffer_ptr: *mut c_void, user_arg: *mut c_void)>;

pjrt_structs! { BUFFER_LAYOUTS;
    PJRT_Buffer_MemoryLayout_Tiled {
        minor_to_major: *const i64,
        minor_to_major_size: usize,
        tile_dims: *const i64,
        tile_dim_sizes: *const usize,
        num_tiles: usize,
    }
    PJRT_Buffer_MemoryLayout_Strides { byte_strides: *const i64, num_byte_strides: usize }
    PJRT_Client_BufferFromHostBuffer_Args {
        client: *mut PJRT_Client,
        data: *const c_void,
        type_ = "type": PJRT_Buffer_Type,
        dims: *const i64,
        num_dims: usize,
        byte_strides: *const i64,
        num_byte_strides: usize,
        host_buffer_semantics: PJRT_HostBufferSemantics,
        device: *mut PJRT_Device,
        memory: *mut PJRT_Memory,
        device_layout: *mut PJRT_Buffer_MemoryLayout,
        done_with_host_buffer: *mut PJRT_Event,
        buffer: *mut PJRT_Buffer,
    }
    PJRT_Client_CreateViewOfDeviceBuffer_Args {
        client: *mut PJRT_Client,
        device_buffer_ptr: *mut c_void,
        dims: *const i64,
        num_dims: usize,
        element_type: PJRT_Buffer_Type,
        layout: *mut PJRT_Buffer_MemoryLayout,
        device: *mut PJRT_Device,
        on_delete_callback: PJRT_OnDeleteCallback,
        on_delete_callback_arg: *mut c_void,
        stream: isize,
        buffer: *mut PJRT_Buffer,
        memory: *mut PJRT_Memory,
    }
    PJRT_Buffer_Destroy_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_ElementType_Args { buffer: *mut PJRT_Buffer, type_ = "type": PJRT_Buffer_Type }
    PJRT_Buffer_Dimensions_Args { buffer: *mut PJRT_Buffer, dims: *const i64, num_dims: usize }
    PJRT_Buffer_ToHostBuffer_Args {
        src: *mut PJRT_Buffer,
        host_layout: *mut PJRT_Buffer_MemoryLayout,
        dst: *mut c_void,
        dst_size: usize,
        event: *mut PJRT_Event,
    }
    PJRT_Buffer_OnDeviceSizeInBytes_Args { buffer: *mut PJRT_Buffer, on_device_size_in_bytes: usize }
    PJRT_Buffer_Delete_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_IsDeleted_Args { buffer: *mut PJRT_Buffer, is_deleted: bool }
    PJRT_Buffer_CopyToDevice_Args { buffer: *mut PJRT_Buffer, dst_device: *mut PJRT_Device, dst_buffer: *mut PJRT_Buffer }
    PJRT_Buffer_CopyToMemory_Args { buffer: *mut PJRT_Buffer, dst_memory: *mut PJRT_Memory, dst_buffer: *mut PJRT_Buffer }
    PJRT_Buffer_IsOnCpu_Args { buffer: *mut PJRT_Buffer, is_on_cpu: bool }
    PJRT_Buffer_Device_Args { buffer: *mut PJRT_Buffer, device: *mut PJRT_Device }
    PJRT_Buffer_Memory_Args { buffer: *mut PJRT_Buffer, memory: *mut PJRT_Memory }
    PJRT_Buffer_ReadyEvent_Args { buffer: *mut PJRT_Buffer, event: *mut PJRT_Event }
    PJRT_Buffer_UnsafePointer_Args { buffer: *mut PJRT_Buffer, buffer_pointer: usize }
    PJRT_Buffer_IncreaseExternalReferenceCount_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_DecreaseExternalReferenceCount_Args { buffer: *mut PJRT_Buffer }
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args { buffer: *mut PJRT_Buffer, device_memory_ptr: *mut c_void }
}

/// `PJRT_Buffer_MemoryLayout` (the C anonymous union is the `u` field).
#[repr(C)]
pub struct PJRT_Buffer_MemoryLayout {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub u: PJRT_Buffer_MemoryLayout_Union,
    pub type_: PJRT_Buffer_MemoryLayout_Type,
}
// SAFETY: repr(C), starts with usize, zero is valid for all fields.
unsafe impl PjrtStruct for PJRT_Buffer_MemoryLayout {}

/// The anonymous union of `PJRT_Buffer_MemoryLayout`.
#[repr(C)]
pub union PJRT_Buffer_MemoryLayout_Union {
    pub tiled: std::mem::ManuallyDrop<PJRT_Buffer_MemoryLayout_Tiled>,
    pub strides: std::mem::ManuallyDrop<PJRT_Buffer_MemoryLayout_Strides>,
}

/// Layouts of the hand-written (non-macro) structs in this module.
pub fn buffer_manual_layouts() -> &'static [StructLayout] {
    use std::mem::{offset_of, size_of};
    const L: &[StructLayout] = &[StructLayout {
        name: "PJRT_Buffer_MemoryLayout",
        size: size_of::<PJRT_Buffer_MemoryLayout>(),
        fields: &[
            (
                "struct_size",
                offset_of!(PJRT_Buffer_MemoryLayout, struct_size),
            ),
            (
                "extension_start",
                offset_of!(PJRT_Buffer_MemoryLayout, extension_start),
            ),
            ("tiled", offset_of!(PJRT_Buffer_MemoryLayout, u)),
            ("strides", offset_of!(PJRT_Buffer_MemoryLayout, u)),
            ("type", offset_of!(PJRT_Buffer_MemoryLayout, type_)),
        ],
    }];
    L
}
