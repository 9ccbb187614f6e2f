//! `builtin.module`: `module @name attributes {...} { ... }`.

use super::{OpFormat, ResultTypes};
use crate::ir::{Attribute, OpId};
use crate::parse::{PResult, Parser};
use crate::print::Printer;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[OpFormat {
    name: "builtin.module",
    parse: parse_module,
    print: print_module,
}];

const INHERENT: &[&str] = &["sym_name", "sym_visibility"];

fn parse_module(p: &mut Parser<'_>, op: OpId, _results: &mut ResultTypes) -> PResult<()> {
    parse_optional_visibility(p, op);
    if p.c.peek() == Some(b'@') {
        let name = p.parse_symbol_name()?;
        let text = p.m.str(name).to_string();
        let escaped = text.trim_matches('"').to_string();
        p.set_prop(
            op,
            "sym_name",
            Attribute::String {
                escaped: escaped.into(),
                ty: None,
            },
        );
    }
    p.parse_optional_attr_dict_with_keyword(op, INHERENT)?;
    p.parse_region(op, None)?;
    ensure_entry_block(p, op);
    Ok(())
}

/// The symbol visibilities MLIR spells as a keyword.
const VISIBILITIES: [&str; 3] = ["public", "private", "nested"];

/// Parse an optional `public` / `private` / `nested` keyword into the
/// `sym_visibility` property (modules and functions).
pub(crate) fn parse_optional_visibility(p: &mut Parser<'_>, op: OpId) {
    if let Some(v) = p.c.peek_ident() {
        if VISIBILITIES.contains(&v) {
            p.c.pos += v.len();
            p.set_prop(
                op,
                "sym_visibility",
                Attribute::String {
                    escaped: v.into(),
                    ty: None,
                },
            );
        }
    }
}

/// Print ` <visibility>` when set; `false` if it is not one of the keywords
/// (the op then prints in generic form).
pub(crate) fn print_visibility(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(v) = m.op_attr(op, "sym_visibility") else {
        return true;
    };
    let Attribute::String { escaped, .. } = m.attr(v) else {
        return false;
    };
    if !VISIBILITIES.contains(&&**escaped) {
        return false;
    }
    pr.w(" ");
    pr.w(escaped);
    true
}

/// Modules always hold exactly one block, even when empty.
fn ensure_entry_block(p: &mut Parser<'_>, op: OpId) {
    if let Some(&r) = p.m.op(op).regions.first() {
        if p.m.region(r).blocks.is_empty() {
            let b = p.m.add_block();
            p.m.push_block(r, b);
        }
    }
}

fn print_module(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.regions.len() != 1 || !o.results.is_empty() || !o.operands.is_empty() {
        return false;
    }
    if !print_visibility(pr, op) {
        return false;
    }
    if let Some(n) = m.op_attr(op, "sym_name") {
        let Attribute::String { escaped, .. } = m.attr(n) else {
            return false;
        };
        pr.w(" @");
        print_symbol_text(pr, escaped);
    }
    pr.attr_dict_with_keyword(op, INHERENT);
    pr.w(" ");
    pr.region(o.regions[0], false);
    true
}

/// Print a symbol name (escaped string body), quoting it when it is not a
/// bare identifier.
pub(crate) fn print_symbol_text(pr: &mut Printer<'_>, escaped: &str) {
    let bare = !escaped.is_empty()
        && escaped
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.' | b'-'))
        && !escaped.as_bytes()[0].is_ascii_digit();
    if bare {
        pr.w(escaped);
    } else {
        pr.w("\"");
        pr.w(escaped);
        pr.w("\"");
    }
}
