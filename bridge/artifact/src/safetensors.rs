//! A small, defensive reader and writer of the `safetensors` format:
//! 8 bytes little-endian header length, a JSON header
//! `{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}`,
//! then the data. Every length, offset, shape and dtype is checked against
//! the file before any byte is read: a malformed file is a
//! [`ArtifactError::Safetensors`], never a panic or an oversized allocation.

use crate::error::{ArtifactError, Result};
use pjrt_client::ElementType;
use std::collections::BTreeMap;

/// Largest header accepted (100 MB, as the reference implementation).
pub const MAX_HEADER: u64 = 100_000_000;

/// One tensor of a safetensors file: where its bytes are in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// Element type.
    pub dtype: ElementType,
    /// Dims.
    pub shape: Vec<i64>,
    /// Byte range in the whole file.
    pub range: std::ops::Range<usize>,
}

pub(crate) fn bad(msg: impl Into<String>) -> ArtifactError {
    ArtifactError::Safetensors(msg.into())
}

/// The safetensors dtype name of an element type, if it has one.
pub fn dtype_name(t: ElementType) -> Option<&'static str> {
    Some(match t {
        ElementType::F64 => "F64",
        ElementType::F32 => "F32",
        ElementType::F16 => "F16",
        ElementType::Bf16 => "BF16",
        ElementType::S64 => "I64",
        ElementType::S32 => "I32",
        ElementType::S16 => "I16",
        ElementType::S8 => "I8",
        ElementType::U64 => "U64",
        ElementType::U32 => "U32",
        ElementType::U16 => "U16",
        ElementType::U8 => "U8",
        ElementType::Pred => "BOOL",
        ElementType::C64 => "C64",
        _ => return None,
    })
}

pub fn dtype_from_name(s: &str) -> Option<ElementType> {
    Some(match s {
        "F64" => ElementType::F64,
        "F32" => ElementType::F32,
        "F16" => ElementType::F16,
        "BF16" => ElementType::Bf16,
        "I64" => ElementType::S64,
        "I32" => ElementType::S32,
        "I16" => ElementType::S16,
        "I8" => ElementType::S8,
        "U64" => ElementType::U64,
        "U32" => ElementType::U32,
        "U16" => ElementType::U16,
        "U8" => ElementType::U8,
        "BOOL" => ElementType::Pred,
        "C64" => ElementType::C64,
        _ => return None,
    })
}

/// Parses the header of `file` (the whole file's bytes) and checks every
/// entry against it: data offsets in bounds, contiguous, non-overlapping,
/// covering the data exactly, and each tensor's byte size equal to its shape
/// times its dtype's size.
pub fn parse(file: &[u8]) -> Result<BTreeMap<String, TensorEntry>> {
    if file.len() < 8 {
        return Err(bad("file shorter than its 8-byte header length"));
    }
    let mut len8 = [0u8; 8];
    len8.copy_from_slice(&file[..8]);
    let n = u64::from_le_bytes(len8);
    if n > MAX_HEADER {
        return Err(bad(format!("header length {n} exceeds {MAX_HEADER}")));
    }
    let n = n as usize;
    let data_start = 8usize
        .checked_add(n)
        .filter(|&e| e <= file.len())
        .ok_or_else(|| bad("header length runs past the end of the file"))?;
    let header: serde_json::Value = serde_json::from_slice(&file[8..data_start])
        .map_err(|e| bad(format!("header is not JSON: {e}")))?;
    let obj = header
        .as_object()
        .ok_or_else(|| bad("header is not a JSON object"))?;
    let data_len = file.len() - data_start;
    let mut out = BTreeMap::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (name, v) in obj {
        if name == "__metadata__" {
            if !v.is_object() {
                return Err(bad("__metadata__ is not an object"));
            }
            continue;
        }
        let e = v
            .as_object()
            .ok_or_else(|| bad(format!("entry {name:?} is not an object")))?;
        let dtype = e
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| bad(format!("entry {name:?}: no dtype")))?;
        let dtype = dtype_from_name(dtype)
            .ok_or_else(|| bad(format!("entry {name:?}: unsupported dtype {dtype:?}")))?;
        let shape = e
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| bad(format!("entry {name:?}: no shape")))?;
        let shape: Vec<i64> = shape
            .iter()
            .map(|d| d.as_u64().and_then(|d| i64::try_from(d).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(format!("entry {name:?}: shape is not a list of sizes")))?;
        let offs = e
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .filter(|a| a.len() == 2)
            .ok_or_else(|| bad(format!("entry {name:?}: data_offsets is not [begin, end]")))?;
        let (b, end) = match (offs[0].as_u64(), offs[1].as_u64()) {
            (Some(b), Some(e)) if b <= e && e <= data_len as u64 => (b as usize, e as usize),
            _ => {
                return Err(bad(format!(
                    "entry {name:?}: data_offsets out of the file's data ({data_len} bytes)"
                )))
            }
        };
        let need = dtype
            .host_size_of(&shape)
            .ok_or_else(|| bad(format!("entry {name:?}: shape overflows")))?;
        if need != end - b {
            return Err(bad(format!(
                "entry {name:?}: {} data bytes for a {need}-byte tensor",
                end - b
            )));
        }
        spans.push((b, end));
        out.insert(
            name.clone(),
            TensorEntry {
                dtype,
                shape,
                range: data_start + b..data_start + end,
            },
        );
    }
    spans.sort_unstable();
    let mut at = 0usize;
    for (b, e) in spans {
        if b != at {
            return Err(bad("tensor data overlaps or leaves a gap"));
        }
        at = e;
    }
    if at != data_len {
        return Err(bad("trailing bytes after the last tensor"));
    }
    Ok(out)
}

/// Serializes named tensors `(name, dtype, shape, bytes)` (in the given
/// order) as a safetensors file.
pub fn write(tensors: &[(&str, ElementType, &[i64], &[u8])]) -> Result<Vec<u8>> {
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, dtype, shape, data) in tensors {
        let dn = dtype_name(*dtype).ok_or_else(|| bad(format!("{name}: no safetensors dtype")))?;
        if dtype.host_size_of(shape) != Some(data.len()) {
            return Err(bad(format!("{name}: data size does not match the shape")));
        }
        header.insert(
            (*name).to_string(),
            serde_json::json!({"dtype": dn, "shape": shape, "data_offsets": [at, at + data.len()]}),
        );
        at += data.len();
    }
    let mut h =
        serde_json::to_vec(&serde_json::Value::Object(header)).map_err(|e| bad(e.to_string()))?;
    while (8 + h.len()) % 8 != 0 {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + at);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
    }
    Ok(out)
}
