//! [`Device`] and [`Memory`] handles (owned by their client).

use crate::api::str_from_raw;
use crate::client::Client;
use crate::error::Result;
use crate::ffi::{self, PjrtStruct};
use crate::pjrt_call;

/// An addressable device. Keeps its client alive.
#[derive(Clone)]
pub struct Device {
    pub(crate) client: Client,
    pub(crate) raw: *mut ffi::PJRT_Device,
}

// SAFETY: device handles are immutable, client-owned and thread-safe.
unsafe impl Send for Device {}
// SAFETY: see above.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.to_string_lossy())
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Device {
    pub(crate) fn new(client: Client, raw: *mut ffi::PJRT_Device) -> Self {
        Device { client, raw }
    }

    /// Raw `PJRT_Device*`.
    pub fn raw(&self) -> *mut ffi::PJRT_Device {
        self.raw
    }

    /// The owning client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn description(&self) -> Result<*mut ffi::PJRT_DeviceDescription> {
        let mut a = ffi::PJRT_Device_GetDescription_Args::new();
        a.device = self.raw;
        // SAFETY: valid device of a live client.
        unsafe { pjrt_call!(self.client.api(), PJRT_Device_GetDescription, &mut a)? };
        Ok(a.device_description)
    }

    /// Global device id.
    pub fn id(&self) -> Result<i32> {
        let mut a = ffi::PJRT_DeviceDescription_Id_Args::new();
        a.device_description = self.description()?;
        // SAFETY: description is owned by the device.
        unsafe { pjrt_call!(self.client.api(), PJRT_DeviceDescription_Id, &mut a)? };
        Ok(a.id)
    }

    /// Device kind string (e.g. `cpu`, GPU model name).
    pub fn kind(&self) -> Result<String> {
        let mut a = ffi::PJRT_DeviceDescription_Kind_Args::new();
        a.device_description = self.description()?;
        // SAFETY: description is owned by the device; string copied.
        unsafe {
            pjrt_call!(self.client.api(), PJRT_DeviceDescription_Kind, &mut a)?;
            Ok(str_from_raw(a.device_kind, a.device_kind_size))
        }
    }

    /// Short user-facing description, e.g. `CpuDevice(id=0)`.
    pub fn to_string_lossy(&self) -> String {
        let f = || -> Result<String> {
            let mut a = ffi::PJRT_DeviceDescription_ToString_Args::new();
            a.device_description = self.description()?;
            // SAFETY: description is owned by the device; string copied.
            unsafe {
                pjrt_call!(self.client.api(), PJRT_DeviceDescription_ToString, &mut a)?;
                Ok(str_from_raw(a.to_string, a.to_string_size))
            }
        };
        f().unwrap_or_else(|_| format!("{:p}", self.raw))
    }

    /// Local hardware id (e.g. CUDA ordinal), -1 if undefined.
    pub fn local_hardware_id(&self) -> Result<i32> {
        let mut a = ffi::PJRT_Device_LocalHardwareId_Args::new();
        a.device = self.raw;
        // SAFETY: valid device.
        unsafe { pjrt_call!(self.client.api(), PJRT_Device_LocalHardwareId, &mut a)? };
        Ok(a.local_hardware_id)
    }

    /// The device's default memory space.
    pub fn default_memory(&self) -> Result<Memory> {
        let mut a = ffi::PJRT_Device_DefaultMemory_Args::new();
        a.device = self.raw;
        // SAFETY: valid device.
        unsafe { pjrt_call!(self.client.api(), PJRT_Device_DefaultMemory, &mut a)? };
        Ok(Memory {
            client: self.client.clone(),
            raw: a.memory,
        })
    }

    /// All memories the device can address.
    pub fn memories(&self) -> Result<Vec<Memory>> {
        let mut a = ffi::PJRT_Device_AddressableMemories_Args::new();
        a.device = self.raw;
        // SAFETY: valid device; the array lives as long as the device.
        unsafe {
            pjrt_call!(self.client.api(), PJRT_Device_AddressableMemories, &mut a)?;
            if a.memories.is_null() {
                return Ok(Vec::new());
            }
            Ok(std::slice::from_raw_parts(a.memories, a.num_memories)
                .iter()
                .map(|&m| Memory {
                    client: self.client.clone(),
                    raw: m,
                })
                .collect())
        }
    }
}

/// A memory space of a device (client-owned).
#[derive(Clone)]
pub struct Memory {
    pub(crate) client: Client,
    pub(crate) raw: *mut ffi::PJRT_Memory,
}

// SAFETY: memory handles are immutable, client-owned and thread-safe.
unsafe impl Send for Memory {}
// SAFETY: see above.
unsafe impl Sync for Memory {}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Memory({})", self.kind().unwrap_or_default())
    }
}

impl Memory {
    /// Raw `PJRT_Memory*`.
    pub fn raw(&self) -> *mut ffi::PJRT_Memory {
        self.raw
    }

    /// Memory kind (e.g. `device`, `pinned_host`, `unpinned_host`).
    pub fn kind(&self) -> Result<String> {
        let mut a = ffi::PJRT_Memory_Kind_Args::new();
        a.memory = self.raw;
        // SAFETY: valid memory; string copied.
        unsafe {
            pjrt_call!(self.client.api(), PJRT_Memory_Kind, &mut a)?;
            Ok(str_from_raw(a.kind, a.kind_size))
        }
    }

    /// Memory id.
    pub fn id(&self) -> Result<i32> {
        let mut a = ffi::PJRT_Memory_Id_Args::new();
        a.memory = self.raw;
        // SAFETY: valid memory.
        unsafe { pjrt_call!(self.client.api(), PJRT_Memory_Id, &mut a)? };
        Ok(a.id)
    }
}
