//! `hlobridge._native.artifact_*` and `predict_*`: the bindings of
//! `hlobridge-artifact`, the one definition of the artifact format and of
//! serve.proto's messages. `hlobridge.export` writes and reads artifacts
//! through them (the defensive reader: regular files only, sizes capped,
//! each file read once, hash and weights checked) and `hb.serve.Client`
//! encodes its messages with them. The GIL is released around file I/O,
//! hashing and encoding.
//!
//! Errors: artifact errors raise `ArtifactHashError`, `ArtifactVersionError`
//! or `ExportError` (looked up by name in `hlobridge.errors`, else in
//! `hlobridge.export`, where the Python package defines them); a malformed
//! message raises `hlobridge.errors.BridgeError`.

use hlobridge_artifact::{wire, ArtifactError, Manifest};
use pjrt_client::ElementType;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

/// `(name, MLIR dtype, shape, bytes)`: a tensor as the Python side passes it.
type PyTensor = (String, String, Vec<i64>, Py<PyBytes>);

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    for module in ["hlobridge.errors", "hlobridge.export"] {
        if let Ok(m) = py.import(module) {
            if let Ok(c) = m.getattr(name) {
                return Ok(c);
            }
        }
    }
    Ok(py.get_type::<crate::errors::BridgeError>().into_any())
}

fn to_py(py: Python<'_>, e: ArtifactError) -> PyErr {
    let name = match &e {
        ArtifactError::HashMismatch { .. } => "ArtifactHashError",
        ArtifactError::Version(_) => "ArtifactVersionError",
        ArtifactError::Wire(_) => "BridgeError",
        _ => "ExportError",
    };
    match class(py, name).and_then(|c| c.call1((e.to_string(),))) {
        Ok(obj) => PyErr::from_value(obj),
        Err(err) => err,
    }
}

fn bytes(py: Python<'_>, b: &[u8]) -> Py<PyBytes> {
    PyBytes::new(py, b).unbind()
}

/// Reads and verifies the artifact in `dir` once; returns
/// `(manifest_text, [(module_file, text)], [(weight, dtype, shape, bytes)])`
/// with the weights in manifest order. `producers`: the installed
/// producer versions the manifest's must equal (`None`: not checked).
#[pyfunction]
#[pyo3(signature = (dir, producers = None))]
#[allow(clippy::type_complexity)]
pub fn artifact_read(
    py: Python<'_>,
    dir: PathBuf,
    producers: Option<std::collections::BTreeMap<String, String>>,
) -> PyResult<(String, Vec<(String, String)>, Vec<PyTensor>)> {
    let v = py
        .allow_threads(|| hlobridge_artifact::reader::read_artifact_for(&dir, producers.as_ref()))
        .map_err(|e| to_py(py, e))?;
    let mut weights = Vec::new();
    for p in v.manifest.params.iter().filter(|p| p.weight) {
        let data = v.weight_bytes(&p.name).unwrap_or_default();
        weights.push((
            p.name.clone(),
            p.dtype.clone(),
            p.shape.clone(),
            bytes(py, data),
        ));
    }
    Ok((v.manifest_text, v.modules, weights))
}

/// Writes an artifact: `manifest_json` (a manifest whose sizes and hash are
/// filled in here), the module texts and the weights. Returns the manifest
/// text as written.
#[pyfunction]
pub fn artifact_write(
    py: Python<'_>,
    dir: PathBuf,
    manifest_json: &str,
    modules: Vec<(String, String)>,
    weights: Vec<(String, String, Vec<i64>, Vec<u8>)>,
) -> PyResult<String> {
    let m: Manifest = serde_json::from_str(manifest_json)
        .map_err(|e| to_py(py, ArtifactError::Manifest(e.to_string())))?;
    let mut typed = Vec::with_capacity(weights.len());
    for (name, dtype, _, _) in &weights {
        let t = ElementType::from_mlir_name(dtype).ok_or_else(|| {
            to_py(
                py,
                ArtifactError::Safetensors(format!("weight {name}: unknown dtype {dtype:?}")),
            )
        })?;
        typed.push(t);
    }
    py.allow_threads(|| {
        let ws: Vec<(&str, ElementType, &[i64], &[u8])> = weights
            .iter()
            .zip(&typed)
            .map(|((n, _, s, d), t)| (n.as_str(), *t, &s[..], &d[..]))
            .collect();
        let ms: Vec<(&str, &str)> = modules
            .iter()
            .map(|(f, t)| (f.as_str(), t.as_str()))
            .collect();
        hlobridge_artifact::writer::write_artifact_text(&dir, &m, &ms, &ws)
    })
    .map(|(_, text)| text)
    .map_err(|e| to_py(py, e))
}

/// A serialized `PredictRequest` of `[(name, dtype, shape, bytes)]`.
#[pyfunction]
pub fn predict_encode(
    py: Python<'_>,
    tensors: Vec<(String, String, Vec<i64>, Vec<u8>)>,
) -> Py<PyBytes> {
    let out = py.allow_threads(|| {
        let ts: Vec<(&str, &str, &[i64], &[u8])> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.as_str(), d.as_str(), &s[..], &b[..]))
            .collect();
        wire::encode_named(&ts)
    });
    bytes(py, &out)
}

/// The named tensors of a serialized `PredictResponse` (or request), in
/// order, a name that occurs twice included.
#[pyfunction]
pub fn predict_decode(py: Python<'_>, buf: Vec<u8>) -> PyResult<Vec<PyTensor>> {
    let named = py
        .allow_threads(|| wire::decode_named(&buf))
        .map_err(|e| to_py(py, e))?;
    Ok(named
        .into_iter()
        .map(|(n, t)| (n, t.dtype, t.shape, bytes(py, &t.data)))
        .collect())
}

/// A serialized `grpc.health.v1.HealthCheckRequest`.
#[pyfunction]
pub fn health_encode(py: Python<'_>, service: &str) -> Py<PyBytes> {
    bytes(py, &wire::encode_health_request(service))
}

/// The status number of a serialized `HealthCheckResponse`.
#[pyfunction]
pub fn health_decode(py: Python<'_>, buf: &[u8]) -> PyResult<u64> {
    wire::decode_health_response(buf).map_err(|e| to_py(py, e))
}

/// `(manifest_json, content_hash)` of a serialized `MetadataResponse`.
#[pyfunction]
pub fn metadata_decode(py: Python<'_>, buf: &[u8]) -> PyResult<(String, String)> {
    wire::decode_metadata_response(buf).map_err(|e| to_py(py, e))
}

/// The exported batch size a batch of `rows` runs on, by the rule every
/// front end shares (`hlobridge_artifact::Manifest::bucket_for`);
/// `manifest_text` is the artifact's `manifest.json`. Raises `ArgumentError`
/// with the reason when no exported size may take it.
#[pyfunction]
pub fn artifact_bucket(py: Python<'_>, manifest_text: &str, rows: i64) -> PyResult<i64> {
    let m: Manifest = serde_json::from_str(manifest_text)
        .map_err(|e| to_py(py, ArtifactError::Manifest(e.to_string())))?;
    m.bucket_for(rows).map_err(
        |e| match class(py, "ArgumentError").and_then(|c| c.call1((e,))) {
            Ok(obj) => PyErr::from_value(obj),
            Err(err) => err,
        },
    )
}

/// Checks a request's input shapes (`(name, dims)`) against a dynamic
/// artifact's constraints (`hlobridge_artifact::Manifest::check_shapes`, the
/// check `hlobridge serve` makes); returns each symbol's value. Raises
/// `ShapeAssertionError` with `.dim` (`"input x dim 0"`) and `.constraint`.
#[pyfunction]
pub fn artifact_check_shapes(
    py: Python<'_>,
    manifest_text: &str,
    shapes: Vec<(String, Vec<i64>)>,
) -> PyResult<std::collections::BTreeMap<String, i64>> {
    let m: Manifest = serde_json::from_str(manifest_text)
        .map_err(|e| to_py(py, ArtifactError::Manifest(e.to_string())))?;
    let refs: Vec<(&str, &[i64])> = shapes
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_slice()))
        .collect();
    m.check_shapes(&refs).map_err(|v| {
        let dim = match v.dim {
            Some(d) => format!("input {} dim {d}", v.input),
            None => format!("input {}", v.input),
        };
        let msg = format!("shape constraint violated: {v}");
        match class(py, "ShapeAssertionError").and_then(|c| c.call1((msg,))) {
            Ok(obj) => {
                // A failed assignment still raises the error.
                let _ = obj.setattr("dim", dim);
                let _ = obj.setattr("constraint", v.constraint.clone());
                PyErr::from_value(obj)
            }
            Err(err) => err,
        }
    })
}

/// Adds the functions to `_native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(artifact_read, m)?)?;
    m.add_function(wrap_pyfunction!(artifact_write, m)?)?;
    m.add_function(wrap_pyfunction!(predict_encode, m)?)?;
    m.add_function(wrap_pyfunction!(predict_decode, m)?)?;
    m.add_function(wrap_pyfunction!(health_encode, m)?)?;
    m.add_function(wrap_pyfunction!(health_decode, m)?)?;
    m.add_function(wrap_pyfunction!(metadata_decode, m)?)?;
    m.add_function(wrap_pyfunction!(artifact_bucket, m)?)?;
    m.add_function(wrap_pyfunction!(artifact_check_shapes, m)?)?;
    m.add(
        "ARTIFACT_FORMAT_DYNAMIC",
        hlobridge_artifact::FORMAT_DYNAMIC,
    )?;
    m.add("ARTIFACT_FORMAT", hlobridge_artifact::FORMAT)?;
    Ok(())
}
