//! Reading the fields of StableHLO's structured attributes that the IR keeps
//! verbatim (`stablehlo.gather<offset_dims = [0], index_vector_dim = 1>`,
//! `stablehlo.scatter<...>`), and the integer attributes shape inference
//! needs from an op (dense arrays, `dense<..>` padding, plain integers).

use super::lit::Lit;
use crate::dialects::common::{get_i64_array, get_int};
use crate::ir::{Attribute, Module, OpId};

/// The text of an op's verbatim attribute `name`.
pub fn opaque<'m>(m: &'m Module, op: OpId, name: &str) -> Option<&'m str> {
    match m.attr(m.op_attr(op, name)?) {
        Attribute::Opaque(t) => Some(t),
        _ => None,
    }
}

/// The position just after `key = ` as a whole field name in `text`.
fn field_start(text: &str, key: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = text[from..].find(key) {
        let at = from + p;
        let before = text[..at].chars().next_back();
        let after = text[at + key.len()..].trim_start();
        if matches!(before, Some('<' | ' ' | ',')) && after.starts_with('=') {
            let eq = text.len() - after.len();
            return Some(eq + 1);
        }
        from = at + key.len();
    }
    None
}

/// `key = [a, b, ...]` in a verbatim attribute; empty when absent.
pub fn field_list(text: &str, key: &str) -> Option<Vec<i64>> {
    let Some(s) = field_start(text, key) else {
        return Some(Vec::new());
    };
    let rest = text[s..].trim_start().strip_prefix('[')?;
    let body = &rest[..rest.find(']')?];
    body.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<i64>().ok())
        .collect()
}

/// `key = N` in a verbatim attribute; `default` when absent.
pub fn field_int(text: &str, key: &str, default: i64) -> Option<i64> {
    let Some(s) = field_start(text, key) else {
        return Some(default);
    };
    let rest = text[s..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// An `array<i64: ...>` attribute of `op`; `None` when absent or not one.
pub fn i64s(m: &Module, op: OpId, name: &str) -> Option<Vec<i64>> {
    get_i64_array(m, m.op_attr(op, name)?).map(<[i64]>::to_vec)
}

/// An integer attribute of `op`.
pub fn int(m: &Module, op: OpId, name: &str) -> Option<i64> {
    get_int(m, m.op_attr(op, name)?)
}

/// A `dense<..> : tensor<Nx2xi64>` attribute as `N` (low, high) pairs.
pub fn pairs(m: &Module, op: OpId, name: &str) -> Option<Vec<(i64, i64)>> {
    let Attribute::Dense { body, ty } = m.attr(m.op_attr(op, name)?) else {
        return None;
    };
    let lit = Lit::parse_within(m, body, *ty, 1 << 12)?;
    if lit.dims.len() != 2 || lit.dims[1] != 2 {
        return None;
    }
    Some(lit.vals.chunks(2).map(|c| (c[0], c[1])).collect())
}
