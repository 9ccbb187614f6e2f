//! Programs and compile options ([`Program`], [`CompileOptions`]).

use hlobridge_proto::xla;
use prost::Message;
use std::borrow::Cow;

/// Serialized program format understood by `PJRT_Client_Compile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramFormat {
    /// StableHLO/MHLO as MLIR text or bytecode (`"mlir"`).
    Mlir,
    /// Serialized `HloModuleProto` (`"hlo"`).
    Hlo,
    /// Serialized `HloModuleProtoWithConfig` (`"hlo_with_config"`).
    HloWithConfig,
}

impl ProgramFormat {
    /// The PJRT format string.
    pub fn as_str(self) -> &'static str {
        match self {
            ProgramFormat::Mlir => "mlir",
            ProgramFormat::Hlo => "hlo",
            ProgramFormat::HloWithConfig => "hlo_with_config",
        }
    }
}

/// A program to compile.
#[derive(Debug, Clone)]
pub struct Program<'a> {
    /// Program bytes.
    pub code: Cow<'a, [u8]>,
    /// Their format.
    pub format: ProgramFormat,
}

impl<'a> Program<'a> {
    /// StableHLO MLIR text (e.g. `module { func.func public @main ... }`).
    pub fn mlir_text(text: &'a str) -> Self {
        Program {
            code: Cow::Borrowed(text.as_bytes()),
            format: ProgramFormat::Mlir,
        }
    }
    /// StableHLO MLIR bytecode (e.g. from `jax.jit(f).lower(x).compiler_ir`).
    pub fn mlir_bytecode(bytes: &'a [u8]) -> Self {
        Program {
            code: Cow::Borrowed(bytes),
            format: ProgramFormat::Mlir,
        }
    }
    /// Serialized `HloModuleProto`.
    pub fn hlo_proto(bytes: &'a [u8]) -> Self {
        Program {
            code: Cow::Borrowed(bytes),
            format: ProgramFormat::Hlo,
        }
    }

    /// The C struct that points at this program's bytes and format string
    /// (for `PJRT_Client_Compile` and the client-less `PJRT_Compile`); it
    /// borrows `self`, which must outlive the call it is passed to.
    pub(crate) fn to_ffi(&self) -> crate::ffi::PJRT_Program {
        let format = self.format.as_str();
        let mut p = <crate::ffi::PJRT_Program as crate::ffi::PjrtStruct>::new();
        p.code = self.code.as_ptr() as *mut _;
        p.code_size = self.code.len();
        p.format = format.as_ptr() as *const _;
        p.format_size = format.len();
        p
    }
}

/// Which SPMD partitioner XLA should use when `num_partitions > 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Partitioner {
    /// GSPMD (`mhlo.sharding` attributes).
    #[default]
    Gspmd,
    /// Shardy (`sdy.sharding` attributes, `use_shardy_partitioner`).
    Shardy,
}

/// A typed XLA option override (`CompileOptionsProto.env_option_overrides`),
/// e.g. `("xla_dump_to", Str("/tmp/dump"))`.
#[derive(Debug, Clone, PartialEq)]
pub enum XlaOption {
    /// String flag.
    Str(String),
    /// Boolean flag.
    Bool(bool),
    /// Integer flag.
    Int(i64),
    /// Floating-point flag.
    Double(f64),
}

/// The XLA CPU flags hlobridge sets by default, so that programs keep the
/// IEEE semantics torch, jax and the StableHLO spec give them.
///
/// - `xla_cpu_enable_fast_min_max = false`: the CPU plugin's own default
///   (`true`) makes `maximum`, `minimum`, `reduce` with them and max
///   pooling drop a NaN operand (`max(nan, 1) = 1`), where eager torch and
///   the spec propagate it. jaxlib sends `false` as well.
///
/// Each is an `env_option_overrides` entry on top of the plugin's defaults;
/// a caller's own value for the same name wins ([`with_cpu_semantics`]).
pub const CPU_SEMANTICS: &[(&str, bool)] = &[("xla_cpu_enable_fast_min_max", false)];

/// `overrides` with [`CPU_SEMANTICS`] added in front of them, except the
/// names `overrides` sets itself.
pub fn with_cpu_semantics(overrides: Vec<(String, XlaOption)>) -> Vec<(String, XlaOption)> {
    let mut out: Vec<(String, XlaOption)> = CPU_SEMANTICS
        .iter()
        .filter(|(name, _)| !overrides.iter().any(|(k, _)| k == name))
        .map(|(name, v)| ((*name).to_string(), XlaOption::Bool(*v)))
        .collect();
    out.extend(overrides);
    out
}

/// Compile options; always encodes `num_replicas` and `num_partitions`
/// (a compile-options proto without them aborts some plugins).
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    /// Number of replicas (default 1).
    pub num_replicas: usize,
    /// Number of partitions (default 1).
    pub num_partitions: usize,
    /// Use SPMD partitioning (set automatically when `num_partitions > 1`).
    pub use_spmd_partitioning: bool,
    /// GSPMD or Shardy.
    pub partitioner: Partitioner,
    /// Optional static device assignment: `[replica][partition]` → device id.
    pub device_assignment: Option<Vec<Vec<i64>>>,
    /// Device ordinal for single-device programs (-1 = unset).
    pub device_ordinal: i64,
    /// XLA flag overrides applied on top of the compiler defaults.
    pub xla_options: Vec<(String, XlaOption)>,
    /// Full `DebugOptions` (replaces ALL compiler defaults; prefer
    /// `xla_options`).
    pub debug_options: Option<xla::DebugOptions>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            num_replicas: 1,
            num_partitions: 1,
            use_spmd_partitioning: false,
            partitioner: Partitioner::Gspmd,
            device_assignment: None,
            device_ordinal: -1,
            xla_options: Vec::new(),
            debug_options: None,
        }
    }
}

impl CompileOptions {
    /// Single-device defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// SPMD over `num_partitions` devices with the given partitioner.
    pub fn spmd(num_partitions: usize, partitioner: Partitioner) -> Self {
        CompileOptions {
            num_partitions,
            use_spmd_partitioning: true,
            partitioner,
            ..Self::default()
        }
    }

    /// Options for `partitions` × `replicas` devices: single-device defaults
    /// for one partition, else SPMD with Shardy (`shardy`, a module with an
    /// `sdy.mesh`) or GSPMD. Counts below 1 mean 1.
    pub fn for_devices(partitions: usize, replicas: usize, shardy: bool) -> Self {
        let mut o = if partitions > 1 {
            let partitioner = if shardy {
                Partitioner::Shardy
            } else {
                Partitioner::Gspmd
            };
            CompileOptions::spmd(partitions, partitioner)
        } else {
            CompileOptions::default()
        };
        o.num_replicas = replicas.max(1);
        o
    }

    /// Adds an XLA flag override.
    pub fn xla_option(mut self, name: impl Into<String>, value: XlaOption) -> Self {
        self.xla_options.push((name.into(), value));
        self
    }

    /// Sets a static device assignment (`[replica][partition]` → device id).
    pub fn with_device_assignment(mut self, assignment: Vec<Vec<i64>>) -> Self {
        self.device_assignment = Some(assignment);
        self
    }

    /// The `CompileOptionsProto` this encodes to.
    pub fn to_proto(&self) -> xla::CompileOptionsProto {
        let num_replicas = self.num_replicas.max(1) as i64;
        let num_partitions = self.num_partitions.max(1) as i64;
        let device_assignment = self.device_assignment.as_ref().map(|da| {
            // DeviceAssignmentProto is computation(partition)-major.
            let replicas = da.len();
            let partitions = da.first().map_or(0, |r| r.len());
            xla::DeviceAssignmentProto {
                replica_count: replicas as i32,
                computation_count: partitions as i32,
                computation_devices: (0..partitions)
                    .map(|p| xla::device_assignment_proto::ComputationDevice {
                        replica_device_ids: da
                            .iter()
                            .map(|r| r.get(p).copied().unwrap_or(0))
                            .collect(),
                    })
                    .collect(),
            }
        });
        let build = xla::ExecutableBuildOptionsProto {
            device_ordinal: self.device_ordinal,
            num_replicas,
            num_partitions,
            use_spmd_partitioning: self.use_spmd_partitioning || num_partitions > 1,
            use_shardy_partitioner: self.partitioner == Partitioner::Shardy,
            device_assignment,
            debug_options: self.debug_options.clone(),
            ..Default::default()
        };
        let env_option_overrides = self
            .xla_options
            .iter()
            .map(|(k, v)| {
                use xla::option_override_proto::Value;
                let value = match v {
                    XlaOption::Str(s) => Value::StringField(s.clone()),
                    XlaOption::Bool(b) => Value::BoolField(*b),
                    XlaOption::Int(i) => Value::IntField(*i),
                    XlaOption::Double(d) => Value::DoubleField(*d),
                };
                (k.clone(), xla::OptionOverrideProto { value: Some(value) })
            })
            .collect();
        xla::CompileOptionsProto {
            executable_build_options: Some(build),
            env_option_overrides,
            ..Default::default()
        }
    }

    /// Serialized `CompileOptionsProto`.
    pub fn encode(&self) -> Vec<u8> {
        self.to_proto().encode_to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_sets_replicas_and_partitions() {
        let p = CompileOptions::default().to_proto();
        let b = p.executable_build_options.unwrap();
        assert_eq!((b.num_replicas, b.num_partitions), (1, 1));
        assert!(!b.use_spmd_partitioning);
        let p = CompileOptions::spmd(4, Partitioner::Shardy).to_proto();
        let b = p.executable_build_options.unwrap();
        assert_eq!(b.num_partitions, 4);
        assert!(b.use_spmd_partitioning && b.use_shardy_partitioner);
    }

    #[test]
    fn device_assignment_is_partition_major() {
        let o =
            CompileOptions::spmd(2, Partitioner::Gspmd).with_device_assignment(vec![vec![3, 1]]);
        let da = o
            .to_proto()
            .executable_build_options
            .unwrap()
            .device_assignment
            .unwrap();
        assert_eq!((da.replica_count, da.computation_count), (1, 2));
        assert_eq!(da.computation_devices[0].replica_device_ids, vec![3]);
        assert_eq!(da.computation_devices[1].replica_device_ids, vec![1]);
    }
}
