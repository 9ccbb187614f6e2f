//! What identifies one compilation, for both caches: the encoded compile
//! options, the host lowering's tag, the environment the plugin reads into
//! code generation ([`ENV_INPUTS`]), the plugin binary and the host CPU
//! (disk only: in memory the client fixes them), and the module text.
//! docs/compile_cache.md lists every part and why.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Environment variables the plugin reads that change the code it
/// generates or the numerics of what it runs, found in the XLA sources and
/// the CPU plugin binary (`strings xla_cpu_pjrt.so`):
///
/// - `XLA_FLAGS`: every `DebugOptions` flag (`--xla_cpu_enable_fast_math`,
///   `--xla_cpu_fast_math_honor_nans`, `--xla_cpu_max_isa`, ...), parsed
///   once per process;
/// - `PJRT_NPROC`: the CPU client's thread/device count;
/// - `ONEDNN_MAX_CPU_ISA`, `DNNL_MAX_CPU_ISA`, `ONEDNN_DEFAULT_FPMATH_MODE`,
///   `DNNL_DEFAULT_FPMATH_MODE`: oneDNN's ISA cap and implicit down-
///   conversion (bf16/tf32) of f32 math in the oneDNN kernels XLA:CPU may
///   call.
///
/// Not read by the plugin, so not keyed: `TF_XLA_FLAGS` (TensorFlow's own),
/// `TF_CPP_*` (logging), `OMP_NUM_THREADS`, `LLVM_*` (symbolizer).
pub const ENV_INPUTS: &[&str] = &[
    "XLA_FLAGS",
    "PJRT_NPROC",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "DNNL_DEFAULT_FPMATH_MODE",
];

/// The values of [`ENV_INPUTS`] that are set, as `NAME=value` lines, read
/// once per process: the plugin too parses them once (XLA reads
/// `XLA_FLAGS` the first time it needs `DebugOptions`), so a value changed
/// later in the process would name code the plugin never generated. Front
/// ends that create a client call this before creating it
/// ([`snapshot_environment`]); otherwise the first compile takes it.
pub fn environment() -> &'static str {
    static ENV: OnceLock<String> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut s = String::new();
        for name in ENV_INPUTS {
            if let Some(v) = std::env::var_os(name) {
                s.push_str(name);
                s.push('=');
                s.push_str(&v.to_string_lossy());
                s.push('\n');
            }
        }
        s
    })
}

/// Takes the [`environment`] snapshot now (call before creating a client).
pub fn snapshot_environment() {
    let _ = environment();
}

/// The plugin identity of `client` ([`pjrt_client::disk_cache::plugin_identity`]),
/// computed once per plugin path and client configuration.
pub(crate) fn plugin_identity(client: &pjrt_client::Client) -> String {
    type Ids = Mutex<HashMap<(PathBuf, usize), String>>;
    static IDS: OnceLock<Ids> = OnceLock::new();
    let path: &Path = client.api().path();
    let k = (path.to_path_buf(), client.device_count());
    let ids = IDS.get_or_init(Default::default);
    let known = ids
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&k)
        .cloned();
    if let Some(id) = known {
        return id;
    }
    // Computed outside the lock (it reads the plugin file).
    let id = pjrt_client::disk_cache::plugin_identity(client, path);
    ids.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(k, id.clone());
    id
}

/// Format of the service's cache entries (the payload starts with the host
/// report); part of every key, so older entries are misses, not errors.
const FORMAT: &str = "hlobridge-compile.v1";

/// The options part of both keys: encoded options, lowering tag, the
/// environment and the entry format, each length-prefixed.
pub(crate) fn options_part(encoded_options: &[u8], lowering_tag: &str) -> Vec<u8> {
    let env = environment();
    let mut out = Vec::with_capacity(encoded_options.len() + lowering_tag.len() + env.len() + 64);
    for part in [
        encoded_options,
        lowering_tag.as_bytes(),
        env.as_bytes(),
        FORMAT.as_bytes(),
    ] {
        out.extend_from_slice(&(part.len() as u64).to_le_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// The memory-cache key's content (without the client): options part and
/// text.
pub(crate) fn content_key(options: &[u8], text: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + options.len() + text.len());
    key.extend_from_slice(&(options.len() as u64).to_le_bytes());
    key.extend_from_slice(options);
    key.extend_from_slice(text.as_bytes());
    key
}

/// Short content fingerprint (hex) for receipts and logs; the caches
/// compare full keys.
pub(crate) fn fingerprint(content_key: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    content_key.hash(&mut h);
    format!("{:016x}", h.finish())
}
