//! The artifact's `manifest.json` and its content hash.
//!
//! The hash is SHA-256 over, in order, the manifest text with its own
//! `content_hash` value replaced by `sha256:` and 64 zeros, every module file
//! in manifest order, and the weights file; each section is framed as
//! `file name, 0x00, length as u64 little-endian, bytes`. Python's
//! `hlobridge.export` writes it the same way (both hash bytes, so no JSON
//! canonicalization is involved).

pub use crate::dynamic::{Dim, Dynamic, ShapeViolation, Symbol, FORMAT_DYNAMIC};
use crate::error::{ArtifactError, Result};
use pjrt_client::ElementType;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The format of a static artifact (one module per exported batch size).
/// This runtime also reads [`FORMAT_DYNAMIC`]; the writer picks the one an
/// artifact needs, so static artifacts stay readable by older runtimes.
pub const FORMAT: &str = "hlobridge-artifact/1";

/// Every format this runtime reads.
pub const FORMATS: [&str; 2] = [FORMAT, FORMAT_DYNAMIC];

/// The placeholder the hash is computed with.
pub const ZERO_HASH: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// One program parameter: a request input or a weight.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Param {
    /// The input's name (a request key) or the weight's safetensors key.
    pub name: String,
    /// MLIR element type name (`f32`, `bf16`, `i64`, `ui8`, `i1`...).
    pub dtype: String,
    /// Dims, for the first module (`modules[0]`).
    pub shape: Vec<i64>,
    /// Bound from the weights file at load; not part of a request.
    pub weight: bool,
    /// A dynamic artifact's dims (a size or a symbol per dim; `shape` is
    /// then the example's): see [`crate::dynamic`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dims: Option<Vec<Dim>>,
}

/// One program result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Output {
    /// Response key.
    pub name: String,
    /// MLIR element type name.
    pub dtype: String,
    /// Dims, for the first module.
    pub shape: Vec<i64>,
    /// A dynamic artifact's dims (see [`Param::dims`]; informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dims: Option<Vec<Dim>>,
}

/// One compiled variant of the program.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModuleFile {
    /// File name inside the artifact directory.
    pub file: String,
    /// The batch size this module was exported for (along `batch_dim`).
    #[serde(default)]
    pub batch: Option<i64>,
    /// The file's size in bytes: the reader refuses a larger file before
    /// reading it (artifacts written before this field: a fixed cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// The parsed manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// Must be [`FORMAT`].
    pub format: String,
    /// hlobridge version that wrote the artifact.
    pub hlobridge_version: String,
    /// Producer versions (`torch`, `torch_xla`, `jax`, `jaxlib`).
    #[serde(default)]
    pub producers: std::collections::BTreeMap<String, String>,
    /// What was exported (`torch.compile`, `jax`, `plan`).
    #[serde(default)]
    pub kind: String,
    /// Program parameters in order.
    pub params: Vec<Param>,
    /// Program results in order.
    pub outputs: Vec<Output>,
    /// The batch dimension of every request input and output, if any.
    #[serde(default)]
    pub batch_dim: Option<usize>,
    /// The module variants; the first one's shapes are those in `params`.
    pub modules: Vec<ModuleFile>,
    /// The safetensors file holding the weights.
    pub weights_file: String,
    /// The weights file's size in bytes (see [`ModuleFile::size`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_size: Option<u64>,
    /// Whether the exporter checked that every output row depends only on
    /// its own input row (permuting the example batch permutes the outputs,
    /// and changing the other rows leaves a row's outputs alone). `false`:
    /// padding and dynamic batching are refused for this artifact, and
    /// `batching_refused` says why. `None`: not checked (one row, or an
    /// artifact written before the check); treated as independent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_independent: Option<bool>,
    /// Why the exporter refused batching (with `rows_independent: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batching_refused: Option<String>,
    /// The symbolic dimensions of a dynamic artifact (format
    /// [`FORMAT_DYNAMIC`]; see [`crate::dynamic`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<Dynamic>,
    /// `sha256:<hex>` (see the module docs).
    pub content_hash: String,
}

impl Manifest {
    /// Parses and checks the manifest's internal consistency.
    pub fn parse(text: &str) -> Result<Manifest> {
        let m: Manifest =
            serde_json::from_str(text).map_err(|e| ArtifactError::Manifest(e.to_string()))?;
        if !FORMATS.contains(&m.format.as_str()) {
            return Err(ArtifactError::Version(format!(
                "artifact format {:?}, this runtime reads {FORMATS:?}",
                m.format
            )));
        }
        let ours = env!("CARGO_PKG_VERSION");
        if major_minor(&m.hlobridge_version) != major_minor(ours) {
            return Err(ArtifactError::Version(format!(
                "artifact written by hlobridge {}, this runtime is {ours}",
                m.hlobridge_version
            )));
        }
        if m.modules.is_empty() {
            return Err(ArtifactError::Manifest("no modules".into()));
        }
        for f in m.modules.iter().map(|f| &f.file).chain([&m.weights_file]) {
            if f.is_empty() || f.contains('/') || f.contains('\\') || f.starts_with('.') {
                return Err(ArtifactError::Manifest(format!(
                    "file name {f:?} is not a plain name inside the artifact"
                )));
            }
        }
        let mut names = std::collections::HashSet::new();
        for p in &m.params {
            element_type(&p.dtype)?;
            if !names.insert(p.name.as_str()) {
                return Err(ArtifactError::Manifest(format!(
                    "parameter {:?} twice",
                    p.name
                )));
            }
            if let Some(bd) = m.batch_dim {
                if !p.weight && bd >= p.shape.len() {
                    return Err(ArtifactError::Manifest(format!(
                        "input {:?} has no batch dim {bd}",
                        p.name
                    )));
                }
            }
        }
        let mut onames = std::collections::HashSet::new();
        for o in &m.outputs {
            element_type(&o.dtype)?;
            if !onames.insert(o.name.as_str()) {
                return Err(ArtifactError::Manifest(format!(
                    "output {:?} twice",
                    o.name
                )));
            }
            if let Some(bd) = m.batch_dim {
                if bd >= o.shape.len() {
                    return Err(ArtifactError::Manifest(format!(
                        "output {:?} has no batch dim {bd}",
                        o.name
                    )));
                }
            }
        }
        m.check_dynamic()?;
        if m.batch_dim.is_some()
            && !m.is_dynamic()
            && m.modules.iter().any(|f| f.batch.is_none_or(|b| b < 1))
        {
            return Err(ArtifactError::Manifest(
                "batch_dim is set but a module has no batch size".into(),
            ));
        }
        Ok(m)
    }

    /// Whether rows may be padded and batched together (see
    /// [`Manifest::rows_independent`]).
    pub fn batchable(&self) -> bool {
        self.batch_dim.is_some() && self.rows_independent != Some(false)
    }

    /// The exported batch sizes, ascending (empty without a batch dim).
    pub fn batch_sizes(&self) -> Vec<i64> {
        let mut sizes: Vec<i64> = self.modules.iter().filter_map(|f| f.batch).collect();
        sizes.sort_unstable();
        sizes
    }

    /// The exported batch size a batch of `rows` runs on: the one rule of
    /// every front end (`hlobridge_deploy::Model`, so `hlobridge serve`,
    /// and Python's `Artifact.run`). The size exported for `rows` itself;
    /// else, when the rows may be padded ([`Manifest::batchable`]), the
    /// smallest exported size above it (rows padded with zeros, outputs
    /// sliced back). The error says why, for the caller to wrap.
    ///
    /// A dynamic artifact runs every size its batch symbol allows as it is,
    /// and one below the symbol's `min` padded up to it (when batchable).
    pub fn bucket_for(&self, rows: i64) -> std::result::Result<i64, String> {
        if self.is_dynamic() {
            return match self.batch_symbol() {
                Some(sym) => crate::dynamic::dynamic_bucket(self, sym, rows),
                None => Err("this artifact has no batch dim".into()),
            };
        }
        let sizes = self.batch_sizes();
        let Some(&max) = sizes.last() else {
            return Err("this artifact has no batch dim".into());
        };
        if sizes.contains(&rows) {
            return Ok(rows);
        }
        if rows < 1 || rows > max {
            return Err(format!(
                "batch size {rows} must be 1..={max} (exported: {sizes:?})"
            ));
        }
        if !self.batchable() {
            return Err(format!(
                "batch size {rows} must be one of {sizes:?} (the exporter found that this \
                 model's rows are not independent, so inputs are not padded)"
            ));
        }
        Ok(sizes.into_iter().find(|&s| s > rows).unwrap_or(max))
    }
}

fn major_minor(v: &str) -> (&str, &str) {
    let mut it = v.split('.');
    (it.next().unwrap_or(""), it.next().unwrap_or(""))
}

/// The element type of a manifest dtype name.
pub fn element_type(name: &str) -> Result<ElementType> {
    ElementType::from_mlir_name(name)
        .ok_or_else(|| ArtifactError::Manifest(format!("unknown dtype {name:?}")))
}

/// The content hash of an artifact: `manifest_text` (with its own hash
/// value, whatever it is, replaced by [`ZERO_HASH`]) and the `(name, bytes)`
/// files in order.
pub fn content_hash(manifest_text: &str, claimed: &str, files: &[(&str, &[u8])]) -> Result<String> {
    let quoted = format!("\"{claimed}\"");
    if manifest_text.matches(&quoted).count() != 1 {
        return Err(ArtifactError::Manifest(
            "content_hash value must occur exactly once in the text".into(),
        ));
    }
    let zeroed = manifest_text.replacen(&quoted, &format!("\"{ZERO_HASH}\""), 1);
    let mut h = Sha256::new();
    let mut section = |name: &str, bytes: &[u8]| {
        h.update(name.as_bytes());
        h.update([0u8]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    section("manifest.json", zeroed.as_bytes());
    for (name, bytes) in files {
        section(name, bytes);
    }
    let digest = h.finalize();
    let mut s = String::from("sha256:");
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    Ok(s)
}

#[cfg(test)]
mod bucket_tests {
    use super::*;

    fn manifest(sizes: &[i64], rows_independent: Option<bool>) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            hlobridge_version: "0.0".into(),
            producers: Default::default(),
            kind: "forward".into(),
            params: vec![],
            outputs: vec![],
            batch_dim: Some(0),
            modules: sizes
                .iter()
                .map(|&b| ModuleFile {
                    file: format!("module.b{b}.mlir"),
                    batch: Some(b),
                    size: None,
                })
                .collect(),
            weights_file: "weights.safetensors".into(),
            weights_size: None,
            rows_independent,
            batching_refused: None,
            dynamic: None,
            content_hash: ZERO_HASH.into(),
        }
    }

    #[test]
    fn exported_sizes_run_as_they_are_and_others_on_the_next_larger() {
        let m = manifest(&[4, 1, 16], None);
        assert_eq!(m.batch_sizes(), vec![1, 4, 16]);
        let got: Vec<i64> = (1..=16).map(|b| m.bucket_for(b).unwrap()).collect();
        let want: Vec<i64> = (1..=16)
            .map(|b| {
                if b == 1 {
                    1
                } else if b <= 4 {
                    4
                } else {
                    16
                }
            })
            .collect();
        assert_eq!(got, want);
        for bad in [0, -1, 17] {
            let e = m.bucket_for(bad).unwrap_err();
            assert!(e.contains("must be 1..=16"), "{e}");
        }
    }

    #[test]
    fn rows_that_are_not_independent_are_never_padded() {
        let m = manifest(&[1, 4], Some(false));
        assert_eq!(m.bucket_for(4), Ok(4));
        let e = m.bucket_for(3).unwrap_err();
        assert!(
            e.contains("must be one of [1, 4]") && e.contains("not independent"),
            "{e}"
        );
    }
}
