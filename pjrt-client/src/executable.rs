//! Compiled executables: [`LoadedExecutable`] (runnable on a client) and
//! [`Executable`] (the device-independent part: metadata, serialization,
//! optimized program).

use crate::api::{str_from_raw, Plugin};
use crate::buffer::Dims;
use crate::client::Client;
use crate::compile::{CompileOptions, Program};
use crate::device::Device;
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::ffi::{self, PjrtStruct};
use crate::hlo::OptimizedHlo;
use crate::pjrt_call;
use std::sync::{Arc, OnceLock};

/// Element type and dimensions of one array parameter or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayInfo {
    /// Element type.
    pub dtype: ElementType,
    /// Dimensions.
    pub dims: Dims,
}

impl std::fmt::Display for ArrayInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tensor<")?;
        for d in &self.dims {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.dtype)
    }
}

/// An owned `PJRT_Executable` (compiled program metadata).
pub struct Executable {
    plugin: Plugin,
    raw: *mut ffi::PJRT_Executable,
}

// SAFETY: PJRT executables are immutable, thread-safe handles.
unsafe impl Send for Executable {}
// SAFETY: see above.
unsafe impl Sync for Executable {}

impl Drop for Executable {
    fn drop(&mut self) {
        let mut a = ffi::PJRT_Executable_Destroy_Args::new();
        a.executable = self.raw;
        // SAFETY: owned handle, destroyed once.
        if let Err(e) = unsafe { pjrt_call!(self.plugin.api(), PJRT_Executable_Destroy, &mut a) } {
            tracing::warn!(error = %e, "PJRT_Executable_Destroy failed");
        }
    }
}

impl Executable {
    /// Takes ownership of an unloaded executable (from `PJRT_Compile`).
    pub(crate) fn from_owned(plugin: Plugin, raw: *mut ffi::PJRT_Executable) -> Executable {
        Executable { plugin, raw }
    }

    /// Raw `PJRT_Executable*`.
    pub fn raw(&self) -> *mut ffi::PJRT_Executable {
        self.raw
    }

    /// Executable name (usually the module name).
    pub fn name(&self) -> Result<String> {
        let mut a = ffi::PJRT_Executable_Name_Args::new();
        a.executable = self.raw;
        // SAFETY: valid handle; string copied.
        unsafe {
            pjrt_call!(self.plugin.api(), PJRT_Executable_Name, &mut a)?;
            Ok(str_from_raw(a.executable_name, a.executable_name_size))
        }
    }

    /// Number of outputs per device.
    pub fn num_outputs(&self) -> Result<usize> {
        let mut a = ffi::PJRT_Executable_NumOutputs_Args::new();
        a.executable = self.raw;
        // SAFETY: valid handle.
        unsafe { pjrt_call!(self.plugin.api(), PJRT_Executable_NumOutputs, &mut a)? };
        Ok(a.num_outputs)
    }

    /// Number of replicas.
    pub fn num_replicas(&self) -> Result<usize> {
        let mut a = ffi::PJRT_Executable_NumReplicas_Args::new();
        a.executable = self.raw;
        // SAFETY: valid handle.
        unsafe { pjrt_call!(self.plugin.api(), PJRT_Executable_NumReplicas, &mut a)? };
        Ok(a.num_replicas)
    }

    /// Number of partitions.
    pub fn num_partitions(&self) -> Result<usize> {
        let mut a = ffi::PJRT_Executable_NumPartitions_Args::new();
        a.executable = self.raw;
        // SAFETY: valid handle.
        unsafe { pjrt_call!(self.plugin.api(), PJRT_Executable_NumPartitions, &mut a)? };
        Ok(a.num_partitions)
    }

    /// Element types and dimensions of every output.
    pub fn output_info(&self) -> Result<Vec<ArrayInfo>> {
        let api = self.plugin.api();
        let mut t = ffi::PJRT_Executable_OutputElementTypes_Args::new();
        t.executable = self.raw;
        let mut d = ffi::PJRT_Executable_OutputDimensions_Args::new();
        d.executable = self.raw;
        // SAFETY: valid handle; arrays are owned by the executable and copied.
        unsafe {
            pjrt_call!(api, PJRT_Executable_OutputElementTypes, &mut t)?;
            pjrt_call!(api, PJRT_Executable_OutputDimensions, &mut d)?;
            let types = if t.output_types.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(t.output_types, t.num_output_types)
            };
            let sizes = if d.dim_sizes.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(d.dim_sizes, d.num_outputs)
            };
            let total: usize = sizes.iter().sum();
            let dims = if d.dims.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(d.dims, total)
            };
            let mut off = 0;
            let mut out = Vec::with_capacity(types.len());
            for (i, &ty) in types.iter().enumerate() {
                let n = sizes.get(i).copied().unwrap_or(0);
                let dd = dims.get(off..off + n).unwrap_or(&[]);
                off += n;
                out.push(ArrayInfo {
                    dtype: ElementType::from_raw(ty).unwrap_or(ElementType::Invalid),
                    dims: Dims::from_slice(dd),
                });
            }
            Ok(out)
        }
    }

    /// Raw optimized program bytes and their format (usually
    /// `hlo_with_config`).
    pub fn optimized_program_bytes(&self) -> Result<(Vec<u8>, String)> {
        let api = self.plugin.api();
        let mut prog = ffi::PJRT_Program::new();
        let mut a = ffi::PJRT_Executable_OptimizedProgram_Args::new();
        a.executable = self.raw;
        a.program = &mut prog;
        // SAFETY: first call with null code queries the size.
        unsafe { pjrt_call!(api, PJRT_Executable_OptimizedProgram, &mut a)? };
        let mut code = vec![0u8; prog.code_size];
        prog.code = code.as_mut_ptr() as *mut _;
        a.program = &mut prog;
        // SAFETY: `code` has `code_size` bytes; the format string is owned by
        // the plugin and copied below.
        unsafe {
            pjrt_call!(api, PJRT_Executable_OptimizedProgram, &mut a)?;
            code.truncate(prog.code_size);
            let format = str_from_raw(prog.format, prog.format_size);
            Ok((code, format))
        }
    }

    /// The optimized HLO module (decoded with our minimal proto).
    pub fn optimized_hlo(&self) -> Result<OptimizedHlo> {
        let (bytes, format) = self.optimized_program_bytes()?;
        OptimizedHlo::decode(&bytes, &format)
    }

    /// Platform-specific serialization (`PJRT_Executable_Serialize`).
    ///
    /// Refused for a program with the CPU plugin's oneDNN custom calls
    /// (`__onednn$...`): serializing their thunks throws a C++ exception
    /// out of the plugin, which would abort the process.
    pub fn serialize(&self) -> Result<Vec<u8>> {
        if let Ok((hlo, _)) = self.optimized_program_bytes() {
            if hlo.windows(9).any(|w| w == b"__onednn$") {
                return Err(Error::InvalidArgument(
                    "the plugin cannot serialize a program with oneDNN custom calls (__onednn$...)"
                        .into(),
                ));
            }
        }
        let mut a = ffi::PJRT_Executable_Serialize_Args::new();
        a.executable = self.raw;
        // SAFETY: valid handle; bytes copied before the deleter frees them.
        unsafe {
            pjrt_call!(self.plugin.api(), PJRT_Executable_Serialize, &mut a)?;
            let out = if a.serialized_bytes.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(a.serialized_bytes as *const u8, a.serialized_bytes_size)
                    .to_vec()
            };
            if let Some(del) = a.serialized_executable_deleter {
                del(a.serialized_executable);
            }
            Ok(out)
        }
    }

    /// Fingerprint, if the plugin implements it.
    pub fn fingerprint(&self) -> Result<String> {
        let mut a = ffi::PJRT_Executable_Fingerprint_Args::new();
        a.executable = self.raw;
        // SAFETY: valid handle; string copied.
        unsafe {
            pjrt_call!(self.plugin.api(), PJRT_Executable_Fingerprint, &mut a)?;
            Ok(str_from_raw(
                a.executable_fingerprint,
                a.executable_fingerprint_size,
            ))
        }
    }
}

/// Facts about a loaded executable needed on every execute.
pub(crate) struct ExecInner {
    pub(crate) client: Client,
    pub(crate) raw: *mut ffi::PJRT_LoadedExecutable,
    pub(crate) exe: Executable,
    pub(crate) devices: Vec<*mut ffi::PJRT_Device>,
    pub(crate) num_outputs: usize,
    pub(crate) num_replicas: usize,
    pub(crate) num_partitions: usize,
    pub(crate) outputs: Vec<ArrayInfo>,
    /// Lazily decoded parameter info (None if unavailable).
    pub(crate) params: OnceLock<Option<ParamTable>>,
}

/// Parameter shapes and donation facts from the optimized HLO.
#[derive(Debug, Clone)]
pub(crate) struct ParamTable {
    pub(crate) params: Vec<ArrayInfo>,
    /// `0..n` as i64, used as "nothing is donated" list.
    pub(crate) all_indices: Vec<i64>,
}

// SAFETY: loaded executables are thread-safe PJRT handles.
unsafe impl Send for ExecInner {}
// SAFETY: see above.
unsafe impl Sync for ExecInner {}

impl Drop for ExecInner {
    fn drop(&mut self) {
        let mut a = ffi::PJRT_LoadedExecutable_Destroy_Args::new();
        a.executable = self.raw;
        // SAFETY: owned handle, destroyed once (the inner Executable is
        // destroyed afterwards by its own Drop).
        if let Err(e) =
            unsafe { pjrt_call!(self.client.api(), PJRT_LoadedExecutable_Destroy, &mut a) }
        {
            tracing::warn!(error = %e, "PJRT_LoadedExecutable_Destroy failed");
        }
    }
}

/// A compiled program loaded on a client's devices. Cheap to clone; keeps
/// the client alive; may be executed from many threads at once.
#[derive(Clone)]
pub struct LoadedExecutable {
    pub(crate) inner: Arc<ExecInner>,
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedExecutable")
            .field("devices", &self.inner.devices.len())
            .field("outputs", &self.inner.outputs)
            .finish()
    }
}

impl LoadedExecutable {
    pub(crate) fn from_raw(
        client: &Client,
        raw: *mut ffi::PJRT_LoadedExecutable,
    ) -> Result<LoadedExecutable> {
        let api = client.api();
        let mut g = ffi::PJRT_LoadedExecutable_GetExecutable_Args::new();
        g.loaded_executable = raw;
        // SAFETY: `raw` is a valid loaded executable we own.
        if let Err(e) = unsafe { pjrt_call!(api, PJRT_LoadedExecutable_GetExecutable, &mut g) } {
            let mut d = ffi::PJRT_LoadedExecutable_Destroy_Args::new();
            d.executable = raw;
            // SAFETY: destroy the handle we own before bailing out.
            let _ = unsafe { pjrt_call!(api, PJRT_LoadedExecutable_Destroy, &mut d) };
            return Err(e);
        }
        let exe = Executable {
            plugin: client.plugin().clone(),
            raw: g.executable,
        };
        let mut inner = ExecInner {
            client: client.clone(),
            raw,
            exe,
            devices: Vec::new(),
            num_outputs: 0,
            num_replicas: 1,
            num_partitions: 1,
            outputs: Vec::new(),
            params: OnceLock::new(),
        };
        let mut ad = ffi::PJRT_LoadedExecutable_AddressableDevices_Args::new();
        ad.executable = raw;
        // SAFETY: device array owned by the executable; copied.
        unsafe {
            pjrt_call!(api, PJRT_LoadedExecutable_AddressableDevices, &mut ad)?;
            if !ad.addressable_devices.is_null() {
                inner.devices =
                    std::slice::from_raw_parts(ad.addressable_devices, ad.num_addressable_devices)
                        .to_vec();
            }
        }
        inner.num_outputs = inner.exe.num_outputs()?;
        inner.num_replicas = inner.exe.num_replicas().unwrap_or(1);
        inner.num_partitions = inner.exe.num_partitions().unwrap_or(1);
        inner.outputs = inner.exe.output_info().unwrap_or_default();
        Ok(LoadedExecutable {
            inner: Arc::new(inner),
        })
    }

    /// Raw `PJRT_LoadedExecutable*` (owned by this object).
    pub fn raw(&self) -> *mut ffi::PJRT_LoadedExecutable {
        self.inner.raw
    }

    /// The owning client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The device-independent executable.
    pub fn executable(&self) -> &Executable {
        &self.inner.exe
    }

    /// Devices this executable runs on (one argument list per device).
    pub fn devices(&self) -> Vec<Device> {
        self.inner
            .devices
            .iter()
            .map(|&d| Device::new(self.client().clone(), d))
            .collect()
    }

    /// Number of devices an execution runs on.
    pub fn num_devices(&self) -> usize {
        self.inner.devices.len()
    }

    /// Number of outputs per device.
    pub fn num_outputs(&self) -> usize {
        self.inner.num_outputs
    }

    /// Number of replicas.
    pub fn num_replicas(&self) -> usize {
        self.inner.num_replicas
    }

    /// Number of partitions.
    pub fn num_partitions(&self) -> usize {
        self.inner.num_partitions
    }

    /// Output element types and (per-device) dimensions.
    pub fn output_info(&self) -> &[ArrayInfo] {
        &self.inner.outputs
    }

    /// Per-device parameter types and dimensions from the optimized HLO,
    /// if the plugin exposes it.
    pub fn parameter_info(&self) -> Option<&[ArrayInfo]> {
        self.param_table().map(|t| &t.params[..])
    }

    pub(crate) fn param_table(&self) -> Option<&ParamTable> {
        self.inner
            .params
            .get_or_init(|| match self.inner.exe.optimized_hlo() {
                Ok(h) => h.entry_parameters().map(|params| {
                    let all_indices = (0..params.len() as i64).collect();
                    ParamTable { params, all_indices }
                }),
                Err(e) => {
                    tracing::debug!(error = %e, "no parameter info (optimized program unavailable)");
                    None
                }
            })
            .as_ref()
    }

    /// The optimized HLO module.
    pub fn optimized_hlo(&self) -> Result<OptimizedHlo> {
        self.inner.exe.optimized_hlo()
    }

    /// Serializes the compiled executable.
    pub fn serialize(&self) -> Result<Vec<u8>> {
        self.inner.exe.serialize()
    }
}

impl Client {
    /// Compiles `program` with `options` for this client's devices.
    pub fn compile(
        &self,
        program: &Program<'_>,
        options: &CompileOptions,
    ) -> Result<LoadedExecutable> {
        if program.code.is_empty() {
            return Err(Error::InvalidArgument("empty program".into()));
        }
        let opts = options.encode();
        let p = program.to_ffi();
        let mut a = ffi::PJRT_Client_Compile_Args::new();
        a.client = self.raw();
        a.program = &p;
        a.compile_options = opts.as_ptr() as *const _;
        a.compile_options_size = opts.len();
        let t0 = std::time::Instant::now();
        // SAFETY: program bytes, format and options outlive the call; the
        // plugin does not mutate `code` when compiling.
        unsafe { pjrt_call!(self.api(), PJRT_Client_Compile, &mut a)? };
        tracing::debug!(elapsed = ?t0.elapsed(), "compiled program");
        LoadedExecutable::from_raw(self, a.executable)
    }

    /// Loads an executable produced by [`LoadedExecutable::serialize`];
    /// `options` optionally overrides the serialized compile options.
    pub fn deserialize_executable(
        &self,
        bytes: &[u8],
        options: Option<&CompileOptions>,
    ) -> Result<LoadedExecutable> {
        if bytes.is_empty() {
            return Err(Error::InvalidArgument("empty serialized executable".into()));
        }
        let opts = options.map(|o| o.encode());
        let mut a = ffi::PJRT_Executable_DeserializeAndLoad_Args::new();
        a.client = self.raw();
        a.serialized_executable = bytes.as_ptr() as *const _;
        a.serialized_executable_size = bytes.len();
        if let Some(o) = &opts {
            a.overridden_serialized_compile_options = o.as_ptr() as *const _;
            a.overridden_serialized_compile_options_size = o.len();
        }
        // SAFETY: inputs outlive the call.
        unsafe { pjrt_call!(self.api(), PJRT_Executable_DeserializeAndLoad, &mut a)? };
        LoadedExecutable::from_raw(self, a.loaded_executable)
    }
}
