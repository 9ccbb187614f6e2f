//! Compiling StableHLO text for a [`Target`] and describing the result:
//! memory use per device against the device's capacity, fusions, custom
//! calls and Pallas kernels (with their backend), generated code size,
//! serialized executable and compile time.
//!
//! TPU and CUDA targets compile deviceless (`PJRT_Compile` for a topology,
//! no client); `cpu` compiles through a CPU client (given, or created for
//! the target's device count), a real compile either way. A program that
//! does not fit — the compiler says so, or its compiled memory statistics
//! exceed the capacity — is [`Error::OutOfMemory`] with the numbers.

use super::oom;
use super::{Target, TargetKind};
use crate::error::{Error, Result};
use crate::topology::{memory_stats_of, CompiledMemoryStats};
use crate::{Client, ClientOptions, CompileOptions, OptimizedHlo, OptionValue, Program};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A program compiled for a target (the executable itself is serialized;
/// nothing here can run).
#[derive(Debug, Clone)]
pub struct TargetCompile {
    /// The target string.
    pub target: String,
    /// PJRT platform (`tpu`, `cuda`, `cpu`).
    pub platform: String,
    /// Kind of the first device (`TPU v5 lite`, `NVIDIA H100 80GB HBM3`).
    pub device_kind: String,
    /// Devices in the topology (or the CPU client).
    pub topology_devices: usize,
    /// The plugin's PJRT C API version `major.minor`.
    pub plugin_api: String,
    /// SPMD partitions compiled for.
    pub partitions: usize,
    /// Replicas compiled for.
    pub replicas: usize,
    /// Wall time of the compile call.
    pub compile_time: Duration,
    /// `SizeOfGeneratedCodeInBytes` (the GPU plugin reports 0: its cubin is
    /// in the serialized executable).
    pub generated_code: Option<i64>,
    /// The serialized executable.
    pub serialized: Vec<u8>,
    /// Compiled memory statistics per device, when the plugin reports them.
    pub memory: Option<CompiledMemoryStats>,
    /// Device memory capacity (plugin's `device_memory_bytes_limit`, else the
    /// target table's `hbm_bytes`).
    pub capacity: Option<i64>,
    /// TPU vector memory per core, from the target table.
    pub vmem_capacity: Option<i64>,
    /// Fusions in the optimized program, by kind.
    pub fusions: BTreeMap<String, usize>,
    /// Custom calls in the optimized program, by target.
    pub custom_calls: BTreeMap<String, usize>,
    /// The optimized program as text, when the plugin returns it.
    pub optimized_text: Option<String>,
}

impl TargetCompile {
    /// The kernels among the custom calls: `(custom call target, backend,
    /// count)`, e.g. `("tpu_custom_call", "Pallas TPU (Mosaic)", 1)`.
    pub fn kernels(&self) -> Vec<(String, &'static str, usize)> {
        self.custom_calls
            .iter()
            .filter_map(|(t, n)| kernel_backend(t).map(|b| (t.clone(), b, *n)))
            .collect()
    }
}

/// The Pallas/kernel backend a custom-call target belongs to.
pub fn kernel_backend(target: &str) -> Option<&'static str> {
    match target {
        "tpu_custom_call" => Some("Pallas TPU (Mosaic)"),
        "__gpu$xla.gpu.triton" => Some("Pallas Triton"),
        t if t.starts_with("mosaic_gpu") => Some("Pallas Mosaic GPU"),
        _ => None,
    }
}

/// Turns a compiler error into [`Error::OutOfMemory`] when its message is a
/// memory-capacity failure (the compiler's numbers are kept).
fn classify(target: &str, e: Error) -> Error {
    let msg = match &e {
        Error::Pjrt { message, .. } => message.clone(),
        _ => return e,
    };
    match oom::parse(&msg) {
        Some(o) => Error::OutOfMemory {
            target: target.to_string(),
            space: o.space,
            needed: o.needed,
            available: o.available,
            message: msg,
        },
        None => e,
    }
}

fn device_memory_limit(attrs: &[(String, OptionValue)]) -> Option<i64> {
    attrs.iter().find_map(|(k, v)| match (k.as_str(), v) {
        ("device_memory_bytes_limit", OptionValue::Int64(b)) => Some(*b),
        _ => None,
    })
}

fn census(hlo: &OptimizedHlo) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut fusions: BTreeMap<String, usize> = BTreeMap::new();
    let mut calls: BTreeMap<String, usize> = BTreeMap::new();
    for f in hlo.fusions() {
        let kind = if f.kind.is_empty() {
            "?".into()
        } else {
            f.kind
        };
        *fusions.entry(kind).or_default() += 1;
    }
    for c in &hlo.module.computations {
        for i in c.instructions.iter().filter(|i| i.opcode == "custom-call") {
            *calls.entry(i.custom_call_target.clone()).or_default() += 1;
        }
    }
    (fusions, calls)
}

/// Compiles `text` (StableHLO/MLIR text, already lowered for the target:
/// no host-only rewrites for TPU/CUDA) for `target` with `options`.
/// `cpu_client` is used for the `cpu` target (else a CPU client with the
/// target's device count is created). The number of devices the options
/// need must fit the topology.
pub fn compile_for_target(
    target: &Target,
    text: &str,
    options: &CompileOptions,
    cpu_client: Option<&Client>,
) -> Result<TargetCompile> {
    let needed = options.num_partitions.max(1) * options.num_replicas.max(1);
    let program = Program::mlir_text(text);
    let plugin;
    let (exe_holder, devices, platform, kind, compile_time, capacity_attr);
    match &target.kind {
        TargetKind::Cpu { devices: n } => {
            let owned;
            let client = match cpu_client {
                Some(c) => c,
                None => {
                    owned = Client::discover(&ClientOptions::new().cpu_device_count(*n as i64))?;
                    &owned
                }
            };
            if needed > client.device_count() {
                return Err(Error::InvalidArgument(format!(
                    "the program needs {needed} devices but {} has {}",
                    target.spec,
                    client.device_count()
                )));
            }
            plugin = client.plugin().clone();
            let t0 = Instant::now();
            let loaded = client
                .compile(&program, options)
                .map_err(|e| classify(&target.spec, e))?;
            compile_time = t0.elapsed();
            devices = client.device_count();
            platform = client.platform_name().to_string();
            kind = client
                .addressable_devices()
                .first()
                .and_then(|d| d.kind().ok())
                .unwrap_or_default();
            capacity_attr = None;
            exe_holder = Holder::Loaded(loaded);
        }
        _ => {
            plugin = target.load_plugin()?;
            if matches!(target.kind, TargetKind::Cuda { .. }) && text.contains("mosaic_gpu") {
                // A Pallas Mosaic GPU kernel: its host code is linked
                // against the Mosaic GPU runtime while compiling.
                crate::accel::load_mosaic_gpu_runtime()?;
            }
            let topo = target
                .topology(&plugin)?
                .ok_or_else(|| Error::InvalidArgument("no topology".into()))?;
            let descs = topo.devices()?;
            if needed > descs.len().max(1) {
                return Err(Error::InvalidArgument(format!(
                    "the program needs {needed} devices but {} has {}",
                    target.spec,
                    descs.len()
                )));
            }
            // CUDA: ptxas/libdevice as a compile option, not XLA_FLAGS
            // (accel::set_cuda_data_dir_flag).
            let mut options = options.clone();
            if matches!(target.kind, TargetKind::Cuda { .. }) {
                crate::accel::add_cuda_xla_options(&mut options);
            }
            let exe = topo
                .compile(&program, &options)
                .map_err(|e| classify(&target.spec, e))?;
            compile_time = exe.compile_time();
            devices = descs.len();
            platform = topo.platform_name()?;
            kind = descs.first().map(|d| d.kind.clone()).unwrap_or_default();
            capacity_attr = descs
                .first()
                .and_then(|d| device_memory_limit(&d.attributes));
            exe_holder = Holder::Unloaded(exe);
        }
    }
    let exe = exe_holder.executable();
    let memory = memory_stats_of(&plugin, exe).ok();
    let capacity = capacity_attr.or(target.hbm);
    if let (Some(s), Some(cap)) = (memory, capacity) {
        if s.device_total() > cap {
            return Err(Error::OutOfMemory {
                target: target.spec.clone(),
                space: "device memory".into(),
                needed: oom::human_bytes(s.device_total()),
                available: oom::human_bytes(cap),
                message: format!(
                    "compiled memory stats: arguments {} + outputs {} - alias {} + temporaries {} + code {} bytes > {cap} bytes",
                    s.arguments, s.outputs, s.alias, s.temp, s.generated_code
                ),
            });
        }
    }
    let serialized = exe.serialize()?;
    let hlo = exe.optimized_hlo().ok();
    let (fusions, custom_calls) = hlo.as_ref().map(census).unwrap_or_default();
    let (major, minor) = plugin.api().version();
    Ok(TargetCompile {
        target: target.spec.clone(),
        platform,
        device_kind: kind,
        topology_devices: devices,
        plugin_api: format!("{major}.{minor}"),
        partitions: options.num_partitions.max(1),
        replicas: options.num_replicas.max(1),
        compile_time,
        generated_code: crate::topology::generated_code_size_of(&plugin, exe).ok(),
        serialized,
        memory,
        capacity,
        vmem_capacity: match &target.kind {
            TargetKind::Tpu { vmem, .. } => *vmem,
            _ => None,
        },
        fusions,
        custom_calls,
        optimized_text: hlo.map(|h| h.to_text()),
    })
}

/// The compiled executable, loaded on a CPU client or unloaded.
enum Holder {
    Loaded(crate::LoadedExecutable),
    Unloaded(crate::UnloadedExecutable),
}

impl Holder {
    fn executable(&self) -> &crate::Executable {
        match self {
            Holder::Loaded(l) => l.executable(),
            Holder::Unloaded(u) => u,
        }
    }
}
