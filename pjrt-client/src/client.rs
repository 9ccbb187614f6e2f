//! [`Client`]: a PJRT client plus typed creation options.

use crate::api::{str_from_raw, Api, Plugin};
use crate::device::Device;
use crate::error::Result;
use crate::ffi::{self, PjrtStruct};
use crate::pjrt_call;
use std::sync::Arc;

/// A typed `PJRT_NamedValue` value.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    /// String value.
    String(String),
    /// 64-bit integer.
    Int64(i64),
    /// List of 64-bit integers.
    Int64List(Vec<i64>),
    /// 32-bit float.
    Float(f32),
    /// Boolean.
    Bool(bool),
}

/// Named options for `PJRT_Client_Create` (platform specific).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientOptions {
    /// `(name, value)` pairs passed verbatim as `PJRT_NamedValue`s.
    pub values: Vec<(String, OptionValue)>,
}

impl ClientOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets an arbitrary named option.
    pub fn set(mut self, name: impl Into<String>, value: OptionValue) -> Self {
        let name = name.into();
        self.values.retain(|(n, _)| *n != name);
        self.values.push((name, value));
        self
    }
    /// CPU: number of virtual CPU devices (`cpu_device_count`).
    pub fn cpu_device_count(self, n: i64) -> Self {
        self.set("cpu_device_count", OptionValue::Int64(n))
    }
    /// CUDA/ROCm: fraction of GPU memory to use (`memory_fraction`).
    pub fn memory_fraction(self, f: f32) -> Self {
        self.set("memory_fraction", OptionValue::Float(f))
    }
    /// CUDA/ROCm: preallocate the memory fraction (`preallocate`).
    pub fn preallocate(self, b: bool) -> Self {
        self.set("preallocate", OptionValue::Bool(b))
    }
    /// CUDA/ROCm: allocator kind (`allocator`: default, platform, bfc, cuda_async).
    pub fn allocator(self, kind: &str) -> Self {
        self.set("allocator", OptionValue::String(kind.into()))
    }
    /// CUDA/ROCm: visible device ordinals (`visible_devices`).
    pub fn visible_devices(self, ids: &[i64]) -> Self {
        self.set("visible_devices", OptionValue::Int64List(ids.to_vec()))
    }
    /// Multi-node: this node's id (`node_id`).
    pub fn node_id(self, id: i64) -> Self {
        self.set("node_id", OptionValue::Int64(id))
    }
    /// Multi-node: number of nodes (`num_nodes`).
    pub fn num_nodes(self, n: i64) -> Self {
        self.set("num_nodes", OptionValue::Int64(n))
    }
}

/// Builds `PJRT_NamedValue`s that borrow from `values` (keep it alive).
pub(crate) fn to_named_values(values: &[(String, OptionValue)]) -> Vec<ffi::PJRT_NamedValue> {
    values
        .iter()
        .map(|(name, v)| {
            let mut nv = ffi::PJRT_NamedValue::new();
            nv.name = name.as_ptr() as *const _;
            nv.name_size = name.len();
            match v {
                OptionValue::String(s) => {
                    nv.type_ = ffi::PJRT_NamedValue_kString;
                    nv.value.string_value = s.as_ptr() as *const _;
                    nv.value_size = s.len();
                }
                OptionValue::Int64(i) => {
                    nv.type_ = ffi::PJRT_NamedValue_kInt64;
                    nv.value.int64_value = *i;
                    nv.value_size = 1;
                }
                OptionValue::Int64List(l) => {
                    nv.type_ = ffi::PJRT_NamedValue_kInt64List;
                    nv.value.int64_array_value = l.as_ptr();
                    nv.value_size = l.len();
                }
                OptionValue::Float(f) => {
                    nv.type_ = ffi::PJRT_NamedValue_kFloat;
                    nv.value.float_value = *f;
                    nv.value_size = 1;
                }
                OptionValue::Bool(b) => {
                    nv.type_ = ffi::PJRT_NamedValue_kBool;
                    nv.value.bool_value = *b;
                    nv.value_size = 1;
                }
            }
            nv
        })
        .collect()
}

/// Copies `n` named values from plugin memory.
///
/// # Safety
/// `ptr` must be null or point to `n` valid `PJRT_NamedValue`s.
pub(crate) unsafe fn read_named_values(
    ptr: *const ffi::PJRT_NamedValue,
    n: usize,
) -> Vec<(String, OptionValue)> {
    if ptr.is_null() {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    let vals = unsafe { std::slice::from_raw_parts(ptr, n) };
    vals.iter()
        .filter_map(|nv| {
            // SAFETY: the union member read matches `type_`; pointers come
            // with their sizes from the plugin.
            unsafe {
                let name = str_from_raw(nv.name, nv.name_size);
                let v = match nv.type_ {
                    ffi::PJRT_NamedValue_kString => {
                        OptionValue::String(str_from_raw(nv.value.string_value, nv.value_size))
                    }
                    ffi::PJRT_NamedValue_kInt64 => OptionValue::Int64(nv.value.int64_value),
                    ffi::PJRT_NamedValue_kInt64List => {
                        let p = nv.value.int64_array_value;
                        if p.is_null() {
                            OptionValue::Int64List(Vec::new())
                        } else {
                            OptionValue::Int64List(
                                std::slice::from_raw_parts(p, nv.value_size).to_vec(),
                            )
                        }
                    }
                    ffi::PJRT_NamedValue_kFloat => OptionValue::Float(nv.value.float_value),
                    ffi::PJRT_NamedValue_kBool => OptionValue::Bool(nv.value.bool_value),
                    _ => return None,
                };
                Some((name, v))
            }
        })
        .collect()
}

pub(crate) struct ClientInner {
    pub(crate) plugin: Plugin,
    pub(crate) raw: *mut ffi::PJRT_Client,
    pub(crate) platform_name: String,
    pub(crate) platform_version: String,
    pub(crate) addressable: Vec<*mut ffi::PJRT_Device>,
    pub(crate) host_kernels: crate::HostKernels,
}

// SAFETY: PJRT clients are thread-safe; raw pointers are owned handles.
unsafe impl Send for ClientInner {}
// SAFETY: see above.
unsafe impl Sync for ClientInner {}

impl Drop for ClientInner {
    fn drop(&mut self) {
        let mut a = ffi::PJRT_Client_Destroy_Args::new();
        a.client = self.raw;
        // SAFETY: we own `raw`; every child object holds an Arc to us, so
        // nothing uses the client after this.
        if let Err(e) = unsafe { pjrt_call!(self.plugin.api(), PJRT_Client_Destroy, &mut a) } {
            tracing::warn!(error = %e, "PJRT_Client_Destroy failed");
        }
    }
}

/// A PJRT client. Cheap to clone; all devices, buffers and executables keep
/// it alive.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("platform", &self.inner.platform_name)
            .field("devices", &self.inner.addressable.len())
            .finish()
    }
}

impl Client {
    /// Creates a client with `options` (see [`ClientOptions`]).
    pub fn new(plugin: &Plugin, options: &ClientOptions) -> Result<Client> {
        let nvs = to_named_values(&options.values);
        let mut a = ffi::PJRT_Client_Create_Args::new();
        a.create_options = nvs.as_ptr();
        a.num_options = nvs.len();
        // SAFETY: `nvs` and the strings it points to outlive the call.
        unsafe { pjrt_call!(plugin.api(), PJRT_Client_Create, &mut a)? };
        let raw = a.client;
        let mut inner = ClientInner {
            plugin: plugin.clone(),
            raw,
            platform_name: String::new(),
            platform_version: String::new(),
            addressable: Vec::new(),
            host_kernels: crate::HostKernels::default(),
        };
        let api = plugin.api();
        let mut pn = ffi::PJRT_Client_PlatformName_Args::new();
        pn.client = raw;
        // SAFETY: valid client; the returned string is owned by the client.
        unsafe {
            pjrt_call!(api, PJRT_Client_PlatformName, &mut pn)?;
            inner.platform_name = str_from_raw(pn.platform_name, pn.platform_name_size);
        }
        let mut pv = ffi::PJRT_Client_PlatformVersion_Args::new();
        pv.client = raw;
        // SAFETY: as above.
        unsafe {
            if pjrt_call!(api, PJRT_Client_PlatformVersion, &mut pv).is_ok() {
                inner.platform_version =
                    str_from_raw(pv.platform_version, pv.platform_version_size);
            }
        }
        let mut ad = ffi::PJRT_Client_AddressableDevices_Args::new();
        ad.client = raw;
        // SAFETY: the device array is owned by the client and lives with it.
        unsafe {
            pjrt_call!(api, PJRT_Client_AddressableDevices, &mut ad)?;
            if !ad.addressable_devices.is_null() {
                inner.addressable =
                    std::slice::from_raw_parts(ad.addressable_devices, ad.num_addressable_devices)
                        .to_vec();
            }
        }
        inner.host_kernels = if inner.platform_name == "cpu" {
            crate::host_kernels::ensure_registered(api)
        } else {
            crate::HostKernels {
                gemm: false,
                reason: Some(format!(
                    "no host kernels for platform {:?}",
                    inner.platform_name
                )),
            }
        };
        tracing::info!(platform = %inner.platform_name, devices = inner.addressable.len(), "created PJRT client");
        Ok(Client {
            inner: Arc::new(inner),
        })
    }

    /// Discovers a plugin and creates a CPU-style client with `options`.
    pub fn discover(options: &ClientOptions) -> Result<Client> {
        Client::new(&Plugin::discover()?, options)
    }

    /// The host kernels registered with this client's plugin (see
    /// [`crate::host_kernels`]).
    pub fn host_kernels(&self) -> &crate::HostKernels {
        &self.inner.host_kernels
    }

    /// The plugin's checked API table.
    pub fn api(&self) -> &Api {
        self.inner.plugin.api()
    }

    /// The plugin.
    pub fn plugin(&self) -> &Plugin {
        &self.inner.plugin
    }

    /// Raw `PJRT_Client*` (owned by this client).
    pub fn raw(&self) -> *mut ffi::PJRT_Client {
        self.inner.raw
    }

    /// Platform name (`cpu`, `cuda`, `tpu`, ...).
    pub fn platform_name(&self) -> &str {
        &self.inner.platform_name
    }

    /// Platform version string.
    pub fn platform_version(&self) -> &str {
        &self.inner.platform_version
    }

    /// Devices this client can issue work to.
    pub fn addressable_devices(&self) -> Vec<Device> {
        self.inner
            .addressable
            .iter()
            .map(|&d| Device::new(self.clone(), d))
            .collect()
    }

    /// The `i`th addressable device.
    pub fn device(&self, i: usize) -> Result<Device> {
        self.inner
            .addressable
            .get(i)
            .map(|&d| Device::new(self.clone(), d))
            .ok_or_else(|| {
                crate::Error::InvalidArgument(format!(
                    "device index {i} out of range ({} addressable devices)",
                    self.inner.addressable.len()
                ))
            })
    }

    /// Number of addressable devices.
    pub fn device_count(&self) -> usize {
        self.inner.addressable.len()
    }

    /// Default device assignment (`[replica][partition]` → device id).
    pub fn default_device_assignment(
        &self,
        replicas: usize,
        partitions: usize,
    ) -> Result<Vec<Vec<i32>>> {
        let n = replicas * partitions;
        let mut out = vec![0i32; n];
        let mut a = ffi::PJRT_Client_DefaultDeviceAssignment_Args::new();
        a.client = self.raw();
        a.num_replicas = replicas as i32;
        a.num_partitions = partitions as i32;
        a.default_assignment_size = n;
        a.default_assignment = out.as_mut_ptr();
        // SAFETY: `out` has room for replicas*partitions ints.
        unsafe { pjrt_call!(self.api(), PJRT_Client_DefaultDeviceAssignment, &mut a)? };
        Ok(out.chunks(partitions.max(1)).map(|c| c.to_vec()).collect())
    }
}
