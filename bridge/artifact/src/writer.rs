//! Writes an artifact directory: the one writer behind Python's
//! `hlobridge.export` (through the extension) and Rust tools and tests.
//! The manifest records each file's size, and the written manifest is
//! parsed back before anything is written, so a manifest the reader would
//! refuse (a parameter named twice, say) is never written.

use crate::error::{ArtifactError, Result};
use crate::manifest::{content_hash, Manifest, FORMAT, FORMAT_DYNAMIC, ZERO_HASH};
use crate::safetensors;
use pjrt_client::ElementType;
use std::path::Path;

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    // Replace a symlink left at the path instead of writing through it.
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = std::fs::remove_file(path);
    }
    std::fs::write(path, bytes).map_err(|source| ArtifactError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `manifest` (its `content_hash` is computed here), the module texts
/// (`(file, text)`, matching `manifest.modules`) and the weights into `dir`
/// (created if missing). Returns the content hash.
pub fn write_artifact(
    dir: &Path,
    manifest: &Manifest,
    modules: &[(&str, &str)],
    weights: &[(&str, ElementType, &[i64], &[u8])],
) -> Result<String> {
    Ok(write_artifact_text(dir, manifest, modules, weights)?.0)
}

/// [`write_artifact`], also returning the manifest text as written.
pub fn write_artifact_text(
    dir: &Path,
    manifest: &Manifest,
    modules: &[(&str, &str)],
    weights: &[(&str, ElementType, &[i64], &[u8])],
) -> Result<(String, String)> {
    let mut m = manifest.clone();
    // The format the artifact needs: static ones stay readable by older runtimes.
    m.format = if m.is_dynamic() {
        FORMAT_DYNAMIC
    } else {
        FORMAT
    }
    .to_string();
    if modules.len() != m.modules.len()
        || modules
            .iter()
            .zip(&m.modules)
            .any(|((f, _), mf)| *f != mf.file)
    {
        return Err(ArtifactError::Manifest(
            "the module files do not match the manifest's modules".into(),
        ));
    }
    let st = safetensors::write(weights)?;
    for (mf, (_, t)) in m.modules.iter_mut().zip(modules) {
        mf.size = Some(t.len() as u64);
    }
    m.weights_size = Some(st.len() as u64);
    m.content_hash = ZERO_HASH.to_string();
    let text =
        serde_json::to_string_pretty(&m).map_err(|e| ArtifactError::Manifest(e.to_string()))?;
    let mut files: Vec<(&str, &[u8])> = modules.iter().map(|(f, t)| (*f, t.as_bytes())).collect();
    files.push((&m.weights_file, &st));
    let hash = content_hash(&text, ZERO_HASH, &files)?;
    let text = text.replacen(&format!("\"{ZERO_HASH}\""), &format!("\"{hash}\""), 1);
    // What the reader will check, checked before writing.
    let parsed = Manifest::parse(&text)?;
    crate::reader::check_weights(&parsed, &safetensors::parse(&st)?)?;
    std::fs::create_dir_all(dir).map_err(|source| ArtifactError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for (f, t) in modules {
        write_file(&dir.join(f), t.as_bytes())?;
    }
    write_file(&dir.join(&m.weights_file), &st)?;
    write_file(&dir.join("manifest.json"), text.as_bytes())?;
    Ok((hash, text))
}

/// The module text of [`demo_artifact`] for batch size `b`:
/// `y = x * w` (broadcast over rows), `s = sum(y, axis=1)`.
pub fn demo_module(b: i64) -> String {
    format!(
        "func.func public @main(%w: tensor<3xf32>, %x: tensor<{b}x3xf32>) -> (tensor<{b}x3xf32>, tensor<{b}xf32>) {{\n\
         \x20 %wb = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<3xf32>) -> tensor<{b}x3xf32>\n\
         \x20 %y = stablehlo.multiply %x, %wb : tensor<{b}x3xf32>\n\
         \x20 %z = stablehlo.constant dense<0.0> : tensor<f32>\n\
         \x20 %s = stablehlo.reduce(%y init: %z) applies stablehlo.add across dimensions = [1] : (tensor<{b}x3xf32>, tensor<f32>) -> tensor<{b}xf32>\n\
         \x20 return %y, %s : tensor<{b}x3xf32>, tensor<{b}xf32>\n\
         }}\n"
    )
}

/// Writes a tiny artifact for tests and examples: weight `w = [1, 2, 3]`
/// (f32), input `x: f32[b, 3]`, outputs `y = x * w` and `s = y.sum(1)`, one
/// module per batch size in `buckets` (batch dim 0; none when `buckets` is
/// empty: then one module for batch 2 and no batch dim).
pub fn demo_artifact(dir: &Path, buckets: &[i64]) -> Result<String> {
    use crate::manifest::{ModuleFile, Output, Param, FORMAT};
    let sizes: Vec<i64> = if buckets.is_empty() {
        vec![2]
    } else {
        buckets.to_vec()
    };
    let texts: Vec<(String, String)> = sizes
        .iter()
        .map(|b| (format!("module.b{b}.mlir"), demo_module(*b)))
        .collect();
    let b0 = sizes[0];
    let m = Manifest {
        format: FORMAT.into(),
        hlobridge_version: env!("CARGO_PKG_VERSION").into(),
        producers: Default::default(),
        kind: "stablehlo".into(),
        params: vec![
            Param {
                name: "w".into(),
                dtype: "f32".into(),
                shape: vec![3],
                weight: true,
                dims: None,
            },
            Param {
                name: "x".into(),
                dtype: "f32".into(),
                shape: vec![b0, 3],
                weight: false,
                dims: None,
            },
        ],
        outputs: vec![
            Output {
                name: "y".into(),
                dtype: "f32".into(),
                shape: vec![b0, 3],
                dims: None,
            },
            Output {
                name: "s".into(),
                dtype: "f32".into(),
                shape: vec![b0],
                dims: None,
            },
        ],
        batch_dim: if buckets.is_empty() { None } else { Some(0) },
        modules: texts
            .iter()
            .zip(&sizes)
            .map(|((f, _), b)| ModuleFile {
                file: f.clone(),
                batch: (!buckets.is_empty()).then_some(*b),
                size: None,
            })
            .collect(),
        weights_file: "weights.safetensors".into(),
        weights_size: None,
        rows_independent: Some(true),
        batching_refused: None,
        dynamic: None,
        content_hash: String::new(),
    };
    let w: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mods: Vec<(&str, &str)> = texts
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    write_artifact(dir, &m, &mods, &[("w", ElementType::F32, &[3], &w)])
}

/// The module text of [`demo_row_sum_artifact`] for batch size `b`:
/// `t = sum(x, axis=0)` kept as `[1, 3]`, so the result has ONE row
/// whatever the batch (a model the exporter would refuse).
pub fn row_sum_module(b: i64) -> String {
    format!(
        "func.func public @main(%x: tensor<{b}x3xf32>) -> tensor<1x3xf32> {{\n\
         \x20 %z = stablehlo.constant dense<0.0> : tensor<f32>\n\
         \x20 %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<{b}x3xf32>, tensor<f32>) -> tensor<3xf32>\n\
         \x20 %t = stablehlo.reshape %s : (tensor<3xf32>) -> tensor<1x3xf32>\n\
         \x20 return %t : tensor<1x3xf32>\n\
         }}\n"
    )
}

/// A broken artifact for tests: input `x: f32[b, 3]` with batch dim 0 and
/// one module per size in `buckets`, whose output `t = x.sum(0,
/// keepdim=True)` does NOT carry the batch; `rows_independent` as given.
/// Written without the exporter's checks (a hand-made or older artifact).
pub fn demo_row_sum_artifact(
    dir: &Path,
    buckets: &[i64],
    rows_independent: Option<bool>,
) -> Result<String> {
    use crate::manifest::{ModuleFile, Output, Param, FORMAT};
    let texts: Vec<(String, String)> = buckets
        .iter()
        .map(|b| (format!("module.b{b}.mlir"), row_sum_module(*b)))
        .collect();
    let m = Manifest {
        format: FORMAT.into(),
        hlobridge_version: env!("CARGO_PKG_VERSION").into(),
        producers: Default::default(),
        kind: "stablehlo".into(),
        params: vec![Param {
            name: "x".into(),
            dtype: "f32".into(),
            shape: vec![buckets[0], 3],
            weight: false,
            dims: None,
        }],
        outputs: vec![Output {
            name: "t".into(),
            dtype: "f32".into(),
            shape: vec![1, 3],
            dims: None,
        }],
        batch_dim: Some(0),
        modules: texts
            .iter()
            .zip(buckets)
            .map(|((f, _), b)| ModuleFile {
                file: f.clone(),
                batch: Some(*b),
                size: None,
            })
            .collect(),
        weights_file: "weights.safetensors".into(),
        weights_size: None,
        rows_independent,
        batching_refused: None,
        dynamic: None,
        content_hash: String::new(),
    };
    let mods: Vec<(&str, &str)> = texts
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    write_artifact(dir, &m, &mods, &[])
}

/// The module of [`demo_dynamic_artifact`]: [`demo_module`] with the batch
/// dim `?` (as `jax.export` writes it: the size read with
/// `get_dimension_size`, a `dynamic_broadcast_in_dim`, and a shape
/// assertion `batch >= 2`).
pub const DEMO_DYNAMIC_MODULE: &str = r#"module @demo_dynamic {
  func.func public @main(%w: tensor<3xf32>, %x: tensor<?x3xf32>) -> (tensor<?x3xf32>, tensor<?xf32>) {
    %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x3xf32>) -> tensor<i32>
    %two = stablehlo.constant dense<2> : tensor<i32>
    %ok = stablehlo.compare GE, %n, %two, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%ok, %n) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 2 for dimension variable 'batch'. Using the following polymorphic shapes specifications: args[1].shape = (batch, 3). Obtained dimension variables: 'batch' = {0} from specification 'batch' for dimension args[1].shape[0] (= {0}), .", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
    %n1 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
    %c3 = stablehlo.constant dense<3> : tensor<1xi32>
    %shape = stablehlo.concatenate %n1, %c3, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %wb = stablehlo.dynamic_broadcast_in_dim %w, %shape, dims = [1] : (tensor<3xf32>, tensor<2xi32>) -> tensor<?x3xf32>
    %y = stablehlo.multiply %x, %wb : tensor<?x3xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %s = stablehlo.reduce(%y init: %z) applies stablehlo.add across dimensions = [1] : (tensor<?x3xf32>, tensor<f32>) -> tensor<?xf32>
    return %y, %s : tensor<?x3xf32>, tensor<?xf32>
  }
}
"#;

/// A dynamic artifact for tests and examples: [`demo_artifact`]'s program
/// (`w = [1, 2, 3]`, `y = x * w`, `s = y.sum(1)`) as ONE module with the
/// batch `?`: symbol `batch` with range `2..=max` (`None`: unbounded),
/// batch dim 0, rows independent.
pub fn demo_dynamic_artifact(dir: &Path, max: Option<i64>) -> Result<String> {
    use crate::manifest::{Dim, Dynamic, ModuleFile, Output, Param, Symbol};
    let b = || Dim::Symbol("batch".into());
    let m = Manifest {
        format: FORMAT_DYNAMIC.into(),
        hlobridge_version: env!("CARGO_PKG_VERSION").into(),
        producers: Default::default(),
        kind: "stablehlo".into(),
        params: vec![
            Param {
                name: "w".into(),
                dtype: "f32".into(),
                shape: vec![3],
                weight: true,
                dims: None,
            },
            Param {
                name: "x".into(),
                dtype: "f32".into(),
                shape: vec![2, 3],
                weight: false,
                dims: Some(vec![b(), Dim::Fixed(3)]),
            },
        ],
        outputs: vec![
            Output {
                name: "y".into(),
                dtype: "f32".into(),
                shape: vec![2, 3],
                dims: Some(vec![b(), Dim::Fixed(3)]),
            },
            Output {
                name: "s".into(),
                dtype: "f32".into(),
                shape: vec![2],
                dims: Some(vec![b()]),
            },
        ],
        batch_dim: Some(0),
        modules: vec![ModuleFile {
            file: "module.mlir".into(),
            batch: None,
            size: None,
        }],
        weights_file: "weights.safetensors".into(),
        weights_size: None,
        rows_independent: Some(true),
        batching_refused: None,
        dynamic: Some(Dynamic {
            symbols: vec![Symbol {
                name: "batch".into(),
                min: 2,
                max,
            }],
        }),
        content_hash: String::new(),
    };
    let w: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    write_artifact(
        dir,
        &m,
        &[("module.mlir", DEMO_DYNAMIC_MODULE)],
        &[("w", ElementType::F32, &[3], &w)],
    )
}
