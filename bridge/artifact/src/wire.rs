//! The protobuf encoding of `proto/proto/serve.proto`'s messages, written
//! once for every client that does not generate stubs (the Python client
//! binds to it). The server decodes with `prost` code generated from the
//! same file; `hlobridge-serve`'s tests check the two agree byte for byte.
//!
//! `PredictRequest`/`PredictResponse` carry `repeated NamedTensor` (field
//! 1; `NamedTensor` is `name = 1, tensor = 2`): the same bytes as the
//! `map<string, Tensor>` of earlier versions, but a decoder sees a name
//! that occurs twice instead of keeping the last one.
//!
//! The decoder follows proto3: unknown fields are skipped, a scalar field
//! that occurs twice keeps the last value, `shape` may be packed or not.
//! Every length is checked against the buffer; a malformed message is an
//! [`ArtifactError::Wire`], never a panic.

use crate::error::{ArtifactError, Result};

/// A tensor as carried on the wire (dense, row-major, little-endian bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireTensor {
    /// MLIR element type name (`f32`, `i64`...).
    pub dtype: String,
    /// Dims.
    pub shape: Vec<i64>,
    /// Bytes.
    pub data: Vec<u8>,
}

fn bad(msg: &str) -> ArtifactError {
    ArtifactError::Wire(msg.to_string())
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_varint(out, u64::from(field) << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn varint_len(mut n: u64) -> usize {
    let mut k = 1;
    while n >= 0x80 {
        n >>= 7;
        k += 1;
    }
    k
}

/// Encodes one `Tensor` message.
pub fn encode_tensor(dtype: &str, shape: &[i64], data: &[u8]) -> Vec<u8> {
    let mut packed = Vec::with_capacity(shape.len() * 2);
    for &d in shape {
        put_varint(&mut packed, d as u64);
    }
    let mut out = Vec::with_capacity(data.len() + packed.len() + dtype.len() + 16);
    if !dtype.is_empty() {
        put_bytes(&mut out, 1, dtype.as_bytes());
    }
    if !packed.is_empty() {
        put_bytes(&mut out, 2, &packed);
    }
    if !data.is_empty() {
        put_bytes(&mut out, 3, data);
    }
    out
}

/// Encodes a `PredictRequest` (or, the same bytes, a `PredictResponse`):
/// `(name, dtype, shape, data)` in the given order.
pub fn encode_named(tensors: &[(&str, &str, &[i64], &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, dtype, shape, data) in tensors {
        let t = encode_tensor(dtype, shape, data);
        let mut entry = Vec::with_capacity(t.len() + name.len() + 2 * 10);
        put_bytes(&mut entry, 1, name.as_bytes());
        put_bytes(&mut entry, 2, &t);
        out.reserve(entry.len() + varint_len(entry.len() as u64) + 1);
        put_bytes(&mut out, 1, &entry);
    }
    out
}

/// One field of a message: its number and value.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Fields { buf, at: 0 }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut n = 0u64;
        for i in 0..10 {
            let b = *self
                .buf
                .get(self.at)
                .ok_or_else(|| bad("truncated varint"))?;
            self.at += 1;
            n |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(bad("varint longer than 10 bytes"))
    }

    fn skip(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| bad("a field runs past the end of the message"))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn next(&mut self) -> Result<Option<(u32, Value<'a>)>> {
        if self.at >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let num = u32::try_from(key >> 3).map_err(|_| bad("field number out of range"))?;
        if num == 0 {
            return Err(bad("field number 0"));
        }
        let v = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Value::Fixed
            }
            2 => {
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| bad("length out of range"))?;
                Value::Bytes(self.skip(n)?)
            }
            5 => {
                self.skip(4)?;
                Value::Fixed
            }
            _ => return Err(bad("unsupported wire type")),
        };
        Ok(Some((num, v)))
    }
}

fn utf8(b: &[u8]) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| bad("a string field is not UTF-8"))
}

/// Decodes one `Tensor` message.
pub fn decode_tensor(buf: &[u8]) -> Result<WireTensor> {
    let mut t = WireTensor::default();
    let mut f = Fields::new(buf);
    while let Some((num, v)) = f.next()? {
        match (num, v) {
            (1, Value::Bytes(b)) => t.dtype = utf8(b)?,
            (2, Value::Bytes(b)) => {
                let mut p = Fields::new(b);
                while p.at < b.len() {
                    t.shape.push(p.varint()? as i64);
                }
            }
            (2, Value::Varint(d)) => t.shape.push(d as i64),
            (3, Value::Bytes(b)) => t.data = b.to_vec(),
            (1..=3, _) => return Err(bad("a Tensor field has the wrong wire type")),
            _ => {}
        }
    }
    Ok(t)
}

/// Decodes a `PredictRequest` / `PredictResponse`: every named tensor in
/// order, a name that occurs twice included.
pub fn decode_named(buf: &[u8]) -> Result<Vec<(String, WireTensor)>> {
    let mut out = Vec::new();
    let mut f = Fields::new(buf);
    while let Some((num, v)) = f.next()? {
        match (num, v) {
            (1, Value::Bytes(entry)) => {
                let (mut name, mut tensor) = (String::new(), WireTensor::default());
                let mut e = Fields::new(entry);
                while let Some((n2, v2)) = e.next()? {
                    match (n2, v2) {
                        (1, Value::Bytes(b)) => name = utf8(b)?,
                        (2, Value::Bytes(b)) => tensor = decode_tensor(b)?,
                        (1 | 2, _) => {
                            return Err(bad("a NamedTensor field has the wrong wire type"))
                        }
                        _ => {}
                    }
                }
                out.push((name, tensor));
            }
            (1, _) => return Err(bad("field 1 has the wrong wire type")),
            _ => {}
        }
    }
    Ok(out)
}

/// Encodes a `grpc.health.v1.HealthCheckRequest` for `service` (`""`: the
/// server as a whole).
pub fn encode_health_request(service: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if !service.is_empty() {
        put_bytes(&mut out, 1, service.as_bytes());
    }
    out
}

/// The status of a `grpc.health.v1.HealthCheckResponse` (0 UNKNOWN,
/// 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN).
pub fn decode_health_response(buf: &[u8]) -> Result<u64> {
    let mut status = 0;
    let mut f = Fields::new(buf);
    while let Some((num, v)) = f.next()? {
        if let (1, Value::Varint(s)) = (num, v) {
            status = s;
        }
    }
    Ok(status)
}

/// `(manifest_json, content_hash)` of a `MetadataResponse`.
pub fn decode_metadata_response(buf: &[u8]) -> Result<(String, String)> {
    let (mut manifest, mut hash) = (String::new(), String::new());
    let mut f = Fields::new(buf);
    while let Some((num, v)) = f.next()? {
        match (num, v) {
            (1, Value::Bytes(b)) => manifest = utf8(b)?,
            (2, Value::Bytes(b)) => hash = utf8(b)?,
            _ => {}
        }
    }
    Ok((manifest, hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_duplicates() {
        let a = [1u8, 2, 3, 4];
        let buf = encode_named(&[
            ("x", "f32", &[1, -1], &a),
            ("x", "i64", &[], &[]),
            ("y", "", &[0], &[]),
        ]);
        let got = decode_named(&buf).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, "x");
        assert_eq!(
            got[0].1,
            WireTensor {
                dtype: "f32".into(),
                shape: vec![1, -1],
                data: a.to_vec()
            }
        );
        assert_eq!(got[1].1.dtype, "i64");
        assert_eq!(got[2].1.shape, vec![0]);
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let good = encode_named(&[("x", "f32", &[2, 3], &[0u8; 24])]);
        for cut in 0..good.len() {
            let _ = decode_named(&good[..cut]);
        }
        let mut g = 1u64;
        for i in 0..20_000 {
            let mut b = good.clone();
            g = g
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (g >> 33) as usize % b.len();
            b[k] = (g >> 20) as u8;
            if i % 2 == 0 {
                b.truncate(k + 1);
            }
            let _ = decode_named(&b);
        }
        assert!(decode_named(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
        assert!(decode_named(&[0x0b]).is_err());
    }
}
