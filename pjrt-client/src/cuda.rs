//! Running on an NVIDIA GPU through the CUDA PJRT plugin
//! (`jax-cuda12-pjrt`'s `xla_cuda_plugin.so`): the client's creation
//! options, loading the plugin where [`crate::accel`] finds it, and creating
//! the client.
//!
//! [`CudaOptions`] are the named values the plugin's `PJRT_Client_Create`
//! accepts (XLA's `pjrt_c_api_gpu_internal.cc` validates every name and its
//! type and rejects unknown ones): `platform_name` (string), `allocator`
//! (`default` | `platform` | `bfc` | `cuda_async`), `memory_fraction`
//! (float), `preallocate` (bool), `collective_memory_size` (int64, bytes),
//! `visible_devices` (int64 list of CUDA ordinals), `node_id`, `num_nodes`
//! (int64), `should_stage_host_to_device_transfers` (bool). Only the options
//! that are set are sent, so the plugin's own defaults apply to the rest.
//!
//! hlobridge shares the GPU with torch's caching allocator, so its defaults
//! differ from JAX's (which preallocates 75% of the memory): the BFC
//! allocator without preallocation, capped at `memory_fraction = 0.75`.
//! [`CudaOptions::from_env`] reads `HLOBRIDGE_CUDA_ALLOCATOR`,
//! `HLOBRIDGE_CUDA_MEMORY_FRACTION`, `HLOBRIDGE_CUDA_PREALLOCATE` and
//! `HLOBRIDGE_CUDA_VISIBLE_DEVICES` on top of those defaults; a bad value is
//! an [`Error::InvalidArgument`] naming the variable.
//!
//! Everything here except [`cuda_client`] runs without a GPU.

use crate::api::Plugin;
use crate::client::{Client, ClientOptions, OptionValue};
use crate::error::{Error, Result};

/// The CUDA plugin's device allocators (`allocator` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaAllocator {
    /// The plugin's default (BFC).
    Default,
    /// `cudaMalloc`/`cudaFree` for every buffer: no pool, slow, frees at once.
    Platform,
    /// XLA's best-fit-with-coalescing pool.
    Bfc,
    /// `cudaMallocAsync` (the CUDA driver's stream-ordered pool).
    CudaAsync,
}

impl CudaAllocator {
    /// The option value the plugin expects.
    pub fn as_str(self) -> &'static str {
        match self {
            CudaAllocator::Default => "default",
            CudaAllocator::Platform => "platform",
            CudaAllocator::Bfc => "bfc",
            CudaAllocator::CudaAsync => "cuda_async",
        }
    }
}

impl std::str::FromStr for CudaAllocator {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "default" => CudaAllocator::Default,
            "platform" => CudaAllocator::Platform,
            "bfc" => CudaAllocator::Bfc,
            "cuda_async" | "async" => CudaAllocator::CudaAsync,
            other => {
                return Err(Error::InvalidArgument(format!(
                "unknown CUDA allocator {other:?}; expected default, platform, bfc or cuda_async"
            )))
            }
        })
    }
}

/// Creation options of a CUDA PJRT client (see the module docs). `None`
/// fields are not sent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CudaOptions {
    /// `platform_name` (the StreamExecutor platform; `cuda`).
    pub platform_name: Option<String>,
    /// `allocator`.
    pub allocator: Option<CudaAllocator>,
    /// `memory_fraction`, in (0, 1]: the most of the GPU's memory the pool
    /// may take (with preallocation: what it takes up front).
    pub memory_fraction: Option<f32>,
    /// `preallocate`: reserve `memory_fraction` at client creation.
    pub preallocate: Option<bool>,
    /// `collective_memory_size` in bytes (NCCL buffers).
    pub collective_memory_size: Option<i64>,
    /// `visible_devices`: CUDA ordinals the client uses (default: all).
    pub visible_devices: Option<Vec<i64>>,
    /// `node_id` of this process in a multi-node run.
    pub node_id: Option<i64>,
    /// `num_nodes` of a multi-node run.
    pub num_nodes: Option<i64>,
    /// `should_stage_host_to_device_transfers`.
    pub stage_host_to_device: Option<bool>,
}

impl CudaOptions {
    /// hlobridge's defaults for sharing a GPU with torch: BFC allocator,
    /// no preallocation, at most 75% of the memory.
    pub fn shared_with_torch() -> Self {
        CudaOptions {
            allocator: Some(CudaAllocator::Bfc),
            preallocate: Some(false),
            memory_fraction: Some(0.75),
            ..Default::default()
        }
    }

    /// [`CudaOptions::shared_with_torch`] overridden by the
    /// `HLOBRIDGE_CUDA_*` environment variables (module docs).
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| hlobridge_config::Var::from_name(k).and_then(hlobridge_config::get))
    }

    /// As [`CudaOptions::from_env`], reading variables through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut o = Self::shared_with_torch();
        let var = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let bad = |k: &str, v: &str, want: &str| {
            Error::InvalidArgument(format!("{k}={v:?}: expected {want}"))
        };
        if let Some(v) = var("HLOBRIDGE_CUDA_ALLOCATOR") {
            o.allocator = Some(v.parse().map_err(|_| {
                bad(
                    "HLOBRIDGE_CUDA_ALLOCATOR",
                    &v,
                    "default, platform, bfc or cuda_async",
                )
            })?);
        }
        if let Some(v) = var("HLOBRIDGE_CUDA_MEMORY_FRACTION") {
            let f: f32 = v
                .trim()
                .parse()
                .map_err(|_| bad("HLOBRIDGE_CUDA_MEMORY_FRACTION", &v, "a number in (0, 1]"))?;
            o.memory_fraction = Some(f);
        }
        if let Some(v) = var("HLOBRIDGE_CUDA_PREALLOCATE") {
            o.preallocate = Some(match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" => true,
                "0" | "false" | "no" => false,
                _ => return Err(bad("HLOBRIDGE_CUDA_PREALLOCATE", &v, "0 or 1")),
            });
        }
        if let Some(v) = var("HLOBRIDGE_CUDA_VISIBLE_DEVICES") {
            let ids: std::result::Result<Vec<i64>, _> =
                v.split(',').map(|s| s.trim().parse::<i64>()).collect();
            o.visible_devices = Some(ids.map_err(|_| {
                bad(
                    "HLOBRIDGE_CUDA_VISIBLE_DEVICES",
                    &v,
                    "comma-separated CUDA ordinals (e.g. 0,1)",
                )
            })?);
        }
        o.validate()?;
        Ok(o)
    }

    /// Checks the values the plugin would otherwise reject later (or accept
    /// and misbehave on): the fraction range, non-negative ordinals without
    /// repeats, a node id below the node count.
    pub fn validate(&self) -> Result<()> {
        if let Some(f) = self.memory_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(Error::InvalidArgument(format!(
                    "CUDA memory_fraction must be in (0, 1], got {f}"
                )));
            }
        }
        if let Some(ids) = &self.visible_devices {
            if ids.is_empty() {
                return Err(Error::InvalidArgument(
                    "CUDA visible_devices is empty; leave it unset to use every GPU".into(),
                ));
            }
            let mut seen = std::collections::HashSet::new();
            for &i in ids {
                if i < 0 || !seen.insert(i) {
                    return Err(Error::InvalidArgument(format!(
                        "CUDA visible_devices {ids:?}: ordinals must be distinct and >= 0"
                    )));
                }
            }
        }
        if let Some(n) = self.collective_memory_size {
            if n < 0 {
                return Err(Error::InvalidArgument(format!(
                    "CUDA collective_memory_size must be >= 0, got {n}"
                )));
            }
        }
        match (self.node_id, self.num_nodes) {
            (Some(id), Some(n)) if n < 1 || id < 0 || id >= n => Err(Error::InvalidArgument(
                format!("CUDA node_id {id} must be in [0, num_nodes={n})"),
            )),
            (Some(_), None) | (None, Some(_)) => Err(Error::InvalidArgument(
                "CUDA node_id and num_nodes must be given together".into(),
            )),
            _ => Ok(()),
        }
    }

    /// The named values for `PJRT_Client_Create` (validated first).
    pub fn to_client_options(&self) -> Result<ClientOptions> {
        self.validate()?;
        let mut c = ClientOptions::new();
        if let Some(p) = &self.platform_name {
            c = c.set("platform_name", OptionValue::String(p.clone()));
        }
        if let Some(a) = self.allocator {
            c = c.allocator(a.as_str());
        }
        if let Some(f) = self.memory_fraction {
            c = c.memory_fraction(f);
        }
        if let Some(b) = self.preallocate {
            c = c.preallocate(b);
        }
        if let Some(n) = self.collective_memory_size {
            c = c.set("collective_memory_size", OptionValue::Int64(n));
        }
        if let Some(ids) = &self.visible_devices {
            c = c.visible_devices(ids);
        }
        if let (Some(id), Some(n)) = (self.node_id, self.num_nodes) {
            c = c.node_id(id).num_nodes(n);
        }
        if let Some(b) = self.stage_host_to_device {
            c = c.set(
                "should_stage_host_to_device_transfers",
                OptionValue::Bool(b),
            );
        }
        Ok(c)
    }
}

/// Loads the CUDA PJRT plugin found by [`crate::accel::find_cuda_plugin`]
/// and records `ptxas`/`libdevice` when [`crate::accel::find_cuda_data_dir`]
/// finds them, for every CUDA compile's options (no environment write: safe
/// from any thread). A missing plugin is
/// [`Error::NoPluginFound`] listing where it was looked for.
pub fn cuda_plugin() -> Result<Plugin> {
    let path = crate::accel::find_cuda_plugin().ok_or_else(|| Error::NoPluginFound {
        searched: format!(
            "the CUDA PJRT plugin (pip install jax-cuda12-pjrt; scripts/setup.sh puts it in \
             .venv/accel): {}",
            crate::accel::searched("HLOBRIDGE_CUDA_PLUGIN", crate::accel::CUDA_PLUGIN_REL)
        ),
    })?;
    if let Some(dir) = crate::accel::find_cuda_data_dir() {
        crate::accel::set_cuda_data_dir_flag(&dir);
    }
    Plugin::load(path)
}

/// Creates a client on the CUDA plugin with `options`. Needs a GPU and its
/// driver: without one the plugin's error comes back as [`Error::Pjrt`]
/// (`PJRT_Client_Create`), never a crash.
pub fn cuda_client(options: &CudaOptions) -> Result<Client> {
    let opts = options.to_client_options()?;
    let plugin = cuda_plugin()?;
    let client = Client::new(&plugin, &opts)?;
    if client.device_count() == 0 {
        return Err(Error::InvalidArgument(format!(
            "the CUDA plugin created a client with no addressable GPU (platform {:?})",
            client.platform_name()
        )));
    }
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn defaults_share_the_gpu_with_torch() {
        let o = CudaOptions::from_lookup(lookup(&[])).unwrap();
        let c = o.to_client_options().unwrap();
        assert_eq!(
            c.values,
            vec![
                ("allocator".into(), OptionValue::String("bfc".into())),
                ("memory_fraction".into(), OptionValue::Float(0.75)),
                ("preallocate".into(), OptionValue::Bool(false)),
            ]
        );
    }

    #[test]
    fn every_option_has_the_plugins_name_and_type() {
        let o = CudaOptions {
            platform_name: Some("cuda".into()),
            allocator: Some(CudaAllocator::CudaAsync),
            memory_fraction: Some(0.5),
            preallocate: Some(true),
            collective_memory_size: Some(1 << 20),
            visible_devices: Some(vec![1, 0]),
            node_id: Some(1),
            num_nodes: Some(2),
            stage_host_to_device: Some(false),
        };
        let c = o.to_client_options().unwrap();
        let m: HashMap<_, _> = c.values.into_iter().collect();
        assert_eq!(m["platform_name"], OptionValue::String("cuda".into()));
        assert_eq!(m["allocator"], OptionValue::String("cuda_async".into()));
        assert_eq!(m["memory_fraction"], OptionValue::Float(0.5));
        assert_eq!(m["preallocate"], OptionValue::Bool(true));
        assert_eq!(m["collective_memory_size"], OptionValue::Int64(1 << 20));
        assert_eq!(m["visible_devices"], OptionValue::Int64List(vec![1, 0]));
        assert_eq!(m["node_id"], OptionValue::Int64(1));
        assert_eq!(m["num_nodes"], OptionValue::Int64(2));
        assert_eq!(
            m["should_stage_host_to_device_transfers"],
            OptionValue::Bool(false)
        );
        assert_eq!(m.len(), 9);
    }

    #[test]
    fn environment_overrides_and_named_errors() {
        let o = CudaOptions::from_lookup(lookup(&[
            ("HLOBRIDGE_CUDA_ALLOCATOR", "platform"),
            ("HLOBRIDGE_CUDA_MEMORY_FRACTION", "0.3"),
            ("HLOBRIDGE_CUDA_PREALLOCATE", "1"),
            ("HLOBRIDGE_CUDA_VISIBLE_DEVICES", "2, 3"),
        ]))
        .unwrap();
        assert_eq!(o.allocator, Some(CudaAllocator::Platform));
        assert_eq!(o.memory_fraction, Some(0.3));
        assert_eq!(o.preallocate, Some(true));
        assert_eq!(o.visible_devices, Some(vec![2, 3]));
        for (k, v) in [
            ("HLOBRIDGE_CUDA_ALLOCATOR", "tlsf"),
            ("HLOBRIDGE_CUDA_MEMORY_FRACTION", "lots"),
            ("HLOBRIDGE_CUDA_MEMORY_FRACTION", "1.5"),
            ("HLOBRIDGE_CUDA_MEMORY_FRACTION", "0"),
            ("HLOBRIDGE_CUDA_PREALLOCATE", "maybe"),
            ("HLOBRIDGE_CUDA_VISIBLE_DEVICES", "0,x"),
            ("HLOBRIDGE_CUDA_VISIBLE_DEVICES", "1,1"),
            ("HLOBRIDGE_CUDA_VISIBLE_DEVICES", "-1"),
        ] {
            let e = CudaOptions::from_lookup(lookup(&[(k, v)])).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{k}={v}: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains(k) || msg.contains("memory_fraction") || msg.contains("visible"),
                "{k}={v}: {msg}"
            );
        }
    }

    #[test]
    fn node_ids_are_checked() {
        let mut o = CudaOptions {
            node_id: Some(2),
            num_nodes: Some(2),
            ..Default::default()
        };
        assert!(matches!(o.validate(), Err(Error::InvalidArgument(_))));
        o.num_nodes = None;
        assert!(matches!(o.validate(), Err(Error::InvalidArgument(_))));
        o.num_nodes = Some(3);
        o.validate().unwrap();
    }

    #[test]
    fn allocator_names_round_trip() {
        for a in [
            CudaAllocator::Default,
            CudaAllocator::Platform,
            CudaAllocator::Bfc,
            CudaAllocator::CudaAsync,
        ] {
            assert_eq!(a.as_str().parse::<CudaAllocator>().unwrap(), a);
        }
    }
}
