//! Compiling an artifact's modules: the CPU semantics flags hlobridge's
//! own runtime uses ([`pjrt_client::CPU_SEMANTICS`], so a served program
//! computes what the in-process one does), and the same persistent compile
//! cache as the Python package ([`pjrt_client::disk_cache`]: one
//! HMAC-checked, user-owned entry per plugin, host CPU, options and module
//! text), so a second `Model::load` of the same artifact deserializes
//! instead of compiling. `HLOBRIDGE_CACHE=0` turns the cache off, as for
//! Python.

use crate::error::Result;
use pjrt_client::disk_cache::{self, Config, Key};
use pjrt_client::{with_cpu_semantics, Client, CompileOptions, LoadedExecutable, Program};

/// Whether [`compile`] found the executable in the disk cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Compiled now (and stored, if the cache is on).
    Compiled,
    /// Deserialized from the disk cache.
    FromDisk,
}

/// Compiles `text` on `client` (or loads it from the disk cache).
pub fn compile(client: &Client, text: &str) -> Result<(LoadedExecutable, Outcome)> {
    let mut options = CompileOptions::default();
    if client.platform_name().eq_ignore_ascii_case("cpu") {
        options.xla_options = with_cpu_semantics(Vec::new());
    }
    let cfg = Config::from_env();
    let store = if cfg.enabled {
        disk_cache::open(&cfg)
    } else {
        None
    };
    let Some(store) = store else {
        let exe = client.compile(&Program::mlir_text(text), &options)?;
        return Ok((exe, Outcome::Compiled));
    };
    let encoded = options.encode();
    let ident = disk_cache::plugin_identity(client, client.api().path());
    let host = disk_cache::host_id();
    let key = Key {
        plugin: &ident,
        host: &host,
        options: &encoded,
        text,
    };
    if let Some(bytes) = store.load(&key) {
        match client.deserialize_executable(&bytes, None) {
            Ok(exe) => return Ok((exe, Outcome::FromDisk)),
            Err(e) => {
                tracing::warn!(error = %e, "compile cache: entry does not deserialize; compiling");
                store.discard(&key);
            }
        }
    }
    let exe = client.compile(&Program::mlir_text(text), &options)?;
    match exe.serialize() {
        Ok(bytes) => store.store(&key, &bytes),
        Err(e) => tracing::warn!(error = %e, "compile cache: cannot serialize; not cached"),
    }
    Ok((exe, Outcome::Compiled))
}
