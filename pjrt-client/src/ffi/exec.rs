//! Executable, loaded executable and execute structs.

use super::*;
use std::os::raw::{c_char, c_int};

/// `serialized_executable_deleter` of `PJRT_Executable_Serialize_Args`.
pub type PJRT_SerializedExecutableDeleter =
    Option<unsafe extern "C" fn(exec: *mut PJRT_SerializedExecutable)>;

pjrt_structs! { EXEC_LAYOUTS;
    PJRT_Executable_Destroy_Args { executable: *mut PJRT_Executable }
    PJRT_LoadedExecutable_Destroy_Args { executable: *mut PJRT_LoadedExecutable }
    PJRT_LoadedExecutable_GetExecutable_Args {
        loaded_executable: *mut PJRT_LoadedExecutable,
        executable: *mut PJRT_Executable,
    }
    PJRT_Executable_Name_Args { executable: *mut PJRT_Executable, executable_name: *const c_char, executable_name_size: usize }
    PJRT_Executable_NumReplicas_Args { executable: *mut PJRT_Executable, num_replicas: usize }
    PJRT_Executable_NumPartitions_Args { executable: *mut PJRT_Executable, num_partitions: usize }
    PJRT_LoadedExecutable_AddressableDevices_Args {
        executable: *mut PJRT_LoadedExecutable,
        addressable_devices: *const *mut PJRT_Device,
        num_addressable_devices: usize,
    }
    PJRT_Executable_OptimizedProgram_Args { executable: *mut PJRT_Executable, program: *mut PJRT_Program }
    PJRT_LoadedExecutable_Delete_Args { executable: *mut PJRT_LoadedExecutable }
    PJRT_LoadedExecutable_IsDeleted_Args { executable: *mut PJRT_LoadedExecutable, is_deleted: bool }
    PJRT_ExecuteOptions {
        send_callbacks: *mut *mut PJRT_SendCallbackInfo,
        recv_callbacks: *mut *mut PJRT_RecvCallbackInfo,
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
    PJRT_Executable_NumOutputs_Args { executable: *mut PJRT_Executable, num_outputs: usize }
    PJRT_Executable_SizeOfGeneratedCodeInBytes_Args { executable: *mut PJRT_Executable, size_in_bytes: i64 }
    PJRT_Executable_Fingerprint_Args {
        executable: *mut PJRT_Executable,
        executable_fingerprint: *const c_char,
        executable_fingerprint_size: usize,
    }
    PJRT_Executable_GetCostAnalysis_Args {
        executable: *mut PJRT_Executable,
        num_properties: usize,
        properties: *const PJRT_NamedValue,
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
    PJRT_Executable_OutputMemoryKinds_Args {
        executable: *mut PJRT_Executable,
        num_outputs: usize,
        memory_kinds: *const *const c_char,
        memory_kind_sizes: *const usize,
    }
    PJRT_Executable_Serialize_Args {
        executable: *const PJRT_Executable,
        serialized_bytes: *const c_char,
        serialized_bytes_size: usize,
        serialized_executable: *mut PJRT_SerializedExecutable,
        serialized_executable_deleter: PJRT_SerializedExecutableDeleter,
    }
    PJRT_Executable_DeserializeAndLoad_Args {
        client: *mut PJRT_Client,
        serialized_executable: *const c_char,
        serialized_executable_size: usize,
        loaded_executable: *mut PJRT_LoadedExecutable,
        overridden_serialized_compile_options: *const c_char,
        overridden_serialized_compile_options_size: usize,
    }
}
