//! Compile targets: `cpu`, `tpu:v5e[:2x2]`, `cuda:h100[:N]`, ... — what
//! they mean, and compiling a program for one.
//!
//! Targets are data: `pjrt-client/targets/targets.toml` (shipped, embedded
//! in the crate) plus an optional user file named by `HLOBRIDGE_TARGETS`
//! (its tables add or override shipped ones; its `target_config` paths are
//! relative to it). Shared by `hlobridge compile` and `hb.compile_for`.
//!
//! - [`Target::resolve`] turns a target string into a [`Target`];
//! - [`compile_for_target`] (in [`compile`]) compiles StableHLO text for it:
//!   deviceless for TPU/GPU topologies, through a CPU client for `cpu`
//!   (the CPU plugin 0.0.1 has no topology API), and reports memory use
//!   against the device's capacity, fusions, custom calls / Pallas kernels
//!   and compile time;
//! - [`oom`] reads the compilers' out-of-memory messages into
//!   [`Error::OutOfMemory`].

pub mod compile;
pub mod oom;

pub use compile::{compile_for_target, kernel_backend, TargetCompile};

use crate::accel;
use crate::error::{Error, Result};
use crate::{OptionValue, Plugin, Topology};
use std::path::{Path, PathBuf};

const SHIPPED_TARGETS: &str = include_str!("../../targets/targets.toml");
const SHIPPED_CONFIGS: &[(&str, &str)] = &[(
    "h100_sxm.txtpb",
    include_str!("../../targets/h100_sxm.txtpb"),
)];

/// What kind of compiler a target uses.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetKind {
    /// The CPU plugin (compiled through a client: `devices` CPU devices).
    Cpu {
        /// Device count.
        devices: usize,
    },
    /// libtpu, for the topology `NAME:SHAPE`.
    Tpu {
        /// libtpu topology name, e.g. `v5e:2x2`.
        topology: String,
        /// On-chip vector memory per core (public figure, for reports).
        vmem: Option<i64>,
    },
    /// The CUDA PJRT plugin for `1x1xN` devices described by `config`.
    Cuda {
        /// Device count.
        devices: usize,
        /// `GpuTargetConfigProto` in text format.
        config: String,
    },
}

/// A resolved compile target.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The target string as given (`tpu:v5e:2x2`).
    pub spec: String,
    /// Compiler and topology.
    pub kind: TargetKind,
    /// Device memory per device from the table (the plugin's
    /// `device_memory_bytes_limit` takes precedence when it reports one).
    pub hbm: Option<i64>,
}

fn int(t: &toml::Table, k: &str) -> Option<i64> {
    t.get(k).and_then(|v| v.as_integer())
}

/// The target table: shipped tables merged with the `HLOBRIDGE_TARGETS`
/// file's (if set), and that file's path.
fn targets_table() -> Result<(toml::Table, Option<PathBuf>)> {
    let mut all: toml::Table = SHIPPED_TARGETS
        .parse()
        .map_err(|e| Error::UnknownTarget(format!("shipped targets.toml: {e}")))?;
    let user = hlobridge_config::path(hlobridge_config::Var::Targets);
    if let Some(p) = &user {
        let text = std::fs::read_to_string(p)
            .map_err(|e| Error::UnknownTarget(format!("HLOBRIDGE_TARGETS={}: {e}", p.display())))?;
        let t: toml::Table = text
            .parse()
            .map_err(|e| Error::UnknownTarget(format!("{}: {e}", p.display())))?;
        for (fam, v) in t {
            if let (Some(dst), Some(src)) = (
                all.entry(fam.clone())
                    .or_insert(toml::Value::Table(Default::default()))
                    .as_table_mut(),
                v.as_table(),
            ) {
                for (k, e) in src {
                    dst.insert(k.clone(), e.clone());
                }
            }
        }
    }
    Ok((all, user))
}

/// Every known target name (`cpu`, `tpu:v5e`, `cuda:h100`, ...).
pub fn known_targets() -> Result<Vec<String>> {
    let (all, _) = targets_table()?;
    let mut v = vec!["cpu".to_string()];
    for (fam, t) in &all {
        if let Some(t) = t.as_table() {
            v.extend(t.keys().map(|k| format!("{fam}:{k}")));
        }
    }
    Ok(v)
}

fn user_defines(user: &Path, fam: &str, name: &str) -> bool {
    std::fs::read_to_string(user)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.get(fam).and_then(|c| c.get(name)).is_some())
}

impl Target {
    /// Resolves a target string. `devices` asks for at least that many
    /// devices (CPU device count; CUDA `1x1xN`).
    pub fn resolve(spec: &str, devices: Option<usize>) -> Result<Target> {
        let parts: Vec<&str> = spec.split(':').collect();
        let (all, user) = targets_table()?;
        let unknown = || -> Error {
            let known = known_targets().map(|k| k.join(", ")).unwrap_or_default();
            Error::UnknownTarget(format!("{spec:?}; known targets: {known}"))
        };
        let entry = |fam: &str, name: &str| -> Result<toml::Table> {
            all.get(fam)
                .and_then(|f| f.get(name))
                .and_then(|t| t.as_table())
                .cloned()
                .ok_or_else(unknown)
        };
        let count = |s: &str| -> Result<usize> {
            s.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                Error::UnknownTarget(format!(
                    "{spec:?}: device count {s:?} is not a positive integer"
                ))
            })
        };
        let (kind, hbm) = match parts.as_slice() {
            ["cpu"] => (
                TargetKind::Cpu {
                    devices: devices.unwrap_or(1).max(1),
                },
                None,
            ),
            ["cpu", n] => (
                TargetKind::Cpu {
                    devices: count(n)?.max(devices.unwrap_or(1)),
                },
                None,
            ),
            ["tpu", name] | ["tpu", name, _] => {
                let t = entry("tpu", name)?;
                let shape = match parts.get(2) {
                    Some(s) => s.to_string(),
                    None => t
                        .get("default_shape")
                        .and_then(|v| v.as_str())
                        .unwrap_or("2x2")
                        .to_string(),
                };
                (
                    TargetKind::Tpu {
                        topology: format!("{name}:{shape}"),
                        vmem: int(&t, "vmem_bytes"),
                    },
                    int(&t, "hbm_bytes"),
                )
            }
            ["cuda", name] | ["cuda", name, _] => {
                let t = entry("cuda", name)?;
                let n = match parts.get(2) {
                    Some(s) => count(s)?,
                    None => 1,
                };
                let file = t
                    .get("target_config")
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| {
                        Error::UnknownTarget(format!("cuda.{name} has no target_config"))
                    })?;
                let shipped = SHIPPED_CONFIGS.iter().find(|(f, _)| *f == file);
                let from_user = user.as_deref().filter(|u| user_defines(u, "cuda", name));
                let config = match (shipped, from_user) {
                    (Some((_, text)), None) => text.to_string(),
                    _ => {
                        let base = from_user.and_then(Path::parent).unwrap_or(Path::new("."));
                        std::fs::read_to_string(base.join(file)).map_err(|e| {
                            Error::UnknownTarget(format!("cuda.{name} target_config {file}: {e}"))
                        })?
                    }
                };
                (
                    TargetKind::Cuda {
                        devices: n.max(devices.unwrap_or(1)),
                        config,
                    },
                    int(&t, "hbm_bytes"),
                )
            }
            _ => return Err(unknown()),
        };
        Ok(Target {
            spec: spec.to_string(),
            kind,
            hbm,
        })
    }

    /// The PJRT platform the target compiles for: `cpu`, `tpu` or `cuda`
    /// (also the JAX lowering platform).
    pub fn platform(&self) -> &'static str {
        match self.kind {
            TargetKind::Cpu { .. } => "cpu",
            TargetKind::Tpu { .. } => "tpu",
            TargetKind::Cuda { .. } => "cuda",
        }
    }

    /// Device count of the target's topology.
    pub fn devices(&self) -> Option<usize> {
        match self.kind {
            TargetKind::Cpu { devices } | TargetKind::Cuda { devices, .. } => Some(devices),
            TargetKind::Tpu { .. } => None,
        }
    }

    /// Loads the target's compiler plugin (libtpu / the CUDA plugin, found by
    /// [`accel`]; the discovered CPU plugin for `cpu`), setting the
    /// environment they need first ([`accel::skip_tpu_metadata_query`],
    /// [`accel::set_cuda_data_dir_flag`]). A missing accelerator is
    /// [`Error::AcceleratorNotInstalled`].
    pub fn load_plugin(&self) -> Result<Plugin> {
        match &self.kind {
            TargetKind::Cpu { .. } => Plugin::discover(),
            TargetKind::Tpu { .. } => {
                let path = accel::find_libtpu().ok_or_else(|| Error::AcceleratorNotInstalled {
                    what: "libtpu",
                    searched: accel::searched("TPU_LIBRARY_PATH", accel::LIBTPU_REL),
                })?;
                accel::skip_tpu_metadata_query()?;
                Plugin::load(path)
            }
            TargetKind::Cuda { .. } => {
                let path =
                    accel::find_cuda_plugin().ok_or_else(|| Error::AcceleratorNotInstalled {
                        what: "the CUDA PJRT plugin (jax-cuda12-pjrt)",
                        searched: accel::searched("HLOBRIDGE_CUDA_PLUGIN", accel::CUDA_PLUGIN_REL),
                    })?;
                let data =
                    accel::find_cuda_data_dir().ok_or_else(|| Error::AcceleratorNotInstalled {
                        what: "ptxas and libdevice (nvidia-cuda-nvcc-cu12)",
                        searched: accel::searched("HLOBRIDGE_CUDA_DATA_DIR", accel::CUDA_DATA_REL),
                    })?;
                accel::set_cuda_data_dir_flag(&data);
                Plugin::load(path)
            }
        }
    }

    /// The topology to compile for (TPU / CUDA); `None` for `cpu`, which is
    /// compiled through a client.
    pub fn topology(&self, plugin: &Plugin) -> Result<Option<Topology>> {
        let t = match &self.kind {
            TargetKind::Cpu { .. } => return Ok(None),
            TargetKind::Tpu { topology, .. } => Topology::new(plugin, topology, &[]),
            TargetKind::Cuda { devices, config } => Topology::new(
                plugin,
                "",
                &[
                    (
                        "topology".into(),
                        OptionValue::String(format!("1x1x{devices}")),
                    ),
                    ("target_config".into(), OptionValue::String(config.clone())),
                ],
            ),
        };
        t.map(Some).map_err(|e| match e {
            Error::Pjrt {
                function,
                code,
                message,
            } => Error::Pjrt {
                function,
                code,
                message: format!("creating the topology for {}: {message}", self.spec),
            },
            e => e,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_from_the_shipped_table() {
        let t = Target::resolve("tpu:v5e", None).unwrap();
        assert_eq!(
            t.kind,
            TargetKind::Tpu {
                topology: "v5e:2x2".into(),
                vmem: Some(128 << 20)
            }
        );
        assert_eq!(t.platform(), "tpu");
        let t = Target::resolve("cuda:h100:8", None).unwrap();
        assert!(
            matches!(t.kind, TargetKind::Cuda { devices: 8, ref config } if config.contains("core_count: 132"))
        );
        assert_eq!(
            Target::resolve("cpu", Some(4)).unwrap().kind,
            TargetKind::Cpu { devices: 4 }
        );
        let e = Target::resolve("tpu:v99", None).unwrap_err().to_string();
        assert!(
            e.starts_with("UnknownTarget:") && e.contains("cuda:h100"),
            "{e}"
        );
        let e = Target::resolve("cuda:h100:0", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a positive integer"), "{e}");
        assert!(known_targets().unwrap().contains(&"tpu:v6e".to_string()));
    }
}
