//! Reads an artifact directory defensively, each file once:
//!
//! - every file (`manifest.json`, the modules, the weights) must be a
//!   regular file: symlinks, FIFOs and devices are refused, checked with
//!   `symlink_metadata` and again on the opened descriptor (opened with
//!   `O_NOFOLLOW | O_NONBLOCK`, so neither a symlink swapped in nor a FIFO
//!   is followed or waited on);
//! - sizes are capped before reading: the manifest by [`MAX_MANIFEST`],
//!   every other file by the size the manifest records (or, for manifests
//!   without sizes, [`MAX_MODULE`] / [`MAX_WEIGHTS`]); a file that grows
//!   while read is refused;
//! - the manifest is checked, the content hash is computed over the bytes
//!   read, and the weights are parsed from those same bytes and checked
//!   against the manifest's dtypes and shapes.
//!
//! Callers run from the returned bytes; nothing is read twice.

use crate::error::{ArtifactError, Result};
use crate::manifest::{content_hash, element_type, Manifest};
use crate::safetensors::{self, TensorEntry};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest `manifest.json` read (16 MiB).
pub const MAX_MANIFEST: u64 = 16 << 20;
/// Largest module file when the manifest records no size (1 GiB).
pub const MAX_MODULE: u64 = 1 << 30;
/// Largest weights file when the manifest records no size (64 GiB).
pub const MAX_WEIGHTS: u64 = 64 << 30;

/// A verified artifact, held in memory.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The parsed manifest.
    pub manifest: Manifest,
    /// `manifest.json` as read.
    pub manifest_text: String,
    /// `(file, text)` of every module, in manifest order.
    pub modules: Vec<(String, String)>,
    /// The weights file's bytes.
    pub weights: Vec<u8>,
    /// The weights file's tensors (byte ranges into `weights`).
    pub entries: BTreeMap<String, TensorEntry>,
}

impl Verified {
    /// The bytes of the weight named `name` (checked against the manifest
    /// at read).
    pub fn weight_bytes(&self, name: &str) -> Option<&[u8]> {
        self.entries
            .get(name)
            .map(|e| &self.weights[e.range.clone()])
    }
}

fn refused(path: &Path, reason: impl Into<String>) -> ArtifactError {
    ArtifactError::Refused {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads one regular file of at most `cap` bytes (exactly `exact` bytes
/// when given), refusing symlinks and anything but a regular file.
pub fn read_regular(path: &Path, cap: u64, exact: Option<u64>) -> Result<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| ArtifactError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    check_meta(path, &meta, cap, exact)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refused(path, "is a symbolic link")
            } else {
                io(e)
            }
        })?;
    // The file opened may not be the one checked above: check it again.
    let meta = f.metadata().map_err(io)?;
    check_meta(path, &meta, cap, exact)?;
    let len = meta.len();
    let mut out = Vec::with_capacity(len as usize);
    f.take(len + 1).read_to_end(&mut out).map_err(io)?;
    if out.len() as u64 != len {
        return Err(refused(path, "changed size while it was read"));
    }
    Ok(out)
}

fn check_meta(path: &Path, meta: &std::fs::Metadata, cap: u64, exact: Option<u64>) -> Result<()> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Err(refused(path, "is a symbolic link"));
    }
    if !ft.is_file() {
        return Err(refused(path, "is not a regular file"));
    }
    if let Some(n) = exact {
        if meta.len() != n {
            return Err(refused(
                path,
                format!("is {} bytes, the manifest says {n}", meta.len()),
            ));
        }
    }
    if meta.len() > cap {
        return Err(refused(
            path,
            format!("is {} bytes, more than the {cap} allowed", meta.len()),
        ));
    }
    Ok(())
}

/// Checks the weights file's tensors against the manifest: every weight
/// parameter present with the manifest's dtype and shape.
pub fn check_weights(m: &Manifest, entries: &BTreeMap<String, TensorEntry>) -> Result<()> {
    for p in m.params.iter().filter(|p| p.weight) {
        let dt = element_type(&p.dtype)?;
        let e = entries.get(&p.name).ok_or_else(|| {
            ArtifactError::Safetensors(format!("weight {:?} is not in {}", p.name, m.weights_file))
        })?;
        if e.dtype != dt || e.shape != p.shape {
            return Err(ArtifactError::Safetensors(format!(
                "weight {:?}: the file has {:?}{:?}, the manifest says {}{:?}",
                p.name, e.dtype, e.shape, p.dtype, p.shape
            )));
        }
    }
    Ok(())
}

/// Reads and verifies the artifact in `dir` (see the module docs).
pub fn read_artifact(dir: &Path) -> Result<Verified> {
    read_artifact_for(dir, None)
}

/// [`read_artifact`], also requiring the producers the manifest records
/// (`torch`, `jax`...) to have the versions in `installed` (checked before
/// any file but the manifest is read): a [`ArtifactError::Version`] naming
/// each difference otherwise.
pub fn read_artifact_for(
    dir: &Path,
    installed: Option<&BTreeMap<String, String>>,
) -> Result<Verified> {
    let mpath = dir.join("manifest.json");
    let text = String::from_utf8(read_regular(&mpath, MAX_MANIFEST, None)?)
        .map_err(|_| ArtifactError::Manifest("not UTF-8".into()))?;
    let manifest = Manifest::parse(&text)?;
    if let Some(have) = installed {
        let diff: Vec<String> = manifest
            .producers
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(*v))
            .map(|(k, v)| {
                format!(
                    "{k}: artifact {v}, installed {}",
                    have.get(k).map_or("none", |s| s.as_str())
                )
            })
            .collect();
        if !diff.is_empty() {
            return Err(ArtifactError::Version(format!(
                "producer versions differ ({}); pass check_producers=False to load anyway",
                diff.join("; ")
            )));
        }
    }
    let file = |name: &str| -> PathBuf { dir.join(name) };
    let mut modules = Vec::with_capacity(manifest.modules.len());
    for f in &manifest.modules {
        let bytes = read_regular(&file(&f.file), f.size.unwrap_or(MAX_MODULE), f.size)?;
        let t = String::from_utf8(bytes)
            .map_err(|_| ArtifactError::Manifest(format!("{} is not UTF-8 text", f.file)))?;
        modules.push((f.file.clone(), t));
    }
    let weights = read_regular(
        &file(&manifest.weights_file),
        manifest.weights_size.unwrap_or(MAX_WEIGHTS),
        manifest.weights_size,
    )?;
    let mut files: Vec<(&str, &[u8])> = modules
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_bytes()))
        .collect();
    files.push((&manifest.weights_file, &weights));
    let actual = content_hash(&text, &manifest.content_hash, &files)?;
    if actual != manifest.content_hash {
        return Err(ArtifactError::HashMismatch {
            expected: manifest.content_hash.clone(),
            actual,
        });
    }
    let entries = safetensors::parse(&weights)?;
    check_weights(&manifest, &entries)?;
    Ok(Verified {
        manifest,
        manifest_text: text,
        modules,
        weights,
        entries,
    })
}
