//! Building blocks shared by the custom formats: the type-list shapes that
//! StableHLO's assembly formats use (`SameOperandsAndResultType`,
//! functional types), dimension lists, dense `i64` arrays and enum
//! attributes.

use super::ResultTypes;
use crate::ir::{AttrId, Attribute, DenseArrayData, Module, OpId, Type, TypeId};
use crate::parse::{OperandRef, PResult, Parser};
use crate::print::Printer;

// ----- parsing -----

/// After operand refs and the attr-dict: `: T` (every operand and the
/// single result have type T) or `: (T, ...) -> R`.
pub fn parse_same_operands_and_result_type<'s>(
    p: &mut Parser<'s>,
    op: OpId,
    refs: &[OperandRef<'s>],
    results: &mut ResultTypes,
) -> PResult<()> {
    p.c.expect(b':')?;
    p.c.ws();
    if p.c.cur() == Some(b'(') {
        resolve_function_type(p, op, refs, results)?;
    } else {
        let t = p.parse_type()?;
        let types: smallvec::SmallVec<[TypeId; 4]> = smallvec::smallvec![t; refs.len()];
        let vals = p.resolve_operands(refs, &types)?;
        p.push_operands(op, &vals);
        results.push(t);
    }
    Ok(())
}

/// `: (T, ...) -> R` resolving `refs`.
pub fn parse_functional_type<'s>(
    p: &mut Parser<'s>,
    op: OpId,
    refs: &[OperandRef<'s>],
    results: &mut ResultTypes,
) -> PResult<()> {
    p.c.expect(b':')?;
    resolve_function_type(p, op, refs, results)
}

/// Parse `(T, ...) -> R` (the `:` already consumed), resolve `refs` against
/// the inputs, and push the results.
pub fn resolve_function_type<'s>(
    p: &mut Parser<'s>,
    op: OpId,
    refs: &[OperandRef<'s>],
    results: &mut ResultTypes,
) -> PResult<()> {
    let (inputs, outs) = p.parse_function_type_parts()?;
    let vals = p.resolve_operands(refs, &inputs)?;
    p.push_operands(op, &vals);
    results.extend(outs);
    Ok(())
}

/// `[1, 2, 3]` → integers (may be empty).
pub fn parse_int_list(p: &mut Parser<'_>) -> PResult<Vec<i64>> {
    p.c.expect(b'[')?;
    let mut out = Vec::new();
    if p.c.eat(b']') {
        return Ok(out);
    }
    loop {
        out.push(p.c.int()?);
        if p.c.eat(b']') {
            return Ok(out);
        }
        p.c.expect(b',')?;
    }
}

/// An `array<i64: ...>` attribute.
pub fn i64_array(m: &mut Module, vals: Vec<i64>) -> Attribute {
    let elem = m.int_type(64);
    Attribute::DenseArray {
        elem,
        data: DenseArrayData::Int(vals),
    }
}

/// An `array<i1: ...>` attribute.
pub fn bool_array(m: &mut Module, vals: Vec<bool>) -> Attribute {
    let elem = m.int_type(1);
    Attribute::DenseArray {
        elem,
        data: DenseArrayData::Int(vals.into_iter().map(i64::from).collect()),
    }
}

/// An integer attribute `v : iN`.
pub fn int_attr(m: &mut Module, v: i64, width: u32) -> Attribute {
    let ty = m.int_type(width);
    let mut text = String::new();
    crate::print::push_int(&mut text, v);
    Attribute::Integer {
        text: text.into(),
        ty: Some(ty),
    }
}

/// A dialect enum attribute such as `#stablehlo<comparison_direction LT>`.
pub fn enum_attr(dialect: &str, kind: &str, value: &str) -> Attribute {
    Attribute::Opaque(format!("{dialect}<{kind} {value}>").into())
}

/// Parse a bare enum keyword (e.g. `LT`) into `#dialect<kind VALUE>`.
pub fn parse_enum_keyword(p: &mut Parser<'_>, dialect: &str, kind: &str) -> PResult<Attribute> {
    let v = p.c.expect_ident(&format!("{kind} value"))?;
    Ok(enum_attr(dialect, kind, v))
}

// ----- reading attributes back -----

/// The `i64` elements of an `array<i64: ...>` attribute.
pub fn get_i64_array(m: &Module, a: AttrId) -> Option<&[i64]> {
    match m.attr(a) {
        Attribute::DenseArray {
            data: DenseArrayData::Int(v),
            elem,
        } if matches!(m.ty(*elem), Type::Integer { width: 64, .. }) => Some(v),
        _ => None,
    }
}

/// The elements of an `array<i1: ...>` attribute.
pub fn get_bool_array(m: &Module, a: AttrId) -> Option<&[i64]> {
    match m.attr(a) {
        Attribute::DenseArray {
            data: DenseArrayData::Int(v),
            elem,
        } if matches!(m.ty(*elem), Type::Integer { width: 1, .. }) => Some(v),
        _ => None,
    }
}

/// The value of an integer attribute (any type).
pub fn get_int(m: &Module, a: AttrId) -> Option<i64> {
    match m.attr(a) {
        Attribute::Integer { text, .. } => crate::parse::parse_int_text(text),
        _ => None,
    }
}

/// The value of `#dialect<kind VALUE>`, if `a` is such an enum attribute.
pub fn get_enum<'m>(m: &'m Module, a: AttrId, dialect: &str, kind: &str) -> Option<&'m str> {
    let Attribute::Opaque(text) = m.attr(a) else {
        return None;
    };
    let rest = text.strip_prefix(dialect)?.strip_prefix('<')?;
    let rest = rest.strip_prefix(kind)?.strip_prefix(' ')?;
    let v = rest.strip_suffix('>')?;
    // Printed as a bare keyword: must be a non-empty identifier.
    if v.as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        Some(v)
    } else {
        None
    }
}

/// The named attributes of `op` that are not in `known`; used by printers
/// to decide whether the custom form can represent the op.
pub fn has_only(m: &Module, op: OpId, allowed_props: &[&str]) -> bool {
    m.op(op)
        .props
        .iter()
        .all(|a| allowed_props.contains(&m.str(a.name)))
}

// ----- printing -----

/// Print `: T` when all operand types and the single result type are
/// equal, else `: (T, ...) -> R`.
pub fn print_same_operands_and_result_type(pr: &mut Printer<'_>, op: OpId) {
    let m = pr.m;
    let o = m.op(op);
    pr.w(" : ");
    if o.results.len() == 1 {
        let rt = m.value_type(o.results[0]);
        if o.operands.iter().all(|&v| m.value_type(v) == rt) {
            pr.ty(rt);
            return;
        }
    }
    pr.functional_type(op);
}

/// Print `[1, 2]`.
pub fn print_int_list(pr: &mut Printer<'_>, vals: &[i64]) {
    pr.w("[");
    for (i, &v) in vals.iter().enumerate() {
        if i > 0 {
            pr.w(", ");
        }
        pr.int(v);
    }
    pr.w("]");
}

/// The type of operand `i` of `op`.
pub fn operand_type(m: &Module, op: OpId, i: usize) -> Option<TypeId> {
    m.op(op).operands.get(i).map(|&v| m.value_type(v))
}

/// The type of result `i` of `op`.
pub fn result_type(m: &Module, op: OpId, i: usize) -> Option<TypeId> {
    m.op(op).results.get(i).map(|&v| m.value_type(v))
}

/// Like [`Printer::attr_dict`], but with inherent and discardable
/// attributes merged and sorted by name, as MLIR prints an op's attribute
/// dictionary. `keyword` spells it ` attributes {..}`.
pub fn print_attr_dict_sorted(pr: &mut Printer<'_>, op: OpId, elided: &[&str], keyword: bool) {
    let m = pr.m;
    let o = m.op(op);
    let mut entries: Vec<crate::ir::NamedAttr> = o
        .props
        .iter()
        .chain(o.attrs.iter())
        .filter(|a| !elided.contains(&m.str(a.name)))
        .copied()
        .collect();
    if entries.is_empty() {
        return;
    }
    let key = |a: &crate::ir::NamedAttr| {
        let s = m.str(a.name);
        s.strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(s)
    };
    entries.sort_by(|a, b| key(a).cmp(key(b)));
    pr.w(if keyword { " attributes " } else { " " });
    pr.dict(&entries);
}
