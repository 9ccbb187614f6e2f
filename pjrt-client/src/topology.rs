//! Device topologies without devices (`PJRT_TopologyDescription_*`) and
//! deviceless compilation for them (`PJRT_Compile` with no client).
//!
//! A [`Topology`] describes devices that need not exist on this machine
//! (e.g. libtpu's `"v5e:2x2"`, or the CUDA plugin's `"1x1x8"` plus a
//! `target_config`). [`Topology::compile`] returns an
//! [`UnloadedExecutable`]: the compiled program with its serialization,
//! optimized program, generated code size and compiled memory statistics,
//! which cannot be executed here.

use crate::api::{str_from_raw, Plugin};
use crate::client::{read_named_values, to_named_values, OptionValue};
use crate::compile::{CompileOptions, Program};
use crate::error::{Error, Result};
use crate::executable::Executable;
use crate::ffi::{self, PjrtStruct};
use crate::pjrt_call;
use std::time::{Duration, Instant};

/// An owned `PJRT_TopologyDescription`. Keeps its plugin loaded.
pub struct Topology {
    plugin: Plugin,
    raw: *mut ffi::PJRT_TopologyDescription,
    name: String,
}

// SAFETY: topology descriptions are immutable after creation; the PJRT C API
// allows using them from any thread.
unsafe impl Send for Topology {}
// SAFETY: see above.
unsafe impl Sync for Topology {}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology")
            .field("name", &self.name)
            .finish()
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let mut a = ffi::PJRT_TopologyDescription_Destroy_Args::new();
        a.topology = self.raw;
        // SAFETY: owned handle, destroyed once.
        if let Err(e) =
            unsafe { pjrt_call!(self.plugin.api(), PJRT_TopologyDescription_Destroy, &mut a) }
        {
            tracing::warn!(error = %e, "PJRT_TopologyDescription_Destroy failed");
        }
    }
}

/// One device of a topology, as described by the plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDescription {
    /// Global device id.
    pub id: i32,
    /// Process (host) index.
    pub process_index: i32,
    /// Device kind, e.g. `"TPU v5 lite"` or `"NVIDIA H100 80GB HBM3"`.
    pub kind: String,
    /// Short description.
    pub to_string: String,
    /// Plugin-specific attributes (`coords`, `core_on_chip`, ...).
    pub attributes: Vec<(String, OptionValue)>,
}

impl Topology {
    /// Creates a topology named `name` (plugin specific; may be empty) with
    /// plugin-specific named options.
    pub fn new(plugin: &Plugin, name: &str, options: &[(String, OptionValue)]) -> Result<Topology> {
        let nv = to_named_values(options);
        let mut a = ffi::PJRT_TopologyDescription_Create_Args::new();
        a.topology_name = name.as_ptr() as *const _;
        a.topology_name_size = name.len();
        a.create_options = if nv.is_empty() {
            std::ptr::null()
        } else {
            nv.as_ptr()
        };
        a.num_options = nv.len();
        // SAFETY: `name`, `nv` and the option strings it borrows from live
        // across the call.
        unsafe { pjrt_call!(plugin.api(), PJRT_TopologyDescription_Create, &mut a)? };
        if a.topology.is_null() {
            return Err(Error::InvalidArgument(format!(
                "PJRT_TopologyDescription_Create returned no topology for {name:?}"
            )));
        }
        Ok(Topology {
            plugin: plugin.clone(),
            raw: a.topology,
            name: name.to_string(),
        })
    }

    /// The name it was created with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin it belongs to.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// Platform name (`tpu`, `cuda`, ...).
    pub fn platform_name(&self) -> Result<String> {
        let mut a = ffi::PJRT_TopologyDescription_PlatformName_Args::new();
        a.topology = self.raw;
        // SAFETY: valid handle; the string is owned by the topology and copied.
        unsafe {
            pjrt_call!(
                self.plugin.api(),
                PJRT_TopologyDescription_PlatformName,
                &mut a
            )?;
            Ok(str_from_raw(a.platform_name, a.platform_name_size))
        }
    }

    /// Platform version string.
    pub fn platform_version(&self) -> Result<String> {
        let mut a = ffi::PJRT_TopologyDescription_PlatformVersion_Args::new();
        a.topology = self.raw;
        // SAFETY: valid handle; the string is owned by the topology and copied.
        unsafe {
            pjrt_call!(
                self.plugin.api(),
                PJRT_TopologyDescription_PlatformVersion,
                &mut a
            )?;
            Ok(str_from_raw(a.platform_version, a.platform_version_size))
        }
    }

    /// Topology attributes.
    pub fn attributes(&self) -> Result<Vec<(String, OptionValue)>> {
        let mut a = ffi::PJRT_TopologyDescription_Attributes_Args::new();
        a.topology = self.raw;
        // SAFETY: valid handle; values owned by the topology and copied.
        unsafe {
            pjrt_call!(
                self.plugin.api(),
                PJRT_TopologyDescription_Attributes,
                &mut a
            )?;
            Ok(read_named_values(a.attributes, a.num_attributes))
        }
    }

    /// Descriptions of every device in the topology.
    pub fn devices(&self) -> Result<Vec<DeviceDescription>> {
        let api = self.plugin.api();
        let mut a = ffi::PJRT_TopologyDescription_GetDeviceDescriptions_Args::new();
        a.topology = self.raw;
        // SAFETY: valid handle; the array is owned by the topology.
        unsafe { pjrt_call!(api, PJRT_TopologyDescription_GetDeviceDescriptions, &mut a)? };
        if a.descriptions.is_null() || a.num_descriptions == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returned `num_descriptions` valid pointers.
        let raws = unsafe { std::slice::from_raw_parts(a.descriptions, a.num_descriptions) };
        let mut out = Vec::with_capacity(raws.len());
        for &d in raws {
            let mut id = ffi::PJRT_DeviceDescription_Id_Args::new();
            id.device_description = d;
            let mut pi = ffi::PJRT_DeviceDescription_ProcessIndex_Args::new();
            pi.device_description = d;
            let mut k = ffi::PJRT_DeviceDescription_Kind_Args::new();
            k.device_description = d;
            let mut ts = ffi::PJRT_DeviceDescription_ToString_Args::new();
            ts.device_description = d;
            let mut at = ffi::PJRT_DeviceDescription_Attributes_Args::new();
            at.device_description = d;
            // SAFETY: `d` is a description owned by the topology, alive while
            // `self` is; strings and values are copied.
            unsafe {
                pjrt_call!(api, PJRT_DeviceDescription_Id, &mut id)?;
                pjrt_call!(api, PJRT_DeviceDescription_ProcessIndex, &mut pi)?;
                pjrt_call!(api, PJRT_DeviceDescription_Kind, &mut k)?;
                pjrt_call!(api, PJRT_DeviceDescription_ToString, &mut ts)?;
                pjrt_call!(api, PJRT_DeviceDescription_Attributes, &mut at)?;
                out.push(DeviceDescription {
                    id: id.id,
                    process_index: pi.process_index,
                    kind: str_from_raw(k.device_kind, k.device_kind_size),
                    to_string: str_from_raw(ts.to_string, ts.to_string_size),
                    attributes: read_named_values(at.attributes, at.num_attributes),
                });
            }
        }
        Ok(out)
    }

    /// Compiles `program` for this topology with no client (deviceless).
    pub fn compile(
        &self,
        program: &Program<'_>,
        options: &CompileOptions,
    ) -> Result<UnloadedExecutable> {
        if program.code.is_empty() {
            return Err(Error::InvalidArgument("empty program".into()));
        }
        let opts = options.encode();
        let p = program.to_ffi();
        let mut a = ffi::PJRT_Compile_Args::new();
        a.topology = self.raw;
        a.program = &p;
        a.compile_options = opts.as_ptr() as *const _;
        a.compile_options_size = opts.len();
        a.client = std::ptr::null_mut();
        let t0 = Instant::now();
        // SAFETY: program bytes, format and options outlive the call; the
        // plugin only reads them.
        unsafe { pjrt_call!(self.plugin.api(), PJRT_Compile, &mut a)? };
        let compile_time = t0.elapsed();
        if a.executable.is_null() {
            return Err(Error::InvalidArgument(
                "PJRT_Compile returned no executable".into(),
            ));
        }
        Ok(UnloadedExecutable {
            exe: Executable::from_owned(self.plugin.clone(), a.executable),
            plugin: self.plugin.clone(),
            compile_time,
        })
    }
}

/// `xla::CompiledMemoryStats` as reported by
/// `PJRT_Executable_GetCompiledMemoryStats` (bytes; device = HBM on TPU/GPU).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompiledMemoryStats {
    /// Generated code on the device.
    pub generated_code: i64,
    /// Arguments.
    pub arguments: i64,
    /// Outputs.
    pub outputs: i64,
    /// Argument bytes reused for outputs.
    pub alias: i64,
    /// Temporaries.
    pub temp: i64,
    /// Host generated code.
    pub host_generated_code: i64,
    /// Host arguments.
    pub host_arguments: i64,
    /// Host outputs.
    pub host_outputs: i64,
    /// Host alias.
    pub host_alias: i64,
    /// Host temporaries.
    pub host_temp: i64,
    /// Peak device memory (0 if the plugin does not report it).
    pub peak: i64,
}

impl CompiledMemoryStats {
    /// Device bytes needed to run: arguments + outputs − alias + temporaries
    /// + generated code.
    pub fn device_total(&self) -> i64 {
        self.arguments + self.outputs - self.alias + self.temp + self.generated_code
    }
}

/// The result of a deviceless compile: an executable that is not loaded on
/// any client. Dereferences to [`Executable`] (name, serialize, optimized
/// program, generated code size, ...).
pub struct UnloadedExecutable {
    exe: Executable,
    plugin: Plugin,
    compile_time: Duration,
}

impl std::fmt::Debug for UnloadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnloadedExecutable")
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

impl std::ops::Deref for UnloadedExecutable {
    type Target = Executable;
    fn deref(&self) -> &Executable {
        &self.exe
    }
}

impl UnloadedExecutable {
    /// Wall time of the `PJRT_Compile` call.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// `PJRT_Executable_SizeOfGeneratedCodeInBytes`.
    pub fn generated_code_size(&self) -> Result<i64> {
        generated_code_size_of(&self.plugin, &self.exe)
    }

    /// Compiled memory statistics; [`Error::Unsupported`] when the plugin's
    /// C API has no `PJRT_Executable_GetCompiledMemoryStats`.
    pub fn memory_stats(&self) -> Result<CompiledMemoryStats> {
        memory_stats_of(&self.plugin, &self.exe)
    }

    /// The optimized program as text: the plugin's HLO decoded and listed
    /// by [`crate::OptimizedHlo::to_text`].
    pub fn optimized_text(&self) -> Result<String> {
        Ok(self.exe.optimized_hlo()?.to_text())
    }
}

/// `PJRT_Executable_SizeOfGeneratedCodeInBytes` of any executable of
/// `plugin` (unloaded, or the executable of a loaded one).
pub fn generated_code_size_of(plugin: &Plugin, exe: &Executable) -> Result<i64> {
    let mut a = ffi::PJRT_Executable_SizeOfGeneratedCodeInBytes_Args::new();
    a.executable = exe.raw();
    // SAFETY: valid handle owned by `exe`, which belongs to `plugin`.
    unsafe {
        pjrt_call!(
            plugin.api(),
            PJRT_Executable_SizeOfGeneratedCodeInBytes,
            &mut a
        )?
    };
    Ok(a.size_in_bytes)
}

/// Compiled memory statistics of any executable of `plugin`;
/// [`Error::Unsupported`] when the plugin's C API has no
/// `PJRT_Executable_GetCompiledMemoryStats`.
pub fn memory_stats_of(plugin: &Plugin, exe: &Executable) -> Result<CompiledMemoryStats> {
    let mut a = ffi::PJRT_Executable_GetCompiledMemoryStats_Args::new();
    a.executable = exe.raw();
    // SAFETY: valid handle owned by `exe`; outputs are plain integers.
    unsafe { pjrt_call!(plugin.api(), PJRT_Executable_GetCompiledMemoryStats, &mut a)? };
    Ok(CompiledMemoryStats {
        generated_code: a.generated_code_size_in_bytes,
        arguments: a.argument_size_in_bytes,
        outputs: a.output_size_in_bytes,
        alias: a.alias_size_in_bytes,
        temp: a.temp_size_in_bytes,
        host_generated_code: a.host_generated_code_size_in_bytes,
        host_arguments: a.host_argument_size_in_bytes,
        host_outputs: a.host_output_size_in_bytes,
        host_alias: a.host_alias_size_in_bytes,
        host_temp: a.host_temp_size_in_bytes,
        peak: a.peak_memory_in_bytes,
    })
}
