//! Topology description, deviceless compile (`PJRT_Compile`) and compiled
//! memory statistics structs.
//!
//! Layouts follow `pjrt_c_api.h` 0.81 (checked by `tests/layout.rs`); the
//! same fields exist unchanged in the 0.112 and 0.117 headers used by
//! libtpu 0.0.42.1 / 0.0.52 and jax-cuda12-pjrt 0.10.2 (newer plugins accept
//! the older, smaller `struct_size` we pass).

use super::*;
use std::os::raw::c_char;

pjrt_structs! { TOPOLOGY_LAYOUTS;
    PJRT_TopologyDescription_Create_Args {
        topology_name: *const c_char,
        topology_name_size: usize,
        create_options: *const PJRT_NamedValue,
        num_options: usize,
        topology: *mut PJRT_TopologyDescription,
    }
    PJRT_TopologyDescription_Destroy_Args { topology: *mut PJRT_TopologyDescription }
    PJRT_TopologyDescription_PlatformName_Args {
        topology: *const PJRT_TopologyDescription,
        platform_name: *const c_char,
        platform_name_size: usize,
    }
    PJRT_TopologyDescription_PlatformVersion_Args {
        topology: *mut PJRT_TopologyDescription,
        platform_version: *const c_char,
        platform_version_size: usize,
    }
    PJRT_TopologyDescription_GetDeviceDescriptions_Args {
        topology: *const PJRT_TopologyDescription,
        descriptions: *const *mut PJRT_DeviceDescription,
        num_descriptions: usize,
    }
    PJRT_TopologyDescription_Attributes_Args {
        topology: *mut PJRT_TopologyDescription,
        attributes: *const PJRT_NamedValue,
        num_attributes: usize,
    }
    PJRT_Compile_Args {
        topology: *const PJRT_TopologyDescription,
        program: *const PJRT_Program,
        compile_options: *const c_char,
        compile_options_size: usize,
        client: *mut PJRT_Client,
        executable: *mut PJRT_Executable,
    }
    PJRT_Executable_GetCompiledMemoryStats_Args {
        executable: *mut PJRT_Executable,
        generated_code_size_in_bytes: i64,
        argument_size_in_bytes: i64,
        output_size_in_bytes: i64,
        alias_size_in_bytes: i64,
        temp_size_in_bytes: i64,
        host_generated_code_size_in_bytes: i64,
        host_argument_size_in_bytes: i64,
        host_output_size_in_bytes: i64,
        host_alias_size_in_bytes: i64,
        host_temp_size_in_bytes: i64,
        peak_memory_in_bytes: i64,
    }
}
