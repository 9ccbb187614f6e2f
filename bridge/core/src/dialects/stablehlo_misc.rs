//! StableHLO ops with small declarative formats: `custom_call`,
//! `composite`, `rng`, `rng_bit_generator`, `fft`, `cholesky`, `einsum`,
//! `unary_einsum`, `optimization_barrier`, `after_all`, `create_token`,
//! `replica_id` and `partition_id`.
//!
//! Like MLIR, the printers leave out attributes that hold their default
//! value (`api_version = 1 : i32`, `has_side_effect = false`, ...).
//! Communication and batch-norm ops (`infeed`, `send`, `all_reduce`,
//! `batch_norm_training`, `triangular_solve`, ...) have no custom format
//! and print generically.

use super::common::{
    enum_attr, get_enum, get_i64_array, get_int, i64_array, parse_functional_type, parse_int_list,
    print_attr_dict_sorted, print_int_list,
};
use super::{OpFormat, ResultTypes};
use crate::ir::{AttrId, Attribute, OpId, Type, TypeId};
use crate::parse::{PResult, Parser};
use crate::print::Printer;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[
    OpFormat {
        name: "stablehlo.custom_call",
        parse: parse_custom_call,
        print: print_custom_call,
    },
    OpFormat {
        name: "stablehlo.composite",
        parse: parse_composite,
        print: print_composite,
    },
    OpFormat {
        name: "stablehlo.rng",
        parse: parse_rng,
        print: print_rng,
    },
    OpFormat {
        name: "stablehlo.rng_bit_generator",
        parse: parse_rng_bit_generator,
        print: print_rng_bit_generator,
    },
    OpFormat {
        name: "stablehlo.fft",
        parse: parse_fft,
        print: print_fft,
    },
    OpFormat {
        name: "stablehlo.cholesky",
        parse: parse_cholesky,
        print: print_cholesky,
    },
    OpFormat {
        name: "stablehlo.einsum",
        parse: parse_einsum,
        print: print_einsum,
    },
    OpFormat {
        name: "stablehlo.unary_einsum",
        parse: parse_einsum,
        print: print_einsum,
    },
    OpFormat {
        name: "stablehlo.optimization_barrier",
        parse: parse_optimization_barrier,
        print: print_optimization_barrier,
    },
    OpFormat {
        name: "stablehlo.after_all",
        parse: parse_after_all,
        print: print_after_all,
    },
    OpFormat {
        name: "stablehlo.create_token",
        parse: parse_nullary,
        print: print_nullary,
    },
    OpFormat {
        name: "stablehlo.replica_id",
        parse: parse_nullary,
        print: print_nullary,
    },
    OpFormat {
        name: "stablehlo.partition_id",
        parse: parse_nullary,
        print: print_nullary,
    },
];

// ----- helpers -----

/// Tells whether an attribute holds its default value.
type DefaultCheck = fn(&Printer<'_>, AttrId) -> bool;

fn string_attr(escaped: &str) -> Attribute {
    Attribute::String {
        escaped: escaped.into(),
        ty: None,
    }
}

/// The body of an untyped string attribute.
fn get_string<'m>(pr: &Printer<'m>, a: AttrId) -> Option<&'m str> {
    match pr.m.attr(a) {
        Attribute::String { escaped, ty: None } => Some(escaped),
        _ => None,
    }
}

/// Print `"body"`.
fn print_string(pr: &mut Printer<'_>, escaped: &str) {
    pr.w("\"");
    pr.w(escaped);
    pr.w("\"");
}

/// True if `name` is set and holds the default value `is_default` accepts;
/// such attributes are left out of the printed attribute dictionary.
fn is_default(pr: &Printer<'_>, op: OpId, name: &str, is_default: DefaultCheck) -> bool {
    pr.m.op_attr(op, name).is_some_and(|a| is_default(pr, a))
}

fn is_false(pr: &Printer<'_>, a: AttrId) -> bool {
    matches!(pr.m.attr(a), Attribute::Bool(false))
}

fn is_empty_array(pr: &Printer<'_>, a: AttrId) -> bool {
    matches!(pr.m.attr(a), Attribute::Array(v) if v.is_empty())
}

fn is_empty_dict(pr: &Printer<'_>, a: AttrId) -> bool {
    matches!(pr.m.attr(a), Attribute::Dict(v) if v.is_empty())
}

/// An `i32` integer attribute with value `v`.
fn is_i32(pr: &Printer<'_>, a: AttrId, v: i64) -> bool {
    let m = pr.m;
    match m.attr(a) {
        Attribute::Integer { ty: Some(t), .. } => {
            matches!(
                m.ty(*t),
                Type::Integer {
                    width: 32,
                    signedness: crate::ir::Signedness::Signless
                }
            ) && get_int(m, a) == Some(v)
        }
        _ => false,
    }
}

/// Names to leave out of the attr-dict: `covered` plus every attribute in
/// `defaults` that holds its default value.
fn elided<'a>(
    pr: &Printer<'_>,
    op: OpId,
    covered: &[&'a str],
    defaults: &[(&'a str, DefaultCheck)],
) -> Vec<&'a str> {
    let mut out = covered.to_vec();
    for &(name, f) in defaults {
        if is_default(pr, op, name, f) {
            out.push(name);
        }
    }
    out
}

/// `stablehlo<kind VALUE>` of attribute `name`, if present and well formed.
fn enum_value<'m>(pr: &Printer<'m>, op: OpId, name: &str, kind: &str) -> Option<&'m str> {
    let m = pr.m;
    m.op_attr(op, name)
        .and_then(|a| get_enum(m, a, "stablehlo", kind))
}

/// True if `op` has no regions and no successors.
fn plain(pr: &Printer<'_>, op: OpId) -> bool {
    let o = pr.m.op(op);
    o.regions.is_empty() && o.successors.is_empty()
}

// ----- stablehlo.custom_call -----

/// Print a symbol name like MLIR's `printSymbolName`: bare when it is an
/// identifier, quoted otherwise.
fn print_symbol(pr: &mut Printer<'_>, escaped: &str) {
    let b = escaped.as_bytes();
    let bare = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.'));
    pr.w("@");
    if bare {
        pr.w(escaped);
    } else {
        print_string(pr, escaped);
    }
}

const CUSTOM_CALL_DEFAULTS: &[(&str, DefaultCheck)] = &[
    ("has_side_effect", is_false),
    ("api_version", |pr, a| is_i32(pr, a, 1)),
    ("called_computations", is_empty_array),
    ("output_operand_aliases", is_empty_array),
];

const CUSTOM_CALL_INHERENT: &[&str] = &[
    "api_version",
    "backend_config",
    "call_target_name",
    "called_computations",
    "has_side_effect",
    "operand_layouts",
    "output_operand_aliases",
    "result_layouts",
    "result_tilings",
];

fn parse_custom_call(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let name = p.parse_symbol_name()?;
    let text = p.m.str(name);
    let escaped = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
        .to_string();
    p.set_prop(op, "call_target_name", string_attr(&escaped));
    p.c.expect(b'(')?;
    let refs = p.parse_operand_list_until(b')')?;
    p.parse_optional_attr_dict(op, CUSTOM_CALL_INHERENT)?;
    parse_functional_type(p, op, &refs, results)
}

fn print_custom_call(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !plain(pr, op) {
        return false;
    }
    let Some(target) = m
        .op_attr(op, "call_target_name")
        .and_then(|a| get_string(pr, a))
    else {
        return false;
    };
    if target.is_empty() {
        return false;
    }
    let skip = elided(pr, op, &["call_target_name"], CUSTOM_CALL_DEFAULTS);
    pr.w(" ");
    print_symbol(pr, target);
    pr.w("(");
    pr.operands(&m.op(op).operands);
    pr.w(")");
    print_attr_dict_sorted(pr, op, &skip, false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- stablehlo.composite -----

const COMPOSITE_DEFAULTS: &[(&str, DefaultCheck)] = &[
    ("composite_attributes", is_empty_dict),
    ("version", |pr, a| is_i32(pr, a, 0)),
];

fn parse_composite(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.c.ws();
    let name = p.c.string()?;
    p.set_prop(op, "name", string_attr(name));
    let refs = p.parse_operand_list()?;
    if p.c.eat(b'(') {
        loop {
            p.parse_region(op, None)?;
            if p.c.eat(b')') {
                break;
            }
            p.c.expect(b',')?;
        }
    }
    p.parse_optional_attr_dict(
        op,
        &["composite_attributes", "decomposition", "name", "version"],
    )?;
    parse_functional_type(p, op, &refs, results)
}

fn print_composite(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if !o.successors.is_empty() {
        return false;
    }
    let Some(name) = m.op_attr(op, "name").and_then(|a| get_string(pr, a)) else {
        return false;
    };
    let skip = elided(pr, op, &["name"], COMPOSITE_DEFAULTS);
    pr.w(" ");
    print_string(pr, name);
    pr.w(" ");
    pr.operands(&o.operands);
    if !o.regions.is_empty() {
        pr.w(" (");
        for (i, &r) in o.regions.iter().enumerate() {
            if i > 0 {
                pr.w(", ");
            }
            pr.region(r, true);
        }
        pr.w(")");
    }
    print_attr_dict_sorted(pr, op, &skip, false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- rng, rng_bit_generator, fft -----

/// `OPERANDS, KEYWORD = VALUE` where VALUE is a bare enum keyword.
fn parse_operands_and_enum<'s>(
    p: &mut Parser<'s>,
    op: OpId,
    keyword: &str,
    prop: &str,
    kind: &str,
) -> PResult<Vec<crate::parse::OperandRef<'s>>> {
    let mut refs = vec![p.parse_operand()?];
    loop {
        p.c.expect(b',')?;
        if p.c.eat_kw(keyword) {
            break;
        }
        refs.push(p.parse_operand()?);
    }
    p.c.expect(b'=')?;
    let v = p.c.expect_ident(&format!("{kind} value"))?;
    p.set_prop(op, prop, enum_attr("stablehlo", kind, v));
    Ok(refs)
}

fn parse_rng(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = parse_operands_and_enum(
        p,
        op,
        "distribution",
        "rng_distribution",
        "rng_distribution",
    )?;
    p.parse_optional_attr_dict(op, &["rng_distribution"])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_rng(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let Some(v) = enum_value(pr, op, "rng_distribution", "rng_distribution") else {
        return false;
    };
    if !plain(pr, op) || o.operands.len() != 3 {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.w(", distribution = ");
    pr.w(v);
    print_attr_dict_sorted(pr, op, &["rng_distribution"], false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

fn parse_rng_bit_generator(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = parse_operands_and_enum(p, op, "algorithm", "rng_algorithm", "rng_algorithm")?;
    p.parse_optional_attr_dict(op, &["rng_algorithm"])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_rng_bit_generator(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let Some(v) = enum_value(pr, op, "rng_algorithm", "rng_algorithm") else {
        return false;
    };
    if !plain(pr, op) || o.operands.len() != 1 {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.w(", algorithm = ");
    pr.w(v);
    print_attr_dict_sorted(pr, op, &["rng_algorithm"], false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

fn parse_fft(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = parse_operands_and_enum(p, op, "type", "fft_type", "fft_type")?;
    p.c.expect(b',')?;
    p.c.expect_kw("length")?;
    p.c.expect(b'=')?;
    let len = parse_int_list(p)?;
    let len = i64_array(&mut p.m, len);
    // MLIR prints properties sorted: fft_length before fft_type.
    let ty = p.m.op_mut(op).props.pop();
    p.set_prop(op, "fft_length", len);
    if let Some(t) = ty {
        p.m.op_mut(op).props.push(t);
    }
    p.parse_optional_attr_dict(op, &["fft_length", "fft_type"])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_fft(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let Some(v) = enum_value(pr, op, "fft_type", "fft_type") else {
        return false;
    };
    let Some(len) = m
        .op_attr(op, "fft_length")
        .and_then(|a| get_i64_array(m, a))
    else {
        return false;
    };
    if !plain(pr, op) || o.operands.len() != 1 {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.w(", type = ");
    pr.w(v);
    pr.w(", length = ");
    print_int_list(pr, len);
    print_attr_dict_sorted(pr, op, &["fft_type", "fft_length"], false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- cholesky, einsum -----

/// `: T` (operand and result share it) or `: (T) -> R`.
fn parse_unary_type<'s>(
    p: &mut Parser<'s>,
    op: OpId,
    r: crate::parse::OperandRef<'s>,
    results: &mut ResultTypes,
) -> PResult<()> {
    super::common::parse_same_operands_and_result_type(p, op, &[r], results)
}

fn parse_cholesky(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let a = p.parse_operand()?;
    if p.c.eat(b',') {
        p.c.expect_kw("lower")?;
        p.c.expect(b'=')?;
        let v = p.parse_attribute()?;
        p.set_prop_id(op, "lower", v);
    }
    p.parse_optional_attr_dict(op, &["lower"])?;
    parse_unary_type(p, op, a, results)
}

fn print_cholesky(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if !plain(pr, op) || o.operands.len() != 1 || o.results.len() != 1 {
        return false;
    }
    let lower = match m.op_attr(op, "lower") {
        Some(a) => match m.attr(a) {
            Attribute::Bool(b) => *b,
            _ => return false,
        },
        None => false,
    };
    pr.w(" ");
    pr.operands(&o.operands);
    if lower {
        pr.w(", lower = true");
    }
    // `lower = false` is the default and left out, as MLIR does.
    print_attr_dict_sorted(pr, op, &["lower"], false);
    super::common::print_same_operands_and_result_type(pr, op);
    true
}

fn parse_einsum(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let mut refs = vec![p.parse_operand()?];
    loop {
        p.c.expect(b',')?;
        if p.c.eat_kw("config") {
            break;
        }
        refs.push(p.parse_operand()?);
    }
    p.c.expect(b'=')?;
    p.c.ws();
    let cfg = p.c.string()?;
    p.set_prop(op, "einsum_config", string_attr(cfg));
    p.parse_optional_attr_dict(op, &["einsum_config"])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_einsum(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let want = if m.str(o.name) == "stablehlo.einsum" {
        2
    } else {
        1
    };
    let Some(cfg) = m
        .op_attr(op, "einsum_config")
        .and_then(|a| get_string(pr, a))
    else {
        return false;
    };
    if !plain(pr, op) || o.operands.len() != want {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.w(", config = ");
    print_string(pr, cfg);
    print_attr_dict_sorted(pr, op, &["einsum_config"], false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- optimization_barrier, after_all, tokens and ids -----

fn parse_optimization_barrier(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
) -> PResult<()> {
    p.parse_optional_attr_dict(op, &[])?;
    if p.c.eat(b'(') {
        p.c.expect(b')')?;
        return Ok(());
    }
    let refs = p.parse_operand_list()?;
    if refs.is_empty() {
        return p.c.expected("operands or '()'");
    }
    p.c.expect(b':')?;
    let types = p.parse_type_list()?;
    let vals = p.resolve_operands(&refs, &types)?;
    p.push_operands(op, &vals);
    results.extend(types);
    Ok(())
}

fn print_optimization_barrier(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if !plain(pr, op) || o.operands.len() != o.results.len() {
        return false;
    }
    let tys: Vec<TypeId> = o.operands.iter().map(|&v| m.value_type(v)).collect();
    if o.results
        .iter()
        .zip(&tys)
        .any(|(&r, &t)| m.value_type(r) != t)
    {
        return false;
    }
    print_attr_dict_sorted(pr, op, &[], false);
    if o.operands.is_empty() {
        pr.w("()");
    } else {
        pr.w(" ");
        pr.operands(&o.operands);
        pr.w(" : ");
        pr.types(&tys);
    }
    true
}

fn parse_after_all(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, &[])?;
    super::common::parse_same_operands_and_result_type(p, op, &refs, results)
}

fn print_after_all(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if !plain(pr, op) || o.results.len() != 1 {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    print_attr_dict_sorted(pr, op, &[], false);
    // Zero operands print just the result type.
    super::common::print_same_operands_and_result_type(pr, op);
    true
}

fn parse_nullary(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.parse_optional_attr_dict(op, &[])?;
    p.c.expect(b':')?;
    results.extend(p.parse_type_list()?);
    Ok(())
}

fn print_nullary(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if !plain(pr, op) || !o.operands.is_empty() || o.results.is_empty() {
        return false;
    }
    print_attr_dict_sorted(pr, op, &[], false);
    pr.w(" : ");
    let tys: Vec<TypeId> = o.results.iter().map(|&v| m.value_type(v)).collect();
    pr.types(&tys);
    true
}
