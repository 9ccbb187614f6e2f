//! Test helpers the deploy and the serve tests share (`bridge/serve/tests`
//! includes this file by path): a scratch directory per test and f32 <->
//! little-endian bytes.

/// A fresh scratch directory `<tmp>/hb-<file>-<name>-XXXX`, removed when dropped.
pub fn tmp(file: &str, name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("hb-{file}-{name}-"))
        .tempdir()
        .unwrap()
}

/// The little-endian bytes of `v`.
pub fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The f32s of little-endian bytes.
pub fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
