//! Where a refinement error points: the op's source location as
//! `file:line:col` when the module carries locations (through `#loc`
//! aliases, names, call sites and fused locations), and always the op's
//! name and enclosing function.

use crate::ir::{AliasValue, LocId, Location, Module, OpId, TopItem};
use crate::Error;

/// `file:line:col` of a location, if it leads to one.
fn file_line_col(m: &Module, loc: LocId, depth: u32) -> Option<String> {
    if depth > 16 {
        return None;
    }
    match m.locs.get(loc.index())? {
        Location::FileLineCol { file, pos } => {
            let pos = pos.split(" to").next().unwrap_or(pos);
            Some(format!("{file}{pos}"))
        }
        Location::Name { child, .. } => file_line_col(m, (*child)?, depth + 1),
        Location::CallSite { callee, caller } => {
            file_line_col(m, *callee, depth + 1).or_else(|| file_line_col(m, *caller, depth + 1))
        }
        Location::Fused { locs, .. } => locs.iter().find_map(|&l| file_line_col(m, l, depth + 1)),
        Location::Alias(name) => m.top.iter().find_map(|t| match t {
            TopItem::Alias {
                name: n,
                value: AliasValue::Loc(l),
            } if n == name => file_line_col(m, *l, depth + 1),
            _ => None,
        }),
        _ => None,
    }
}

/// The name of the function that contains `op` (or `op` itself).
fn enclosing_func(m: &Module, mut op: OpId) -> Option<String> {
    for _ in 0..256 {
        if m.op_name(op) == "func.func" {
            return match m.attr(m.op_attr(op, "sym_name")?) {
                crate::ir::Attribute::String { escaped, .. } => Some(escaped.to_string()),
                _ => None,
            };
        }
        let b = m.op(op).parent?;
        let r = m.block(b).parent?;
        op = m.region(r).parent?;
    }
    None
}

/// `file:line:col: op in @func`, or `op in @func` without a location.
pub fn span(m: &Module, op: OpId) -> String {
    let what = m.op_name(op);
    let func = enclosing_func(m, op).map_or(String::new(), |f| format!(" in @{f}"));
    match m.op(op).loc.and_then(|l| file_line_col(m, l, 0)) {
        Some(at) => format!("{at}: {what}{func}"),
        None => format!("{what}{func}"),
    }
}

/// A [`Error::ShapeRefinement`] at `op`.
pub fn refinement_error(m: &Module, op: OpId, message: &str) -> Error {
    Error::ShapeRefinement {
        at: span(m, op),
        message: message.to_string(),
    }
}
