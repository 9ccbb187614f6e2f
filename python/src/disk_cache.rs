//! The persistent compile cache: serialized executables on disk, so a new
//! process skips XLA compilation of a program some earlier process already
//! compiled with the same options on the same plugin.
//!
//! One file per program, `<dir>/<sha256-hex>.pjrt`, where the SHA-256 is of
//! the full key: plugin identity (library path, size and modification time,
//! platform name and version, PJRT API version, device count), the encoded
//! `CompileOptionsProto` and the module text. The file starts with a header
//! holding that full key, compared byte for byte on lookup, so even a hash
//! collision can never load the wrong program; the serialized executable
//! follows.
//!
//! Files are written atomically (temporary file + rename). After each write
//! the least recently used files (by modification time, refreshed on every
//! hit) are evicted until the directory is within the size limit. Unreadable,
//! corrupt or incompatible files are logged with `tracing::warn!`, deleted,
//! and the program is compiled normally: the cache never makes a compile
//! fail.
//!
//! Environment:
//! - `HLOBRIDGE_CACHE=0` (or `false`/`off`/`no`) disables it;
//! - `HLOBRIDGE_CACHE_DIR` sets the directory (default
//!   `$XDG_CACHE_HOME/hlobridge/executables`, else
//!   `~/.cache/hlobridge/executables`);
//! - `HLOBRIDGE_CACHE_MAX_BYTES` sets the size limit (default 2 GiB).

use crate::stats::Counter;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Magic and format version at the start of every cache file.
const MAGIC: &[u8; 8] = b"HLBXC001";
/// Default size limit: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// File extension of cache entries.
const EXT: &str = "pjrt";

/// Executables written to the disk cache by this process.
pub static DISK_WRITES: Counter = Counter::new();

/// The cache's settings, read from the environment on each use (cheap next
/// to a compile, and lets a process change them at run time).
#[derive(Clone, Debug)]
pub struct Config {
    /// Whether the disk cache is used.
    pub enabled: bool,
    /// The directory holding the entries.
    pub dir: PathBuf,
    /// Size limit in bytes.
    pub max_bytes: u64,
}

impl Config {
    /// The settings from `HLOBRIDGE_CACHE`, `HLOBRIDGE_CACHE_DIR` and
    /// `HLOBRIDGE_CACHE_MAX_BYTES`.
    pub fn from_env() -> Config {
        let enabled = !std::env::var("HLOBRIDGE_CACHE").is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "0" | "false" | "off" | "no"
            )
        });
        let dir = std::env::var_os("HLOBRIDGE_CACHE_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(default_dir);
        let max_bytes = match std::env::var("HLOBRIDGE_CACHE_MAX_BYTES") {
            Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                tracing::warn!(value = %v, "HLOBRIDGE_CACHE_MAX_BYTES is not a byte count; using 2 GiB");
                DEFAULT_MAX_BYTES
            }),
            Err(_) => DEFAULT_MAX_BYTES,
        };
        Config {
            enabled,
            dir,
            max_bytes,
        }
    }
}

fn default_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(|| std::env::temp_dir().join("hlobridge-cache"));
    base.join("hlobridge").join("executables")
}

/// The full identity of one compilation.
pub struct Key<'a> {
    /// Plugin identity (see [`plugin_identity`]).
    pub plugin: &'a str,
    /// Encoded compile options.
    pub options: &'a [u8],
    /// Module text.
    pub text: &'a str,
}

impl Key<'_> {
    /// The header bytes: every part length-prefixed.
    fn header(&self) -> Vec<u8> {
        let mut h =
            Vec::with_capacity(40 + self.plugin.len() + self.options.len() + self.text.len());
        h.extend_from_slice(MAGIC);
        for part in [self.plugin.as_bytes(), self.options, self.text.as_bytes()] {
            h.extend_from_slice(&(part.len() as u64).to_le_bytes());
            h.extend_from_slice(part);
        }
        h
    }

    /// Hex SHA-256 of the header (the file name).
    pub fn digest(&self) -> String {
        let d = Sha256::digest(self.header());
        d.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A string identifying the plugin build and client configuration: an
/// executable serialized under one identity is only loaded under the same.
pub fn plugin_identity(client: &pjrt_client::Client, plugin_path: &Path) -> String {
    let (size, mtime) = match fs::metadata(plugin_path) {
        Ok(m) => (
            m.len(),
            m.modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos()),
        ),
        Err(_) => (0, 0),
    };
    let (major, minor) = client.api().version();
    format!(
        "plugin={};size={size};mtime={mtime};platform={};version={};pjrt_api={major}.{minor};devices={}",
        plugin_path.display(),
        client.platform_name(),
        client.platform_version(),
        client.device_count()
    )
}

/// Path of the entry for `key` in `dir`.
pub fn entry_path(dir: &Path, key: &Key<'_>) -> PathBuf {
    dir.join(format!("{}.{EXT}", key.digest()))
}

/// The serialized executable stored for `key`, if any. A file that is not
/// a valid entry is deleted (with a warning); one holding a different key
/// (a hash collision) is left alone and reported as a miss.
pub fn load(dir: &Path, key: &Key<'_>) -> Option<Vec<u8>> {
    let path = entry_path(dir, key);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "compile cache: cannot read entry; compiling");
            return None;
        }
    };
    let header = key.header();
    if bytes.len() < header.len() + 8 || &bytes[..MAGIC.len()] != MAGIC {
        tracing::warn!(path = %path.display(), "compile cache: corrupt entry (bad header); deleting it and compiling");
        discard(&path);
        return None;
    }
    if bytes[..header.len()] != header[..] {
        // Same SHA-256, different key: never hand back another program.
        tracing::warn!(path = %path.display(), "compile cache: entry holds a different program (hash collision); compiling");
        return None;
    }
    let rest = &bytes[header.len()..];
    let (len, payload) = rest.split_at(8);
    let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    if len != payload.len() as u64 || payload.is_empty() {
        tracing::warn!(path = %path.display(), "compile cache: truncated entry; deleting it and compiling");
        discard(&path);
        return None;
    }
    // A hit is a use: refresh the mtime for LRU eviction.
    if let Err(e) = fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(SystemTime::now()))
    {
        tracing::debug!(path = %path.display(), error = %e, "compile cache: cannot touch entry");
    }
    Some(payload.to_vec())
}

/// Deletes an entry that could not be used (warnings already logged).
pub fn discard(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "compile cache: cannot delete entry");
        }
    }
}

/// Stores `payload` for `key` atomically, then evicts down to `max_bytes`.
/// Failures are logged, never returned: the program is already compiled.
pub fn store(cfg: &Config, key: &Key<'_>, payload: &[u8]) {
    match write_entry(&cfg.dir, key, payload) {
        Ok(path) => {
            DISK_WRITES.add(1);
            tracing::debug!(path = %path.display(), bytes = payload.len(), "compile cache: stored executable");
            if let Err(e) = evict(&cfg.dir, cfg.max_bytes) {
                tracing::warn!(dir = %cfg.dir.display(), error = %e, "compile cache: eviction failed");
            }
        }
        Err(e) => {
            tracing::warn!(dir = %cfg.dir.display(), error = %e, "compile cache: cannot store executable");
        }
    }
}

fn write_entry(dir: &Path, key: &Key<'_>, payload: &[u8]) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let path = entry_path(dir, key);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!(
        ".{}.{}.{nanos}.tmp",
        key.digest(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&key.header())?;
        f.write_all(&(payload.len() as u64).to_le_bytes())?;
        f.write_all(payload)?;
        f.flush()?;
        drop(f);
        fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

/// Entries (`*.pjrt`) in `dir`: path, size, modification time.
fn entries(dir: &Path) -> io::Result<Vec<(PathBuf, u64, SystemTime)>> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for ent in rd.flatten() {
        let path = ent.path();
        let Ok(meta) = ent.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if path.extension().is_some_and(|e| e == EXT) {
            out.push((path, meta.len(), mtime));
        } else if path.extension().is_some_and(|e| e == "tmp")
            && mtime.elapsed().unwrap_or_default() > Duration::from_secs(3600)
        {
            // A writer that died before its rename.
            let _ = fs::remove_file(&path);
        }
    }
    Ok(out)
}

/// Removes the least recently used entries until the total is at most
/// `max_bytes`. Returns how many were removed.
pub fn evict(dir: &Path, max_bytes: u64) -> io::Result<usize> {
    let mut list = entries(dir)?;
    let mut total: u64 = list.iter().map(|e| e.1).sum();
    if total <= max_bytes {
        return Ok(0);
    }
    list.sort_by_key(|e| e.2);
    let mut removed = 0;
    for (path, size, _) in list {
        if total <= max_bytes {
            break;
        }
        match fs::remove_file(&path) {
            Ok(()) => {
                total -= size;
                removed += 1;
                tracing::debug!(path = %path.display(), bytes = size, "compile cache: evicted");
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => total -= size,
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Number of entries and their total size in `dir`.
pub fn usage(dir: &Path) -> (usize, u64) {
    let list = entries(dir).unwrap_or_default();
    (list.len(), list.iter().map(|e| e.1).sum())
}
