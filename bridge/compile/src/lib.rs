//! The one compile service: "StableHLO text → loaded executable" for every
//! hlobridge front end (the Python extension, `hlobridge-deploy` and
//! `hlobridge serve`, the CLI's `run`, `stitch --run`, `conform` and
//! `compile --target cpu`).
//!
//! It owns every step, in this order:
//!
//! 1. **Options** ([`prepare`]): the caller's compile options (partitions,
//!    replicas), [`pjrt_client::CPU_SEMANTICS`] on the `cpu` platform, then
//!    the policy's XLA overrides (sorted by name); on CUDA the CUDA data
//!    dir ([`pjrt_client::accel::cuda_xla_options`]).
//! 2. **Host lowering**: on `cpu`, when the client registered the host
//!    kernels, products and convolutions become host-kernel calls
//!    ([`hlobridge::lower::host_lowering_for`]); what was rewritten comes
//!    back as a [`HostReport`] naming the kernels.
//! 3. **Memory cache** (policy): one executable per client and content,
//!    shared by every caller while any holds it, plus the most recently
//!    used few (`HLOBRIDGE_MEMORY_CACHE_ENTRIES`): bounded, because each
//!    live program holds memory mappings and Linux caps their number.
//! 4. **Disk cache** (policy): the persistent cache
//!    ([`pjrt_client::disk_cache`]), keyed by everything that changes the
//!    generated code ([`key`]: options, lowering tag, [`ENV_INPUTS`],
//!    plugin binary, host CPU, text).
//! 5. **Fallback**: a lowered program that does not compile is compiled
//!    as given (logged), never an error of its own.
//!
//! Front ends differ only in the [`CompilePolicy`] they pass.
//!
//! Lock rule (from the Python extension, which forwards `tracing` events to
//! Python `logging` under the GIL): no event is emitted, and nothing whose
//! destructor may log is dropped, while a lock of this crate is held.

mod error;
pub mod key;
mod mappings;
mod memory;
mod policy;
mod report;

pub use error::{CompileError, Result};
pub use key::{environment, snapshot_environment, ENV_INPUTS};
pub use memory::{
    clear_memory_cache, forget_memory_cache_for_fork, memory_cache_sizes, retained_capacity,
};
pub use policy::{CompilePolicy, DiskCacheMode, HostLoweringMode};
pub use report::HostReport;

use hlobridge::lower::HostLowering;
use pjrt_client::disk_cache::{self, Config, Key, Store};
use pjrt_client::{Client, CompileOptions, LoadedExecutable, Program};
use std::sync::Arc;
use std::time::Instant;

/// A compiled (or cache-loaded) program.
#[derive(Debug)]
pub struct Compiled {
    /// The executable, loaded on the client.
    pub exe: LoadedExecutable,
    /// Short content fingerprint (hex) of the key (options, lowering,
    /// environment, text).
    pub fingerprint: String,
    /// Seconds the compilation took (for a disk hit: reading and
    /// deserializing).
    pub compile_s: f64,
    /// Loaded from the disk cache.
    pub from_disk: bool,
    /// What the host lowering rewrote (the kernels the program calls).
    pub host: HostReport,
}

/// [`compile`]'s answer.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The program (shared with other callers when it came from memory).
    pub compiled: Arc<Compiled>,
    /// Served by the memory cache.
    pub from_memory: bool,
}

/// The options and lowering the service compiles a program with (steps 1
/// and 2), for a front end that compiles through another PJRT call
/// ([`pjrt_client::compile_for_target`]) but must compile the same program.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The final compile options.
    pub options: CompileOptions,
    /// The host lowering to apply, if any.
    pub lowering: Option<HostLowering>,
}

/// Steps 1 and 2 for `client`: final options and lowering.
pub fn prepare(client: &Client, base: CompileOptions, policy: &CompilePolicy) -> Result<Prepared> {
    let mut options = base;
    let mut overrides = std::mem::take(&mut options.xla_options);
    let mut extra = policy.xla_overrides.clone();
    // Stable sort: for a name given twice the later value still wins.
    extra.sort_by(|a, b| a.0.cmp(&b.0));
    overrides.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
    overrides.extend(extra);
    let platform = client.platform_name().to_ascii_lowercase();
    options.xla_options = if platform == "cpu" && policy.cpu_semantics {
        pjrt_client::with_cpu_semantics(overrides)
    } else {
        overrides
    };
    if platform == "cuda" || platform == "gpu" {
        // ptxas/libdevice as an option, never through XLA_FLAGS.
        pjrt_client::accel::add_cuda_xla_options(&mut options);
    }
    let needed = options.num_partitions.max(1) * options.num_replicas.max(1);
    if needed > client.device_count() {
        return Err(CompileError::TooFewDevices {
            needed,
            partitions: options.num_partitions.max(1),
            replicas: options.num_replicas.max(1),
            available: client.device_count(),
        });
    }
    let lowering = match policy.host_lowering {
        HostLoweringMode::Off => None,
        HostLoweringMode::Auto if client.host_kernels().gemm => {
            hlobridge::lower::host_lowering_for(client.platform_name())
        }
        HostLoweringMode::Auto => None,
    };
    Ok(Prepared { options, lowering })
}

impl Prepared {
    /// The lowering's cache tag (empty without one).
    pub fn lowering_tag(&self) -> String {
        self.lowering.map(|l| l.cache_tag()).unwrap_or_default()
    }

    /// Lowers `text` and compiles it with `compile_text`; if the lowered
    /// text does not compile, compiles `text` as given (step 5). Returns
    /// what `compile_text` returned and the host report. Logs; call with
    /// no lock held.
    pub fn compile_with<T>(
        &self,
        text: &str,
        mut compile_text: impl FnMut(&str) -> pjrt_client::Result<T>,
    ) -> Result<(T, HostReport)> {
        let mut report = HostReport {
            lowering: self.lowering_tag(),
            ..HostReport::default()
        };
        let lowered = self
            .lowering
            .as_ref()
            .and_then(|l| hlobridge::lower::lower_text_for_host_report(text, l));
        let Some((program, full)) = lowered else {
            let out = compile_text(text)?;
            return Ok((out, report));
        };
        report.gemm_rewritten = full.gemm.rewritten;
        report.gemm_products = full.gemm.products;
        report.conv_rewritten = full.conv.rewritten;
        report.convolutions = full.conv.convolutions;
        report.dot_operands = full.dot_operands.rewritten;
        report.reduce_stages = full.reduce_stages.rewritten;
        match compile_text(&program) {
            Ok(out) => {
                report.kernels = report::count_kernels(&program);
                Ok((out, report))
            }
            // A plugin without the oneDNN convolution thunk, or a caller
            // that serializes the executable (the thunk does not
            // serialize): the same lowering without the oneDNN route.
            Err(e) if full.conv.onednn > 0 || full.gemm.onednn > 0 || full.softmax > 0 => {
                tracing::debug!(error = %e, "host lowering: compiling again without the oneDNN calls");
                let mut plain = self.lowering.expect("lowered above");
                plain.conv = plain.conv.map(|p| p.with_onednn(false));
                plain.gemm = plain.gemm.map(|p| p.with_onednn(None));
                plain.softmax = None;
                let retry = Prepared {
                    options: self.options.clone(),
                    lowering: Some(plain),
                };
                let (out, mut again) = retry.compile_with(text, compile_text)?;
                again.lowering = report.lowering;
                Ok((out, again))
            }
            // The lowered text should compile whenever the original does;
            // if it ever does not, run the original program.
            Err(e) => {
                tracing::warn!(error = %e, "host lowering: the lowered program does not compile; compiling the original");
                let out = compile_text(text)?;
                report.fell_back = true;
                Ok((out, report))
            }
        }
    }
}

/// Compiles StableHLO (or MLIR) `text` on `client` with `base` options
/// (partitions, replicas, device assignment) under `policy`: all five
/// steps of the module docs. Blocking; logs (call with no lock held).
pub fn compile(
    client: &Client,
    text: &str,
    base: CompileOptions,
    policy: &CompilePolicy,
) -> Result<Fetched> {
    let prepared = prepare(client, base, policy)?;
    let encoded = prepared.options.encode();
    let options_part = key::options_part(&encoded, &prepared.lowering_tag());
    let content = key::content_key(&options_part, text);
    if policy.memory_cache {
        if let Some(hit) = memory::get(client, &content) {
            tracing::debug!(fingerprint = %hit.fingerprint, kernels = %hit.host.kernels_line(), "compile cache hit");
            return Ok(Fetched {
                compiled: hit,
                from_memory: true,
            });
        }
    }
    let fp = key::fingerprint(&content);
    let cfg = match &policy.disk_cache {
        DiskCacheMode::Auto => Some(Config::from_env()).filter(|c| c.enabled),
        DiskCacheMode::At(dir) => Some(Config::at(dir)),
        DiskCacheMode::Off => None,
    };
    let store = cfg.as_ref().and_then(disk_cache::open);
    let (ident, host) = match &store {
        Some(_) => (key::plugin_identity(client), disk_cache::host_id()),
        None => (String::new(), String::new()),
    };
    let dkey = Key {
        plugin: &ident,
        host: &host,
        options: &options_part,
        text,
    };
    let loaded = store
        .as_ref()
        .and_then(|s| load_from_disk(client, s, &dkey, &fp));
    let compiled = match loaded {
        Some(c) => {
            tracing::info!(
                fingerprint = %c.fingerprint,
                seconds = c.compile_s,
                kernels = %c.host.kernels_line(),
                "loaded program from the disk compile cache"
            );
            c
        }
        None => {
            if let Some(hook) = policy.before_compile {
                hook()?;
            }
            let t0 = Instant::now();
            let (exe, host) = prepared
                .compile_with(text, |t| {
                    client.compile(&Program::mlir_text(t), &prepared.options)
                })
                .map_err(|e| match (e, mappings::near_limit()) {
                    (CompileError::Pjrt(source), Some((used, limit))) => {
                        CompileError::MappingLimit {
                            used,
                            limit,
                            source: Box::new(source),
                        }
                    }
                    (e, _) => e,
                })?;
            let c = Compiled {
                exe,
                fingerprint: fp,
                compile_s: t0.elapsed().as_secs_f64(),
                from_disk: false,
                host,
            };
            tracing::info!(
                fingerprint = %c.fingerprint,
                seconds = c.compile_s,
                bytes = text.len(),
                kernels = %c.host.kernels_line(),
                "compiled program"
            );
            // The plugin cannot serialize its oneDNN thunks: it throws a
            // C++ exception, which aborts the process (docs/host_conv.md).
            let onednn = c
                .host
                .kernels
                .keys()
                .any(|k| k.starts_with(hlobridge::lower::onednn_call::PREFIX));
            if onednn && store.is_some() {
                tracing::debug!("compile cache: a program with oneDNN calls is not cached on disk");
            }
            if let Some(store) = store.as_ref().filter(|_| !onednn) {
                match c.exe.serialize() {
                    Ok(bytes) => store.store(&dkey, &encode_payload(&c.host, &bytes)),
                    Err(e) => {
                        tracing::warn!(error = %e, "compile cache: the plugin cannot serialize executables; not cached on disk")
                    }
                }
            }
            c
        }
    };
    let compiled = if policy.memory_cache {
        memory::insert(client, content, compiled)
    } else {
        Arc::new(compiled)
    };
    Ok(Fetched {
        compiled,
        from_memory: false,
    })
}

/// Magic of the service's disk payload: the host report, then the
/// serialized executable.
const PAYLOAD_MAGIC: &[u8; 4] = b"HBR1";

fn encode_payload(report: &HostReport, exe: &[u8]) -> Vec<u8> {
    let r = report.encode();
    let mut out = Vec::with_capacity(8 + r.len() + exe.len());
    out.extend_from_slice(PAYLOAD_MAGIC);
    out.extend_from_slice(&(r.len() as u32).to_le_bytes());
    out.extend_from_slice(r.as_bytes());
    out.extend_from_slice(exe);
    out
}

fn decode_payload(bytes: &[u8]) -> Option<(HostReport, &[u8])> {
    let rest = bytes.strip_prefix(PAYLOAD_MAGIC)?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return None;
    }
    let (r, exe) = rest.split_at(len);
    let report = HostReport::decode(std::str::from_utf8(r).ok()?)?;
    Some((report, exe))
}

/// The program for `key` from the disk cache, or `None` (a miss, or an
/// entry that does not decode or deserialize: logged, deleted, compiled).
fn load_from_disk(client: &Client, store: &Store, key: &Key<'_>, fp: &str) -> Option<Compiled> {
    let t0 = Instant::now();
    let bytes = store.load(key)?;
    let why = match decode_payload(&bytes) {
        None => "not a hlobridge-compile entry".to_string(),
        Some((host, exe)) => match client.deserialize_executable(exe, None) {
            Ok(exe) => {
                return Some(Compiled {
                    exe,
                    fingerprint: fp.to_string(),
                    compile_s: t0.elapsed().as_secs_f64(),
                    from_disk: true,
                    host,
                })
            }
            Err(e) => e.to_string(),
        },
    };
    let path = disk_cache::entry_path(store.dir(), key);
    tracing::warn!(
        path = %path.display(),
        error = %why,
        "compile cache: entry does not deserialize (corrupt or incompatible); deleting it and compiling"
    );
    store.discard(key);
    None
}
