//! Filesystem trust checks, the per-directory secret, HMAC and host
//! identity for the persistent compile cache.
//!
//! A cache entry is machine code that the process will run, so the cache
//! only trusts what this user wrote:
//! - directories it creates are made 0700 and files 0600 (set explicitly,
//!   whatever the umask);
//! - the cache directory must be owned by the effective user and not be
//!   group- or world-writable; each ancestor must be owned by that user or
//!   root, and if group- or world-writable must be sticky (like `/tmp`);
//! - an entry (and the secret) is opened without following symlinks and
//!   must be a regular file owned by the effective user and not group- or
//!   world-writable;
//! - every entry carries an HMAC-SHA256 of its key and payload under a
//!   32-byte random secret kept in the directory (`.hlobridge-key`, 0600):
//!   a header of one program followed by another's payload, a truncated or
//!   corrupt file, or a file written by anyone who cannot read the secret
//!   does not verify.
//!
//! The host identity (CPU vendor, model and ISA features) is part of every
//! key: an executable compiled for one CPU is never loaded on another.

use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Name of the secret file inside the cache directory.
pub const SECRET_FILE: &str = ".hlobridge-key";
/// Secret length in bytes.
const SECRET_LEN: usize = 32;
/// HMAC-SHA256 output length.
pub const MAC_LEN: usize = 32;

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Why `path` is not ours: owned by another user than the effective one.
fn foreign_owner(path: &Path, meta: &fs::Metadata) -> Option<String> {
    let me = euid();
    (meta.uid() != me).then(|| {
        format!(
            "{} is owned by uid {}, not by this user (uid {me})",
            path.display(),
            meta.uid()
        )
    })
}

/// Why a path is not trusted, or `None`.
fn untrusted_dir(path: &Path, meta: &fs::Metadata) -> Option<String> {
    if !meta.is_dir() {
        return Some(format!("{} is not a directory", path.display()));
    }
    if let Some(why) = foreign_owner(path, meta) {
        return Some(why);
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "{} is group- or world-writable (mode {:o})",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    None
}

/// Checks the ancestors of the (canonical) directory `dir`: each owned by
/// us or root, and sticky if group- or world-writable.
fn untrusted_ancestor(dir: &Path) -> Option<String> {
    let me = euid();
    for a in dir.ancestors().skip(1) {
        let meta = match fs::metadata(a) {
            Ok(m) => m,
            Err(e) => return Some(format!("cannot stat {}: {e}", a.display())),
        };
        if meta.uid() != me && meta.uid() != 0 {
            return Some(format!(
                "ancestor {} is owned by uid {}, neither this user (uid {me}) nor root",
                a.display(),
                meta.uid()
            ));
        }
        if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
            return Some(format!(
                "ancestor {} is group- or world-writable without the sticky bit (mode {:o})",
                a.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    None
}

/// Creates one directory 0700 (whatever the umask). An existing one is
/// left as it is (it is checked afterwards).
fn make_private_dir(path: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => fs::set_permissions(path, fs::Permissions::from_mode(0o700)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `dir` and its missing ancestors (each 0700), then checks the
/// chain. Returns the canonical path to use from then on, or why the
/// directory is not trusted. With `exact_private`, `dir` must be mode 0700
/// exactly (the shared temp-dir fallback).
pub fn prepare_dir(dir: &Path, exact_private: bool) -> Result<PathBuf, String> {
    let mut missing = Vec::new();
    let mut p = dir;
    while fs::symlink_metadata(p).is_err() {
        missing.push(p.to_path_buf());
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => break,
        }
    }
    for m in missing.iter().rev() {
        make_private_dir(m).map_err(|e| format!("cannot create {}: {e}", m.display()))?;
    }
    let canon = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?;
    let meta = fs::metadata(&canon).map_err(|e| format!("cannot stat {}: {e}", canon.display()))?;
    if let Some(why) = untrusted_dir(&canon, &meta) {
        return Err(why);
    }
    if exact_private && meta.mode() & 0o777 != 0o700 {
        return Err(format!(
            "{} must be mode 700, is {:o}",
            canon.display(),
            meta.mode() & 0o7777
        ));
    }
    if let Some(why) = untrusted_ancestor(&canon) {
        return Err(why);
    }
    Ok(canon)
}

/// Opens a file for reading without following symlinks (nor blocking on a
/// FIFO) and checks it: a regular file, owned by us, not group- or
/// world-writable; with `private`, not readable by others either.
/// `Ok(None)` if it does not exist; `Err(why)` if it is not trusted.
pub fn open_trusted(path: &Path, private: bool) -> Result<Option<(fs::File, u64)>, String> {
    let f = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
    };
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if let Some(why) = foreign_owner(path, &meta) {
        return Err(why);
    }
    let bad = if private { 0o077 } else { 0o022 };
    if meta.mode() & bad != 0 {
        return Err(format!(
            "{} has mode {:o} (must not be {} by group or others)",
            path.display(),
            meta.mode() & 0o7777,
            if private { "accessible" } else { "writable" }
        ));
    }
    Ok(Some((f, meta.len())))
}

/// Creates `path` for writing: new (never an existing file or symlink),
/// mode 0600 whatever the umask.
pub fn create_private(path: &Path) -> io::Result<fs::File> {
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

/// The directory's secret, created on first use (random, 0600). Returns why
/// it cannot be had, e.g. a secret file that others can read.
pub fn secret(dir: &Path) -> Result<[u8; SECRET_LEN], String> {
    let path = dir.join(SECRET_FILE);
    for _ in 0..2 {
        if let Some((mut f, len)) = open_trusted(&path, true)? {
            let mut key = [0u8; SECRET_LEN];
            if len != SECRET_LEN as u64 || f.read_exact(&mut key).is_err() {
                return Err(format!(
                    "{} is not a {SECRET_LEN}-byte secret",
                    path.display()
                ));
            }
            return Ok(key);
        }
        // Written under a temporary name, then linked: a concurrent
        // process either wins the link (and we read its secret) or loses.
        let mut key = [0u8; SECRET_LEN];
        fs::File::open("/dev/urandom")
            .and_then(|mut r| r.read_exact(&mut key))
            .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
        let tmp = dir.join(format!(".key.{}.tmp", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let written = create_private(&tmp).and_then(|mut f| f.write_all(&key));
        let linked = written.and_then(|()| fs::hard_link(&tmp, &path));
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => return Ok(key),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
        }
    }
    Err(format!("cannot create {}", path.display()))
}

/// HMAC-SHA256 (RFC 2104) of the concatenation of `parts` under `key`.
pub fn hmac(key: &[u8; SECRET_LEN], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    k[..SECRET_LEN].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    for p in parts {
        inner.update(p);
    }
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Constant-time equality of two MACs.
pub fn mac_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The host identity in every key: `HLOBRIDGE_CACHE_HOST_ID` if set (tests,
/// or to share a cache across machines known to be identical), else the
/// CPU vendor and model and a hash of its ISA feature flags.
pub fn host_id() -> String {
    if let Some(v) = hlobridge_config::get_os(hlobridge_config::Var::CacheHostId) {
        return format!("override:{}", v.to_string_lossy());
    }
    static DETECTED: OnceLock<String> = OnceLock::new();
    DETECTED.get_or_init(detect_host).clone()
}

fn detect_host() -> String {
    let mut vendor = String::new();
    let mut model = String::new();
    let mut flags = String::new();
    if let Ok(info) = fs::read_to_string("/proc/cpuinfo") {
        // The first processor's entry (they are the same CPU model).
        for line in info.lines() {
            if line.trim().is_empty() && !model.is_empty() {
                break;
            }
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            match k.trim() {
                "vendor_id" | "CPU implementer" => vendor = v.trim().to_string(),
                "model name" | "CPU part" => model = v.trim().to_string(),
                "flags" | "Features" => flags = v.trim().to_string(),
                _ => {}
            }
        }
    }
    flags.push_str(&isa_features());
    let h = Sha256::digest(flags.as_bytes());
    let hex: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "arch={};vendor={vendor};model={model};features={hex}",
        std::env::consts::ARCH
    )
}

/// Features the compiler may target, as detected at run time (also where
/// `/proc/cpuinfo` is missing).
#[cfg(target_arch = "x86_64")]
fn isa_features() -> String {
    let mut s = String::from(";detected:");
    macro_rules! feat {
        ($($f:tt),*) => {$(
            if std::arch::is_x86_feature_detected!($f) {
                s.push_str($f);
                s.push(',');
            }
        )*};
    }
    feat!(
        "sse4.2",
        "popcnt",
        "avx",
        "avx2",
        "fma",
        "bmi1",
        "bmi2",
        "f16c",
        "lzcnt",
        "movbe",
        "avx512f",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512cd",
        "avx512vnni",
        "avx512bf16",
        "avx512fp16",
        "gfni",
        "vaes",
        "vpclmulqdq",
        "sha",
        "adx"
    );
    s
}

#[cfg(not(target_arch = "x86_64"))]
fn isa_features() -> String {
    String::new()
}
