//! A small `.npy` reader/writer for `run`'s inputs and outputs (format
//! versions 1–3, little- and big-endian numeric dtypes, bool, complex, C and
//! Fortran order; types numpy lacks travel as raw bits in a void dtype).

use crate::error::{CliError, Result};
use pjrt_client::ElementType;
use std::path::Path;

/// A dense array read from a `.npy` file, in C order and native (little)
/// endianness.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Npy {
    /// Element type.
    pub dtype: ElementType,
    /// Shape.
    pub shape: Vec<i64>,
    /// Dense bytes, C order, little-endian.
    pub data: Vec<u8>,
}

/// The numpy `descr` this tool writes for an element type.
pub(crate) fn npy_descr(t: ElementType) -> String {
    use ElementType::*;
    match t {
        Pred => "|b1".into(),
        S8 => "|i1".into(),
        S16 => "<i2".into(),
        S32 => "<i4".into(),
        S64 => "<i8".into(),
        U8 => "|u1".into(),
        U16 => "<u2".into(),
        U32 => "<u4".into(),
        U64 => "<u8".into(),
        F16 => "<f2".into(),
        F32 => "<f4".into(),
        F64 => "<f8".into(),
        C64 => "<c8".into(),
        C128 => "<c16".into(),
        other => format!("<V{}", other.host_byte_size()),
    }
}

/// A malformed or mismatching `.npy` (the caller names the file).
fn bad(msg: impl Into<String>) -> CliError {
    CliError::Input(msg.into())
}

/// Reads a `.npy` file. With `want`, the file's dtype must match it (raw
/// `V`/`u` dtypes of the right size are accepted for types numpy lacks).
pub(crate) fn read_npy(path: &Path, want: Option<ElementType>) -> Result<Npy> {
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    parse_npy(&bytes, want)
}

fn parse_npy(bytes: &[u8], want: Option<ElementType>) -> Result<Npy> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file (bad magic)"));
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(format!("unsupported .npy format version {v}"))),
    };
    let header = bytes
        .get(start..start + hlen)
        .ok_or_else(|| bad("truncated .npy header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let descr = dict_value(header, "descr").ok_or_else(|| bad("header has no 'descr'"))?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.strip_suffix('\''))
        .ok_or_else(|| {
            bad(format!(
                "unsupported dtype {descr} (structured dtypes are not supported)"
            ))
        })?;
    let fortran = dict_value(header, "fortran_order")
        .ok_or_else(|| bad("header has no 'fortran_order'"))?
        == "True";
    let shape_text = dict_value(header, "shape").ok_or_else(|| bad("header has no 'shape'"))?;
    let shape: Vec<i64> = shape_text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<i64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad(format!("bad shape {shape_text}")))?;
    let (order, kind, size) = split_descr(descr)?;
    let dtype = match want {
        Some(w) if dtype_accepts(w, kind, size) => w,
        Some(w) => {
            return Err(bad(format!(
                "dtype '{descr}' does not match the parameter's element type {w} (expected '{}')",
                npy_descr(w)
            )))
        }
        None => dtype_of(kind, size).ok_or_else(|| bad(format!("unsupported dtype '{descr}'")))?,
    };
    let count = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
        .ok_or_else(|| bad("bad shape"))?;
    let need = count
        .checked_mul(size)
        .ok_or_else(|| bad("array too large"))?;
    let mut data = bytes
        .get(start + hlen..start + hlen + need)
        .ok_or_else(|| bad(format!("truncated data: {need} bytes expected")))?
        .to_vec();
    if order == '>' && size > 1 {
        let part = if kind == 'c' { size / 2 } else { size };
        for chunk in data.chunks_mut(part) {
            chunk.reverse();
        }
    }
    if fortran && shape.len() > 1 {
        data = fortran_to_c(&data, &shape, size);
    }
    Ok(Npy { dtype, shape, data })
}

/// The text of `'key': VALUE` in a numpy header dict.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else if let Some(r) = rest.strip_prefix('\'') {
        r.find('\'')? + 2
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

fn split_descr(d: &str) -> Result<(char, char, usize)> {
    let mut chars = d.chars();
    let first = chars.next().ok_or_else(|| bad("empty dtype"))?;
    let (order, rest) = if matches!(first, '<' | '>' | '|' | '=') {
        (if first == '=' { '<' } else { first }, &d[1..])
    } else {
        ('<', d)
    };
    let kind = rest.chars().next().ok_or_else(|| bad("empty dtype"))?;
    let size: usize = rest[1..]
        .parse()
        .map_err(|_| bad(format!("unsupported dtype '{d}'")))?;
    Ok((order, kind, size))
}

fn dtype_of(kind: char, size: usize) -> Option<ElementType> {
    use ElementType::*;
    Some(match (kind, size) {
        ('b', 1) => Pred,
        ('i', 1) => S8,
        ('i', 2) => S16,
        ('i', 4) => S32,
        ('i', 8) => S64,
        ('u', 1) => U8,
        ('u', 2) => U16,
        ('u', 4) => U32,
        ('u', 8) => U64,
        ('f', 2) => F16,
        ('f', 4) => F32,
        ('f', 8) => F64,
        ('c', 8) => C64,
        ('c', 16) => C128,
        _ => return None,
    })
}

fn dtype_accepts(want: ElementType, kind: char, size: usize) -> bool {
    if npy_descr(want).contains('V') {
        return matches!(kind, 'V' | 'u') && size == want.host_byte_size();
    }
    dtype_of(kind, size) == Some(want)
}

fn fortran_to_c(data: &[u8], shape: &[i64], size: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n: usize = dims.iter().product();
    let mut out = vec![0u8; data.len()];
    let mut idx = vec![0usize; dims.len()];
    for c in 0..n {
        // Fortran offset of the C-order multi-index `idx`.
        let (mut f, mut stride) = (0, 1);
        for (k, &d) in dims.iter().enumerate() {
            f += idx[k] * stride;
            stride *= d;
        }
        out[c * size..(c + 1) * size].copy_from_slice(&data[f * size..(f + 1) * size]);
        for k in (0..dims.len()).rev() {
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// Writes a C-order `.npy` (version 1, or 2 for huge headers).
pub(crate) fn write_npy(path: &Path, dtype: ElementType, dims: &[i64], data: &[u8]) -> Result<()> {
    std::fs::write(path, encode_npy(dtype, dims, data)).map_err(|e| CliError::io(path.display(), e))
}

fn encode_npy(dtype: ElementType, dims: &[i64], data: &[u8]) -> Vec<u8> {
    let shape = match dims {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        npy_descr(dtype)
    );
    let v1 = dict.len() + 11 < 65536;
    let prefix = if v1 { 10 } else { 12 };
    let total = (prefix + dict.len() + 1).div_ceil(64) * 64;
    let mut header = dict;
    header.push_str(&" ".repeat(total - prefix - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + data.len());
    out.extend_from_slice(b"\x93NUMPY");
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip() {
        let data: Vec<u8> = (0..24u8).collect();
        let enc = encode_npy(ElementType::F32, &[2, 3], &data);
        assert_eq!((enc.len() - data.len()) % 64, 0);
        let n = parse_npy(&enc, None).unwrap();
        assert_eq!(n.dtype, ElementType::F32);
        assert_eq!(n.shape, vec![2, 3]);
        assert_eq!(n.data, data);
        let s = parse_npy(
            &encode_npy(ElementType::Bf16, &[], &[1, 2]),
            Some(ElementType::Bf16),
        );
        assert_eq!(s.unwrap().shape, Vec::<i64>::new());
        assert!(parse_npy(&enc, Some(ElementType::S32)).is_err());
        assert!(parse_npy(&enc[..enc.len() - 1], None).is_err());
    }

    #[test]
    fn npy_fortran_and_big_endian() {
        // [[1, 2, 3], [4, 5, 6]] as >i2 in Fortran order.
        let mut h = b"\x93NUMPY\x01\x00".to_vec();
        let dict = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }\n";
        h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        h.extend_from_slice(dict.as_bytes());
        for v in [1i16, 4, 2, 5, 3, 6] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        let n = parse_npy(&h, None).unwrap();
        let vals: Vec<i16> = n
            .data
            .chunks(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(vals, vec![1, 2, 3, 4, 5, 6]);
    }
}
