//! Custom assembly formats of the `chlo` ops (client HLO).
//!
//! - unary ops: `%r = chlo.asin %x : tensor<4xf32> -> tensor<4xf32>`
//! - binary ops without broadcasting:
//!   `%r = chlo.next_after %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`
//! - broadcasting binary ops (attributes in the attr-dict):
//!   `%r = chlo.broadcast_add %a, %b {broadcast_dimensions = array<i64: 0>} : (T, U) -> R`
//! - `chlo.broadcast_select %p, %t, %f : (P, T, F) -> R`
//! - `chlo.top_k(%x, k = 5) : T -> (V, I)`
//! - `chlo.constant dense<...> : T`
//! - `chlo.scan(%in) inits (%init) dimension=0 { ^bb0(...): ... } : (...) -> (...)`
//!
//! `chlo.constant_like` and `chlo.ragged_dot` have no custom format and
//! always print in generic form. The small helpers at the end are shared
//! with the `sdy` formats.

use super::common::{get_int, parse_functional_type};
use super::{OpFormat, ParseFn, PrintFn, ResultTypes};
use crate::ir::{Attribute, DenseArrayData, Module, OpId, Signedness, Type, TypeId};
use crate::parse::{PResult, Parser};
use crate::print::Printer;

const fn f(name: &'static str, parse: ParseFn, print: PrintFn) -> OpFormat {
    OpFormat { name, parse, print }
}

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[
    // unary: `$operand attr-dict : type($operand) -> type($result)`
    f("chlo._asin_acos_kernel", parse_unary, print_unary),
    f("chlo.acos", parse_unary, print_unary),
    f("chlo.acosh", parse_unary, print_unary),
    f("chlo.asin", parse_unary, print_unary),
    f("chlo.asinh", parse_unary, print_unary),
    f("chlo.atan", parse_unary, print_unary),
    f("chlo.atanh", parse_unary, print_unary),
    f("chlo.bessel_i1e", parse_unary, print_unary),
    f("chlo.conj", parse_unary, print_unary),
    f("chlo.cosh", parse_unary, print_unary),
    f("chlo.digamma", parse_unary, print_unary),
    f("chlo.erf", parse_unary, print_unary),
    f("chlo.erf_inv", parse_unary, print_unary),
    f("chlo.erfc", parse_unary, print_unary),
    f("chlo.is_inf", parse_unary, print_unary),
    f("chlo.is_neg_inf", parse_unary, print_unary),
    f("chlo.is_pos_inf", parse_unary, print_unary),
    f("chlo.lgamma", parse_unary, print_unary),
    f("chlo.sinh", parse_unary, print_unary),
    f("chlo.square", parse_unary, print_unary),
    f("chlo.tan", parse_unary, print_unary),
    // binary: `$lhs, $rhs attr-dict : type($lhs), type($rhs) -> type($result)`
    f("chlo.mulhi", parse_binary, print_binary),
    f("chlo.next_after", parse_binary, print_binary),
    f("chlo.polygamma", parse_binary, print_binary),
    f("chlo.zeta", parse_binary, print_binary),
    // broadcasting: `$lhs, $rhs attr-dict : (type, type) -> type`
    f("chlo.broadcast_add", parse_broadcast, print_broadcast),
    f("chlo.broadcast_and", parse_broadcast, print_broadcast),
    f("chlo.broadcast_atan2", parse_broadcast, print_broadcast),
    f("chlo.broadcast_compare", parse_broadcast, print_broadcast),
    f("chlo.broadcast_complex", parse_broadcast, print_broadcast),
    f("chlo.broadcast_divide", parse_broadcast, print_broadcast),
    f("chlo.broadcast_maximum", parse_broadcast, print_broadcast),
    f("chlo.broadcast_minimum", parse_broadcast, print_broadcast),
    f("chlo.broadcast_multiply", parse_broadcast, print_broadcast),
    f(
        "chlo.broadcast_next_after",
        parse_broadcast,
        print_broadcast,
    ),
    f("chlo.broadcast_or", parse_broadcast, print_broadcast),
    f("chlo.broadcast_polygamma", parse_broadcast, print_broadcast),
    f("chlo.broadcast_power", parse_broadcast, print_broadcast),
    f("chlo.broadcast_remainder", parse_broadcast, print_broadcast),
    f("chlo.broadcast_select", parse_broadcast, print_broadcast),
    f(
        "chlo.broadcast_shift_left",
        parse_broadcast,
        print_broadcast,
    ),
    f(
        "chlo.broadcast_shift_right_arithmetic",
        parse_broadcast,
        print_broadcast,
    ),
    f(
        "chlo.broadcast_shift_right_logical",
        parse_broadcast,
        print_broadcast,
    ),
    f("chlo.broadcast_subtract", parse_broadcast, print_broadcast),
    f("chlo.broadcast_xor", parse_broadcast, print_broadcast),
    f("chlo.broadcast_zeta", parse_broadcast, print_broadcast),
    // others
    f("chlo.top_k", parse_top_k, print_top_k),
    f(
        "chlo.constant",
        parse_elements_constant,
        print_elements_constant,
    ),
    f("chlo.scan", parse_scan, print_scan),
];

/// Inherent attributes of a broadcasting op.
fn broadcast_inherent(name: &str) -> &'static [&'static str] {
    match name {
        "chlo.broadcast_compare" => &[
            "broadcast_dimensions",
            "comparison_direction",
            "compare_type",
        ],
        "chlo.broadcast_select" => &[],
        _ => &["broadcast_dimensions"],
    }
}

// ----- unary and binary -----

fn parse_unary(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let r = p.parse_operand()?;
    p.parse_optional_attr_dict(op, &[])?;
    p.c.expect(b':')?;
    let t = p.parse_type()?;
    p.c.expect_str("->")?;
    let rt = p.parse_type()?;
    let v = p.resolve_operand(&r, t)?;
    p.push_operands(op, &[v]);
    results.push(rt);
    Ok(())
}

fn print_unary(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 1, 1, &[]) {
        return false;
    }
    let o = m.op(op);
    pr.w(" ");
    pr.operand(o.operands[0]);
    pr.attr_dict(op, &[]);
    pr.w(" : ");
    pr.ty(m.value_type(o.operands[0]));
    pr.w(" -> ");
    pr.ty(m.value_type(o.results[0]));
    true
}

fn parse_binary(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let lhs = p.parse_operand()?;
    p.c.expect(b',')?;
    let rhs = p.parse_operand()?;
    p.parse_optional_attr_dict(op, &[])?;
    p.c.expect(b':')?;
    let lt = p.parse_type()?;
    p.c.expect(b',')?;
    let rt = p.parse_type()?;
    p.c.expect_str("->")?;
    let res = p.parse_type()?;
    let vals = p.resolve_operands(&[lhs, rhs], &[lt, rt])?;
    p.push_operands(op, &vals);
    results.push(res);
    Ok(())
}

fn print_binary(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 2, 1, &[]) {
        return false;
    }
    let o = m.op(op);
    pr.w(" ");
    pr.operands(&o.operands);
    pr.attr_dict(op, &[]);
    pr.w(" : ");
    pr.ty(m.value_type(o.operands[0]));
    pr.w(", ");
    pr.ty(m.value_type(o.operands[1]));
    pr.w(" -> ");
    pr.ty(m.value_type(o.results[0]));
    true
}

fn parse_broadcast(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let inherent = broadcast_inherent(p.m.op_name(op));
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, inherent)?;
    parse_functional_type(p, op, &refs, results)?;
    Ok(())
}

fn print_broadcast(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let name = m.op_name(op);
    let arity = if name == "chlo.broadcast_select" {
        3
    } else {
        2
    };
    if !is_plain(m, op, arity, 1, broadcast_inherent(name)) {
        return false;
    }
    pr.w(" ");
    pr.operands(&m.op(op).operands);
    pr.attr_dict(op, &[]);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- top_k -----

fn parse_top_k(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.c.expect(b'(')?;
    let r = p.parse_operand()?;
    p.c.expect(b',')?;
    p.c.expect_kw("k")?;
    p.c.expect(b'=')?;
    let k = p.c.int()?;
    let k = super::common::int_attr(&mut p.m, k, 64);
    p.set_prop(op, "k", k);
    // Newer StableHLO prints `is_stable` inside the parentheses; this
    // version keeps it as an ordinary attribute.
    let mut is_stable = None;
    if p.c.eat(b',') {
        p.c.expect_kw("is_stable")?;
        p.c.expect(b'=')?;
        is_stable = Some(p.parse_attribute()?);
    }
    p.c.expect(b')')?;
    p.parse_optional_attr_dict(op, &["k"])?;
    if let Some(v) = is_stable {
        let name = p.m.sym("is_stable");
        p.m.op_mut(op)
            .attrs
            .push(crate::ir::NamedAttr { name, value: v });
    }
    p.c.expect(b':')?;
    let t = p.parse_type()?;
    p.c.expect_str("->")?;
    p.c.expect(b'(')?;
    let vt = p.parse_type()?;
    p.c.expect(b',')?;
    let it = p.parse_type()?;
    p.c.expect(b')')?;
    let v = p.resolve_operand(&r, t)?;
    p.push_operands(op, &[v]);
    results.push(vt);
    results.push(it);
    Ok(())
}

fn print_top_k(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 1, 2, &["k"]) {
        return false;
    }
    let Some(k) = m.op_attr(op, "k").and_then(|a| get_typed_int(m, a, 64)) else {
        return false;
    };
    let o = m.op(op);
    pr.w("(");
    pr.operand(o.operands[0]);
    pr.w(", k = ");
    pr.int(k);
    pr.w(")");
    pr.attr_dict(op, &["k"]);
    pr.w(" : ");
    pr.ty(m.value_type(o.operands[0]));
    pr.w(" -> (");
    pr.ty(m.value_type(o.results[0]));
    pr.w(", ");
    pr.ty(m.value_type(o.results[1]));
    pr.w(")");
    true
}

// ----- scan -----

const SCAN_ELIDED: &[&str] = &["dimension", "operandSegmentSizes", "resultSegmentSizes"];
const SCAN_INHERENT: &[&str] = &[
    "dimension",
    "scan_dim_size",
    "is_reverse",
    "is_associative",
    "operandSegmentSizes",
    "resultSegmentSizes",
];

fn parse_scan(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.c.expect(b'(')?;
    let inputs = p.parse_operand_list_until(b')')?;
    p.c.expect_kw("inits")?;
    p.c.expect(b'(')?;
    let inits = p.parse_operand_list_until(b')')?;
    p.c.expect_kw("dimension")?;
    p.c.expect(b'=')?;
    let dim = p.c.int()?;
    p.parse_optional_attr_dict_with_keyword(op, SCAN_INHERENT)?;
    p.parse_region(op, None)?;
    p.c.expect(b':')?;
    p.c.ws();
    let pos = p.c.pos;
    let (ins, outs) = p.parse_function_type_parts()?;
    if ins.len() != inputs.len() + inits.len() {
        return p.c.err_at(
            pos,
            "chlo.scan: operand types must match the number of inputs and inits",
        );
    }
    if outs.len() < inits.len() {
        return p.c.err_at(
            pos,
            "chlo.scan: not enough result types to cover the required carries",
        );
    }
    let all: Vec<_> = inputs.iter().chain(inits.iter()).copied().collect();
    let vals = p.resolve_operands(&all, &ins)?;
    p.push_operands(op, &vals);
    let dim = super::common::int_attr(&mut p.m, dim, 64);
    p.set_prop(op, "dimension", dim);
    let seg = |n: usize| n as i64;
    let operand_seg = i32_array(&mut p.m, vec![seg(inputs.len()), seg(inits.len())]);
    p.set_prop(op, "operandSegmentSizes", operand_seg);
    let result_seg = i32_array(
        &mut p.m,
        vec![seg(outs.len() - inits.len()), seg(inits.len())],
    );
    p.set_prop(op, "resultSegmentSizes", result_seg);
    results.extend(outs);
    Ok(())
}

fn print_scan(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.regions.len() != 1 || !o.successors.is_empty() || !has_only_props(m, op, SCAN_INHERENT) {
        return false;
    }
    let Some(dim) = m
        .op_attr(op, "dimension")
        .and_then(|a| get_typed_int(m, a, 64))
    else {
        return false;
    };
    let (Some(os), Some(rs)) = (
        m.op_attr(op, "operandSegmentSizes")
            .and_then(|a| get_i32_array(m, a)),
        m.op_attr(op, "resultSegmentSizes")
            .and_then(|a| get_i32_array(m, a)),
    ) else {
        return false;
    };
    let (&[n_in, n_init], &[n_out, n_carry]) = (os, rs) else {
        return false;
    };
    let ok = [n_in, n_init, n_out, n_carry].iter().all(|&n| n >= 0)
        && n_carry == n_init
        && (n_in + n_init) as usize == o.operands.len()
        && (n_out + n_carry) as usize == o.results.len();
    if !ok {
        return false;
    }
    let n_in = n_in as usize;
    pr.w("(");
    pr.operands(&o.operands[..n_in]);
    pr.w(") inits (");
    pr.operands(&o.operands[n_in..]);
    pr.w(") dimension=");
    pr.int(dim);
    pr.w(" ");
    pr.attr_dict_with_keyword(op, SCAN_ELIDED);
    pr.w(" ");
    pr.region(o.regions[0], true);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- helpers shared with the sdy formats -----

/// True if `op` has exactly `operands` operands and `results` results, no
/// regions or successors, and no inherent attribute outside `inherent`.
pub(super) fn is_plain(
    m: &Module,
    op: OpId,
    operands: usize,
    results: usize,
    inherent: &[&str],
) -> bool {
    let o = m.op(op);
    o.operands.len() == operands
        && o.results.len() == results
        && o.regions.is_empty()
        && o.successors.is_empty()
        && has_only_props(m, op, inherent)
}

/// True if every inherent attribute of `op` is named in `allowed`.
pub(super) fn has_only_props(m: &Module, op: OpId, allowed: &[&str]) -> bool {
    m.op(op)
        .props
        .iter()
        .all(|a| allowed.contains(&m.str(a.name)))
}

/// The value of an integer attribute whose type is `iN` (signless, width
/// `width`) or absent (which means `i64`).
pub(super) fn get_typed_int(m: &Module, a: crate::ir::AttrId, width: u32) -> Option<i64> {
    let Attribute::Integer { ty, .. } = m.attr(a) else {
        return None;
    };
    let ok = match ty {
        None => width == 64,
        Some(t) => matches!(
            m.ty(*t),
            Type::Integer { width: w, signedness: Signedness::Signless } if *w == width
        ),
    };
    if ok {
        get_int(m, a)
    } else {
        None
    }
}

/// An `array<i32: ...>` attribute.
fn i32_array(m: &mut Module, vals: Vec<i64>) -> Attribute {
    let elem = m.int_type(32);
    Attribute::DenseArray {
        elem,
        data: DenseArrayData::Int(vals),
    }
}

/// The elements of an `array<i32: ...>` attribute.
fn get_i32_array(m: &Module, a: crate::ir::AttrId) -> Option<&[i64]> {
    match m.attr(a) {
        Attribute::DenseArray {
            data: DenseArrayData::Int(v),
            elem,
        } if matches!(
            m.ty(*elem),
            Type::Integer {
                width: 32,
                signedness: Signedness::Signless
            }
        ) =>
        {
            Some(v)
        }
        _ => None,
    }
}

/// The type of a dense elements attribute (`dense<..> : T`,
/// `dense_resource<..> : T`).
fn elements_type(m: &Module, a: crate::ir::AttrId) -> Option<TypeId> {
    match m.attr(a) {
        Attribute::Dense { ty, .. } | Attribute::DenseResource { ty, .. } => Some(*ty),
        _ => None,
    }
}

/// Parse `attr-dict $value` (the `constant` shape of `chlo` and `sdy`):
/// the result type is the type of the elements attribute.
pub(super) fn parse_elements_constant(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
) -> PResult<()> {
    p.parse_optional_attr_dict(op, &["value"])?;
    p.c.ws();
    let start = p.c.pos;
    let value = p.parse_attribute()?;
    let Some(ty) = elements_type(&p.m, value) else {
        return p.c.err_at(
            start,
            "expected a dense elements attribute with a type ('dense<...> : T')",
        );
    };
    p.set_prop_id(op, "value", value);
    results.push(ty);
    Ok(())
}

/// Print `attr-dict $value`; the op must have one result whose type is the
/// value's type.
pub(super) fn print_elements_constant(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !is_plain(m, op, 0, 1, &["value"]) {
        return false;
    }
    let Some(v) = m.op_attr(op, "value") else {
        return false;
    };
    if elements_type(m, v) != Some(m.value_type(m.op(op).results[0])) {
        return false;
    }
    pr.attr_dict(op, &["value"]);
    pr.w(" ");
    pr.attr(v);
    true
}
