//! Client, device description, device, memory and program structs.

use super::*;
use std::os::raw::{c_char, c_int, c_void};

pjrt_structs! { CLIENT_LAYOUTS;
    PJRT_Client_Create_Args {
        create_options: *const PJRT_NamedValue,
        num_options: usize,
        kv_get_callback: PjrtUnusedFn,
        kv_get_user_arg: *mut c_void,
        kv_put_callback: PjrtUnusedFn,
        kv_put_user_arg: *mut c_void,
        client: *mut PJRT_Client,
        kv_try_get_callback: PjrtUnusedFn,
        kv_try_get_user_arg: *mut c_void,
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
    PJRT_Client_LookupDevice_Args { client: *mut PJRT_Client, id: c_int, device: *mut PJRT_Device }
    PJRT_Client_AddressableMemories_Args {
        client: *mut PJRT_Client,
        addressable_memories: *const *mut PJRT_Memory,
        num_addressable_memories: usize,
    }
    PJRT_Program { code: *mut c_char, code_size: usize, format: *const c_char, format_size: usize }
    PJRT_Client_Compile_Args {
        client: *mut PJRT_Client,
        program: *const PJRT_Program,
        compile_options: *const c_char,
        compile_options_size: usize,
        executable: *mut PJRT_LoadedExecutable,
    }
    PJRT_Client_DefaultDeviceAssignment_Args {
        client: *mut PJRT_Client,
        num_replicas: c_int,
        num_partitions: c_int,
        default_assignment_size: usize,
        default_assignment: *mut c_int,
    }
    PJRT_DeviceDescription_Id_Args { device_description: *mut PJRT_DeviceDescription, id: c_int }
    PJRT_DeviceDescription_ProcessIndex_Args { device_description: *mut PJRT_DeviceDescription, process_index: c_int }
    PJRT_DeviceDescription_Attributes_Args {
        device_description: *mut PJRT_DeviceDescription,
        num_attributes: usize,
        attributes: *const PJRT_NamedValue,
    }
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
    PJRT_DeviceDescription_ToString_Args {
        device_description: *mut PJRT_DeviceDescription,
        to_string: *const c_char,
        to_string_size: usize,
    }
    PJRT_Device_GetDescription_Args { device: *mut PJRT_Device, device_description: *mut PJRT_DeviceDescription }
    PJRT_Device_IsAddressable_Args { device: *mut PJRT_Device, is_addressable: bool }
    PJRT_Device_LocalHardwareId_Args { device: *mut PJRT_Device, local_hardware_id: c_int }
    PJRT_Device_AddressableMemories_Args { device: *mut PJRT_Device, memories: *const *mut PJRT_Memory, num_memories: usize }
    PJRT_Device_DefaultMemory_Args { device: *mut PJRT_Device, memory: *mut PJRT_Memory }
    PJRT_Memory_Id_Args { memory: *mut PJRT_Memory, id: c_int }
    PJRT_Memory_Kind_Args { memory: *mut PJRT_Memory, kind: *const c_char, kind_size: usize }
    PJRT_Memory_DebugString_Args { memory: *mut PJRT_Memory, debug_string: *const c_char, debug_string_size: usize }
    PJRT_Memory_ToString_Args { memory: *mut PJRT_Memory, to_string: *const c_char, to_string_size: usize }
    PJRT_Memory_AddressableByDevices_Args { memory: *mut PJRT_Memory, devices: *const *mut PJRT_Device, num_devices: usize }
}
