//! The persistent compile cache: serialized executables on disk, so a new
//! process skips XLA compilation of a program some earlier process already
//! compiled with the same options on the same plugin and the same CPU.
//!
//! One file per program, `<dir>/<sha256-hex>.pjrt`, where the SHA-256 is of
//! the full key: plugin identity (library path, size, modification time, a
//! digest of its first and last MiB, platform name and version, PJRT API
//! version, device count), host identity (CPU vendor, model and ISA
//! features, see [`secure::host_id`]), the caller's options bytes (for
//! `hlobridge-compile`: the encoded `CompileOptionsProto`, the host
//! lowering tag and the compile-relevant environment) and the module text. The file starts with a
//! header holding that full key, compared byte for byte on lookup, so even a
//! hash collision can never load the wrong program; the serialized
//! executable follows, then an HMAC-SHA256 of everything before it under
//! the directory's secret. An entry whose MAC does not verify (another
//! program's payload behind this header, a truncated or corrupt file, a
//! file not written by this user) is never loaded.
//!
//! Only what this user wrote is trusted ([`secure`]): directories are
//! created 0700 and files 0600; a directory or entry that is group- or
//! world-writable or owned by another user is refused with a warning (the
//! program is compiled normally). Without `HOME` and `XDG_CACHE_HOME` the
//! cache lives in `<tmp>/hlobridge-<uid>/executables`, and `<tmp>/hlobridge-<uid>`
//! must be ours and mode 0700, else the disk cache is disabled for the
//! process.
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
//!   `~/.cache/hlobridge/executables`, else `<tmp>/hlobridge-<uid>/executables`);
//! - `HLOBRIDGE_CACHE_MAX_BYTES` sets the size limit (default 2 GiB);
//! - `HLOBRIDGE_CACHE_HOST_ID` replaces the detected host identity.

mod secure;

pub use secure::host_id;

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// Magic and format version at the start of every cache file.
const MAGIC: &[u8; 8] = b"HLBXC002";
/// Default size limit: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// File extension of cache entries.
const EXT: &str = "pjrt";

/// Executables written to the disk cache by this process.
pub static DISK_WRITES: Counter = Counter::new();

/// A process-wide event counter.
#[derive(Debug)]
pub struct Counter(std::sync::atomic::AtomicU64);

impl Counter {
    /// Zero.
    pub const fn new() -> Self {
        Counter(std::sync::atomic::AtomicU64::new(0))
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Default for Counter {
    fn default() -> Self {
        Self::new()
    }
}

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
    /// For the temp-dir fallback: the per-user directory above `dir`, which
    /// must be ours and mode 0700.
    private_root: Option<PathBuf>,
}

impl Config {
    /// The settings from `HLOBRIDGE_CACHE`, `HLOBRIDGE_CACHE_DIR` and
    /// `HLOBRIDGE_CACHE_MAX_BYTES`.
    pub fn from_env() -> Config {
        use hlobridge_config::Var;
        let enabled = !hlobridge_config::is_off(Var::Cache);
        let (dir, private_root) = match hlobridge_config::path(Var::CacheDir) {
            Some(d) => (d, None),
            None => default_dir(),
        };
        let enabled = enabled && !DISABLED.load(Ordering::Relaxed);
        let max_bytes = match hlobridge_config::parse(Var::CacheMaxBytes) {
            Ok(v) => v.unwrap_or(DEFAULT_MAX_BYTES),
            Err(e) => {
                tracing::warn!(value = %e.value, "HLOBRIDGE_CACHE_MAX_BYTES is not a byte count; using 2 GiB");
                DEFAULT_MAX_BYTES
            }
        };
        Config {
            enabled,
            dir,
            max_bytes,
            private_root,
        }
    }
}

impl Config {
    /// [`Config::from_env`] with the directory `dir` (a caller's own
    /// cache, e.g. a server's configured one), enabled.
    pub fn at(dir: impl Into<PathBuf>) -> Config {
        Config {
            enabled: !DISABLED.load(Ordering::Relaxed),
            dir: dir.into(),
            private_root: None,
            ..Config::from_env()
        }
    }
}

/// The default directory, and the per-user root to check when it is the
/// temp-dir fallback.
fn default_dir() -> (PathBuf, Option<PathBuf>) {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    match base {
        Some(b) => (b.join("hlobridge").join("executables"), None),
        None => {
            // A fixed name in a shared directory could be created first by
            // any local user: per-user, and checked to be ours and 0700.
            let root = std::env::temp_dir().join(format!("hlobridge-{}", secure::euid()));
            (root.join("executables"), Some(root))
        }
    }
}

/// Set when the temp-dir fallback is not ours: no disk cache for the rest
/// of the process.
static DISABLED: AtomicBool = AtomicBool::new(false);

/// Logs `msg` as a warning the first time it comes up in this process. The
/// event is emitted after the lock is released (it takes the GIL).
fn warn_once(msg: String) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let first = SEEN
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(msg.clone());
    if first {
        tracing::warn!("{msg}");
    }
}

/// A checked cache directory and its secret, ready for lookups and stores.
pub struct Store {
    /// Canonical path of the directory.
    dir: PathBuf,
    secret: [u8; 32],
    max_bytes: u64,
}

/// Opens the cache for one compile: creates the directory (0700) if needed,
/// checks it and its ancestors, and reads (or creates) its secret. `None`
/// (with a warning) when the directory is not trusted; the caller compiles
/// without the disk cache.
pub fn open(cfg: &Config) -> Option<Store> {
    if !cfg.enabled {
        return None;
    }
    if let Some(root) = &cfg.private_root {
        if let Err(why) = secure::prepare_dir(root, true) {
            DISABLED.store(true, Ordering::Relaxed);
            warn_once(format!(
                "compile cache: disabled for this process: the per-user temp directory is not safe: {why}"
            ));
            return None;
        }
    }
    let prepared = secure::prepare_dir(&cfg.dir, false)
        .and_then(|dir| secure::secret(&dir).map(|secret| (dir, secret)));
    match prepared {
        Ok((dir, secret)) => Some(Store {
            dir,
            secret,
            max_bytes: cfg.max_bytes,
        }),
        Err(why) => {
            warn_once(format!(
                "compile cache: refusing directory {}: {why}; compiling without the disk cache",
                cfg.dir.display()
            ));
            None
        }
    }
}

/// The full identity of one compilation.
pub struct Key<'a> {
    /// Plugin identity (see [`plugin_identity`]).
    pub plugin: &'a str,
    /// Host identity (see [`host_id`]).
    pub host: &'a str,
    /// Encoded compile options.
    pub options: &'a [u8],
    /// Module text.
    pub text: &'a str,
}

impl Key<'_> {
    /// The header bytes: every part length-prefixed.
    fn header(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(
            48 + self.plugin.len() + self.host.len() + self.options.len() + self.text.len(),
        );
        h.extend_from_slice(MAGIC);
        for part in [
            self.plugin.as_bytes(),
            self.host.as_bytes(),
            self.options,
            self.text.as_bytes(),
        ] {
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
pub fn plugin_identity(client: &crate::Client, plugin_path: &Path) -> String {
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
        "plugin={};size={size};mtime={mtime};sample={};platform={};version={};pjrt_api={major}.{minor};devices={}",
        plugin_path.display(),
        sample_digest(plugin_path),
        client.platform_name(),
        client.platform_version(),
        client.device_count()
    )
}

/// Hex SHA-256 of the plugin file's first and last MiB: tells apart two
/// builds that share a path, size and modification time (a reinstall that
/// keeps the times) without reading the whole library (hundreds of MiB).
fn sample_digest(path: &Path) -> String {
    use std::io::{Seek, SeekFrom};
    const SAMPLE: u64 = 1 << 20;
    let read = || -> io::Result<Vec<u8>> {
        let mut f = fs::File::open(path)?;
        let len = f.metadata()?.len();
        let mut buf = Vec::with_capacity(2 * SAMPLE as usize);
        (&mut f).take(SAMPLE).read_to_end(&mut buf)?;
        if len > SAMPLE {
            f.seek(SeekFrom::Start(len.saturating_sub(SAMPLE).max(SAMPLE)))?;
            f.take(SAMPLE).read_to_end(&mut buf)?;
        }
        Ok(buf)
    };
    match read() {
        Ok(b) => Sha256::digest(&b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect(),
        Err(_) => "unreadable".into(),
    }
}

/// Path of the entry for `key` in `dir`.
pub fn entry_path(dir: &Path, key: &Key<'_>) -> PathBuf {
    dir.join(format!("{}.{EXT}", key.digest()))
}

impl Store {
    /// The directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The serialized executable stored for `key`, if any. An entry that is
    /// not trusted (owner, mode), does not verify (MAC) or is not a valid
    /// entry is deleted with a warning; one holding a different key (a hash
    /// collision) is left alone and reported as a miss.
    pub fn load(&self, key: &Key<'_>) -> Option<Vec<u8>> {
        let path = entry_path(&self.dir, key);
        let (mut f, len) = match secure::open_trusted(&path, false) {
            Ok(Some(opened)) => opened,
            Ok(None) => return None,
            Err(why) => {
                tracing::warn!(path = %path.display(), "compile cache: refusing entry: {why}; deleting it and compiling");
                discard(&path);
                return None;
            }
        };
        let mut bytes = Vec::with_capacity(len as usize);
        if let Err(e) = f.read_to_end(&mut bytes) {
            tracing::warn!(path = %path.display(), error = %e, "compile cache: cannot read entry; compiling");
            return None;
        }
        let header = key.header();
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            tracing::warn!(path = %path.display(), "compile cache: corrupt entry (bad header); deleting it and compiling");
            discard(&path);
            return None;
        }
        if bytes.len() < header.len() + 8 + secure::MAC_LEN {
            tracing::warn!(path = %path.display(), "compile cache: truncated entry; deleting it and compiling");
            discard(&path);
            return None;
        }
        if bytes[..header.len()] != header[..] {
            // Same SHA-256, different key: never hand back another program.
            tracing::warn!(path = %path.display(), "compile cache: entry holds a different program (hash collision); compiling");
            return None;
        }
        let (body, mac) = bytes.split_at(bytes.len() - secure::MAC_LEN);
        if !secure::mac_eq(mac, &secure::hmac(&self.secret, &[body])) {
            tracing::warn!(
                path = %path.display(),
                "compile cache: entry fails its integrity check (forged, truncated or corrupt, \
                 or written under another secret); deleting it and compiling"
            );
            discard(&path);
            return None;
        }
        let (len, payload) = body[header.len()..].split_at(8);
        let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
        if len != payload.len() as u64 || payload.is_empty() {
            tracing::warn!(path = %path.display(), "compile cache: truncated entry; deleting it and compiling");
            discard(&path);
            return None;
        }
        // A hit is a use: refresh the mtime for LRU eviction (the owner may
        // set the times through a read-only descriptor).
        if let Err(e) = f.set_modified(SystemTime::now()) {
            tracing::debug!(path = %path.display(), error = %e, "compile cache: cannot touch entry");
        }
        Some(payload.to_vec())
    }

    /// Deletes the entry for `key` (it could not be used; warnings already
    /// logged).
    pub fn discard(&self, key: &Key<'_>) {
        discard(&entry_path(&self.dir, key));
    }

    /// Stores `payload` for `key` atomically, then evicts down to the size
    /// limit. Failures are logged, never returned: the program is already
    /// compiled.
    pub fn store(&self, key: &Key<'_>, payload: &[u8]) {
        match self.write_entry(key, payload) {
            Ok(path) => {
                DISK_WRITES.add(1);
                tracing::debug!(path = %path.display(), bytes = payload.len(), "compile cache: stored executable");
                if let Err(e) = evict(&self.dir, self.max_bytes) {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "compile cache: eviction failed");
                }
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "compile cache: cannot store executable");
            }
        }
    }

    fn write_entry(&self, key: &Key<'_>, payload: &[u8]) -> io::Result<PathBuf> {
        let path = entry_path(&self.dir, key);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let tmp = self.dir.join(format!(
            ".{}.{}.{nanos}.tmp",
            key.digest(),
            std::process::id()
        ));
        let result = (|| {
            let mut body = key.header();
            body.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            let mac = secure::hmac(&self.secret, &[&body, payload]);
            let mut f = secure::create_private(&tmp)?;
            f.write_all(&body)?;
            f.write_all(payload)?;
            f.write_all(&mac)?;
            f.flush()?;
            drop(f);
            fs::rename(&tmp, &path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map(|()| path)
    }
}

/// Deletes an entry that could not be used (warnings already logged).
fn discard(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "compile cache: cannot delete entry");
        }
    }
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
