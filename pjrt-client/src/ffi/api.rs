//! The `PJRT_Api` function table.

use super::*;

/// Declares `PJRT_Api` with the given function slots (in C order) and its
/// layout entry.
macro_rules! pjrt_api {
    ($( $f:ident : $ty:ty ),* $(,)?) => {
        /// `PJRT_Api`: the plugin's function table. Only the prefix covered
        /// by the plugin's `struct_size` may be read.
        #[repr(C)]
        pub struct PJRT_Api {
            pub struct_size: usize,
            pub extension_start: *mut PJRT_Extension_Base,
            pub pjrt_api_version: PJRT_Api_Version,
            $( pub $f: $ty, )*
        }
        // SAFETY: repr(C), starts with usize; all-zero is valid (null
        // pointers, zero ints and `None` function pointers).
        unsafe impl PjrtStruct for PJRT_Api {}

        /// Layout of [`PJRT_Api`].
        pub fn api_layout() -> StructLayout {
            use std::mem::{offset_of, size_of};
            const FIELDS: &[(&str, usize)] = &[
                ("struct_size", offset_of!(PJRT_Api, struct_size)),
                ("extension_start", offset_of!(PJRT_Api, extension_start)),
                ("pjrt_api_version", offset_of!(PJRT_Api, pjrt_api_version)),
                $( (stringify!($f), offset_of!(PJRT_Api, $f)), )*
            ];
            StructLayout { name: "PJRT_Api", size: size_of::<PJRT_Api>(), fields: FIELDS }
        }
    };
}

type U = PjrtUnusedFn;

pjrt_api! {
    PJRT_Error_Destroy: PjrtVoidFn<PJRT_Error_Destroy_Args>,
    PJRT_Error_Message: PjrtVoidFn<PJRT_Error_Message_Args>,
    PJRT_Error_GetCode: PjrtFn<PJRT_Error_GetCode_Args>,
    PJRT_Plugin_Initialize: PjrtFn<PJRT_Plugin_Initialize_Args>,
    PJRT_Plugin_Attributes: PjrtFn<PJRT_Plugin_Attributes_Args>,
    PJRT_Event_Destroy: PjrtFn<PJRT_Event_Destroy_Args>,
    PJRT_Event_IsReady: PjrtFn<PJRT_Event_IsReady_Args>,
    PJRT_Event_Error: PjrtFn<PJRT_Event_Error_Args>,
    PJRT_Event_Await: PjrtFn<PJRT_Event_Await_Args>,
    PJRT_Event_OnReady: PjrtFn<PJRT_Event_OnReady_Args>,
    PJRT_Client_Create: PjrtFn<PJRT_Client_Create_Args>,
    PJRT_Client_Destroy: PjrtFn<PJRT_Client_Destroy_Args>,
    PJRT_Client_PlatformName: PjrtFn<PJRT_Client_PlatformName_Args>,
    PJRT_Client_ProcessIndex: PjrtFn<PJRT_Client_ProcessIndex_Args>,
    PJRT_Client_PlatformVersion: PjrtFn<PJRT_Client_PlatformVersion_Args>,
    PJRT_Client_Devices: PjrtFn<PJRT_Client_Devices_Args>,
    PJRT_Client_AddressableDevices: PjrtFn<PJRT_Client_AddressableDevices_Args>,
    PJRT_Client_LookupDevice: PjrtFn<PJRT_Client_LookupDevice_Args>,
    PJRT_Client_LookupAddressableDevice: U,
    PJRT_Client_AddressableMemories: PjrtFn<PJRT_Client_AddressableMemories_Args>,
    PJRT_Client_Compile: PjrtFn<PJRT_Client_Compile_Args>,
    PJRT_Client_DefaultDeviceAssignment: PjrtFn<PJRT_Client_DefaultDeviceAssignment_Args>,
    PJRT_Client_BufferFromHostBuffer: PjrtFn<PJRT_Client_BufferFromHostBuffer_Args>,
    PJRT_DeviceDescription_Id: PjrtFn<PJRT_DeviceDescription_Id_Args>,
    PJRT_DeviceDescription_ProcessIndex: PjrtFn<PJRT_DeviceDescription_ProcessIndex_Args>,
    PJRT_DeviceDescription_Attributes: PjrtFn<PJRT_DeviceDescription_Attributes_Args>,
    PJRT_DeviceDescription_Kind: PjrtFn<PJRT_DeviceDescription_Kind_Args>,
    PJRT_DeviceDescription_DebugString: PjrtFn<PJRT_DeviceDescription_DebugString_Args>,
    PJRT_DeviceDescription_ToString: PjrtFn<PJRT_DeviceDescription_ToString_Args>,
    PJRT_Device_GetDescription: PjrtFn<PJRT_Device_GetDescription_Args>,
    PJRT_Device_IsAddressable: PjrtFn<PJRT_Device_IsAddressable_Args>,
    PJRT_Device_LocalHardwareId: PjrtFn<PJRT_Device_LocalHardwareId_Args>,
    PJRT_Device_AddressableMemories: PjrtFn<PJRT_Device_AddressableMemories_Args>,
    PJRT_Device_DefaultMemory: PjrtFn<PJRT_Device_DefaultMemory_Args>,
    PJRT_Device_MemoryStats: U,
    PJRT_Memory_Id: PjrtFn<PJRT_Memory_Id_Args>,
    PJRT_Memory_Kind: PjrtFn<PJRT_Memory_Kind_Args>,
    PJRT_Memory_DebugString: PjrtFn<PJRT_Memory_DebugString_Args>,
    PJRT_Memory_ToString: PjrtFn<PJRT_Memory_ToString_Args>,
    PJRT_Memory_AddressableByDevices: PjrtFn<PJRT_Memory_AddressableByDevices_Args>,
    PJRT_Executable_Destroy: PjrtFn<PJRT_Executable_Destroy_Args>,
    PJRT_Executable_Name: PjrtFn<PJRT_Executable_Name_Args>,
    PJRT_Executable_NumReplicas: PjrtFn<PJRT_Executable_NumReplicas_Args>,
    PJRT_Executable_NumPartitions: PjrtFn<PJRT_Executable_NumPartitions_Args>,
    PJRT_Executable_NumOutputs: PjrtFn<PJRT_Executable_NumOutputs_Args>,
    PJRT_Executable_SizeOfGeneratedCodeInBytes: PjrtFn<PJRT_Executable_SizeOfGeneratedCodeInBytes_Args>,
    PJRT_Executable_GetCostAnalysis: PjrtFn<PJRT_Executable_GetCostAnalysis_Args>,
    PJRT_Executable_OutputMemoryKinds: PjrtFn<PJRT_Executable_OutputMemoryKinds_Args>,
    PJRT_Executable_OptimizedProgram: PjrtFn<PJRT_Executable_OptimizedProgram_Args>,
    PJRT_Executable_Serialize: PjrtFn<PJRT_Executable_Serialize_Args>,
    PJRT_LoadedExecutable_Destroy: PjrtFn<PJRT_LoadedExecutable_Destroy_Args>,
    PJRT_LoadedExecutable_GetExecutable: PjrtFn<PJRT_LoadedExecutable_GetExecutable_Args>,
    PJRT_LoadedExecutable_AddressableDevices: PjrtFn<PJRT_LoadedExecutable_AddressableDevices_Args>,
    PJRT_LoadedExecutable_Delete: PjrtFn<PJRT_LoadedExecutable_Delete_Args>,
    PJRT_LoadedExecutable_IsDeleted: PjrtFn<PJRT_LoadedExecutable_IsDeleted_Args>,
    PJRT_LoadedExecutable_Execute: PjrtFn<PJRT_LoadedExecutable_Execute_Args>,
    PJRT_Executable_DeserializeAndLoad: PjrtFn<PJRT_Executable_DeserializeAndLoad_Args>,
    PJRT_LoadedExecutable_Fingerprint: U,
    PJRT_Buffer_Destroy: PjrtFn<PJRT_Buffer_Destroy_Args>,
    PJRT_Buffer_ElementType: PjrtFn<PJRT_Buffer_ElementType_Args>,
    PJRT_Buffer_Dimensions: PjrtFn<PJRT_Buffer_Dimensions_Args>,
    PJRT_Buffer_UnpaddedDimensions: U,
    PJRT_Buffer_DynamicDimensionIndices: U,
    PJRT_Buffer_GetMemoryLayout: U,
    PJRT_Buffer_OnDeviceSizeInBytes: PjrtFn<PJRT_Buffer_OnDeviceSizeInBytes_Args>,
    PJRT_Buffer_Device: PjrtFn<PJRT_Buffer_Device_Args>,
    PJRT_Buffer_Memory: PjrtFn<PJRT_Buffer_Memory_Args>,
    PJRT_Buffer_Delete: PjrtFn<PJRT_Buffer_Delete_Args>,
    PJRT_Buffer_IsDeleted: PjrtFn<PJRT_Buffer_IsDeleted_Args>,
    PJRT_Buffer_CopyToDevice: PjrtFn<PJRT_Buffer_CopyToDevice_Args>,
    PJRT_Buffer_ToHostBuffer: PjrtFn<PJRT_Buffer_ToHostBuffer_Args>,
    PJRT_Buffer_IsOnCpu: PjrtFn<PJRT_Buffer_IsOnCpu_Args>,
    PJRT_Buffer_ReadyEvent: PjrtFn<PJRT_Buffer_ReadyEvent_Args>,
    PJRT_Buffer_UnsafePointer: PjrtFn<PJRT_Buffer_UnsafePointer_Args>,
    PJRT_Buffer_IncreaseExternalReferenceCount: PjrtFn<PJRT_Buffer_IncreaseExternalReferenceCount_Args>,
    PJRT_Buffer_DecreaseExternalReferenceCount: PjrtFn<PJRT_Buffer_DecreaseExternalReferenceCount_Args>,
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer: PjrtFn<PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args>,
    PJRT_CopyToDeviceStream_Destroy: U,
    PJRT_CopyToDeviceStream_AddChunk: U,
    PJRT_CopyToDeviceStream_TotalBytes: U,
    PJRT_CopyToDeviceStream_GranuleSize: U,
    PJRT_CopyToDeviceStream_CurrentBytes: U,
    PJRT_TopologyDescription_Create: PjrtFn<PJRT_TopologyDescription_Create_Args>,
    PJRT_TopologyDescription_Destroy: PjrtFn<PJRT_TopologyDescription_Destroy_Args>,
    PJRT_TopologyDescription_PlatformName: PjrtFn<PJRT_TopologyDescription_PlatformName_Args>,
    PJRT_TopologyDescription_PlatformVersion: PjrtFn<PJRT_TopologyDescription_PlatformVersion_Args>,
    PJRT_TopologyDescription_GetDeviceDescriptions: PjrtFn<PJRT_TopologyDescription_GetDeviceDescriptions_Args>,
    PJRT_TopologyDescription_Serialize: U,
    PJRT_TopologyDescription_Attributes: PjrtFn<PJRT_TopologyDescription_Attributes_Args>,
    PJRT_Compile: PjrtFn<PJRT_Compile_Args>,
    PJRT_Executable_OutputElementTypes: PjrtFn<PJRT_Executable_OutputElementTypes_Args>,
    PJRT_Executable_OutputDimensions: PjrtFn<PJRT_Executable_OutputDimensions_Args>,
    PJRT_Buffer_CopyToMemory: PjrtFn<PJRT_Buffer_CopyToMemory_Args>,
    PJRT_Client_CreateViewOfDeviceBuffer: PjrtFn<PJRT_Client_CreateViewOfDeviceBuffer_Args>,
    PJRT_Executable_Fingerprint: PjrtFn<PJRT_Executable_Fingerprint_Args>,
    PJRT_Client_TopologyDescription: U,
    PJRT_Executable_GetCompiledMemoryStats: PjrtFn<PJRT_Executable_GetCompiledMemoryStats_Args>,
    PJRT_Memory_Kind_Id: U,
    PJRT_ExecuteContext_Create: U,
    PJRT_ExecuteContext_Destroy: U,
    PJRT_Buffer_CopyRawToHost: U,
    PJRT_AsyncHostToDeviceTransferManager_Destroy: U,
    PJRT_AsyncHostToDeviceTransferManager_TransferData: U,
    PJRT_Client_CreateBuffersForAsyncHostToDevice: U,
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer: U,
    PJRT_AsyncHostToDeviceTransferManager_Device: U,
    PJRT_AsyncHostToDeviceTransferManager_BufferCount: U,
    PJRT_AsyncHostToDeviceTransferManager_BufferSize: U,
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError: U,
    PJRT_AsyncHostToDeviceTransferManager_AddMetadata: U,
    PJRT_Client_DmaMap: U,
    PJRT_Client_DmaUnmap: U,
    PJRT_Client_CreateUninitializedBuffer: U,
    PJRT_Client_UpdateGlobalProcessInfo: U,
    PJRT_TopologyDescription_Deserialize: U,
    PJRT_Client_CreateAliasBuffer: U,
    PJRT_Client_FulfillAliasBuffer: U,
    PJRT_LoadedExecutable_GetDeviceAssignment: U,
}
