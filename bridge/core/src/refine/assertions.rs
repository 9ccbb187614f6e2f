//! Shape assertions as `jax.export` emits them:
//! `stablehlo.custom_call @shape_assertion(%ok, %dim0, ...) {error_message
//! = "... {0} ...", has_side_effect = true}`. Once refined, the predicate
//! is a constant: true removes the op, false is an
//! [`Error::ShapeAssertion`] naming the dimension and the constraint, with
//! the message's `{i}` placeholders filled from the operands.

use super::lit::Lit;
use super::span::{refinement_error, span};
use crate::ir::{Attribute, Module, OpId, ValueId};
use crate::{Error, Result};
use rustc_hash::FxHashMap;

/// True for a `custom_call @shape_assertion`.
pub fn is_assertion(m: &Module, op: OpId) -> bool {
    m.op_name(op) == "stablehlo.custom_call"
        && m.op_attr(op, "call_target_name").is_some_and(|a| {
            matches!(m.attr(a), Attribute::String { escaped, .. } if escaped.as_str() == "shape_assertion")
        })
}

/// Check the assertion `op`; `Ok` means it holds and the op can go.
pub fn check(m: &Module, op: OpId, lits: &FxHashMap<ValueId, Lit>) -> Result<()> {
    let o = m.op(op);
    let pred = o
        .operands
        .first()
        .and_then(|v| lits.get(v))
        .and_then(Lit::scalar)
        .ok_or_else(|| {
            refinement_error(
                m,
                op,
                "the shape assertion's predicate does not fold to a constant",
            )
        })?;
    if pred != 0 {
        return Ok(());
    }
    let template = match m.op_attr(op, "error_message").map(|a| m.attr(a)) {
        Some(Attribute::String { escaped, .. }) => unescape(escaped),
        _ => "shape assertion failed".to_string(),
    };
    let mut message = template;
    for (i, v) in o.operands.iter().skip(1).enumerate() {
        let val = lits
            .get(v)
            .and_then(Lit::scalar)
            .map_or("?".to_string(), |x| x.to_string());
        message = message.replace(&format!("{{{i}}}"), &val);
    }
    let (dimension, constraint) = describe(&message);
    Err(Error::ShapeAssertion {
        at: span(m, op),
        dimension,
        constraint,
        message,
    })
}

/// The dimension and the constraint a jax.export assertion message states
/// (`Expected value >= 1 for dimension variable 'b'`, `Found inconsistency
/// between dimension size args[1].shape[0] (= 6) and the specification 'b'
/// (= 5)`); the whole first sentence otherwise.
fn describe(message: &str) -> (String, String) {
    let quoted = |after: &str| -> Option<String> {
        let at = message.find(after)? + after.len();
        let rest = message[at..].trim_start();
        let rest = rest.strip_prefix('\'')?;
        Some(rest[..rest.find('\'')?].to_string())
    };
    let dimension = quoted("dimension variable")
        .or_else(|| quoted("for dimension"))
        .or_else(|| {
            let at = message.find("args[")?;
            let end = message[at..].find([' ', ')', ','])?;
            Some(message[at..at + end].to_string())
        })
        .unwrap_or_else(|| "?".to_string());
    let sentence = |s: &str| {
        s.split(". ")
            .next()
            .unwrap_or(s)
            .trim_end_matches('.')
            .to_string()
    };
    let constraint = match ["Expected", "Found", "must"]
        .iter()
        .find_map(|k| message.find(k))
    {
        // From the start of the sentence that states it.
        Some(at) => {
            let start = message[..at].rfind(". ").map_or(0, |p| p + 2);
            sentence(&message[start..])
        }
        None => sentence(message),
    };
    (dimension, constraint)
}

/// MLIR string escapes (`\"`, `\\`, `\n`, `\XX`) undone.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(a) if a.is_ascii_hexdigit() => {
                let b = it.next().unwrap_or('0');
                let code = u8::from_str_radix(&format!("{a}{b}"), 16).unwrap_or(b'?');
                out.push(code as char);
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}
