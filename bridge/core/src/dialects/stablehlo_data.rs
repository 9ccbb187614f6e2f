//! StableHLO shape and data-movement ops: `broadcast_in_dim`, `reshape`,
//! `transpose`, `slice`, `dynamic_slice`, `concatenate`, `iota`, `pad`,
//! `reverse`, tuples, `bitcast_convert`, `reduce_precision`,
//! `uniform_(de)quantize` and their dynamic variants.
//!
//! `gather`, `scatter`, `dynamic_gather`, `sort`, `select_and_scatter` and
//! `torch_index_select` have no custom syntax in MLIR (it prints them in
//! generic form), so they are not registered here.
//!
//! Every printer checks that the op has exactly the shape its syntax can
//! express (operand and result counts, attribute kinds and integer widths,
//! no unexpected inherent attributes) and otherwise returns `false` so the
//! op is printed generically.

use super::common::{
    get_i64_array, has_only, i64_array, int_attr, parse_functional_type, parse_int_list,
    parse_same_operands_and_result_type, print_int_list, print_same_operands_and_result_type,
};
use super::{OpFormat, ResultTypes};
use crate::ir::{AttrId, Attribute, Module, OpId, Signedness, Type};
use crate::parse::{OperandRef, PResult, Parser};
use crate::print::Printer;

macro_rules! formats {
    ($($name:literal => $parse:ident, $print:ident;)*) => {
        &[$(OpFormat { name: $name, parse: $parse, print: $print },)*]
    };
}

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = formats! {
    "stablehlo.broadcast" => parse_broadcast, print_broadcast;
    "stablehlo.broadcast_in_dim" => parse_broadcast_in_dim, print_broadcast_in_dim;
    "stablehlo.dynamic_broadcast_in_dim" => parse_dyn_broadcast_in_dim, print_dyn_broadcast_in_dim;
    "stablehlo.transpose" => parse_transpose, print_transpose;
    "stablehlo.reverse" => parse_reverse, print_reverse;
    "stablehlo.reshape" => parse_plain, print_plain_1;
    "stablehlo.bitcast_convert" => parse_plain, print_plain_1;
    "stablehlo.dynamic_reshape" => parse_plain, print_plain_2;
    "stablehlo.dynamic_update_slice" => parse_plain, print_plain_dus;
    "stablehlo.real_dynamic_slice" => parse_plain, print_plain_4;
    "stablehlo.dynamic_pad" => parse_plain, print_plain_5;
    "stablehlo.slice" => parse_slice, print_slice;
    "stablehlo.dynamic_slice" => parse_dynamic_slice, print_dynamic_slice;
    "stablehlo.concatenate" => parse_concatenate, print_concatenate;
    "stablehlo.iota" => parse_iota, print_iota;
    "stablehlo.dynamic_iota" => parse_dynamic_iota, print_dynamic_iota;
    "stablehlo.pad" => parse_pad, print_pad;
    "stablehlo.get_dimension_size" => parse_get_dimension_size, print_get_dimension_size;
    "stablehlo.set_dimension_size" => parse_set_dimension_size, print_set_dimension_size;
    "stablehlo.get_tuple_element" => parse_get_tuple_element, print_get_tuple_element;
    "stablehlo.tuple" => parse_tuple, print_tuple;
    "stablehlo.reduce_precision" => parse_reduce_precision, print_reduce_precision;
    "stablehlo.uniform_quantize" => parse_unary_same, print_unary_same;
    "stablehlo.uniform_dequantize" => parse_unary_same, print_unary_same;
};

// ----- shared helpers -----

/// The attribute named `name` on `op` (inherent or discardable), only if
/// it occurs exactly once.
fn unique_attr(m: &Module, op: OpId, name: &str) -> Option<AttrId> {
    let o = m.op(op);
    let mut found = None;
    for a in o.props.iter().chain(o.attrs.iter()) {
        if m.str(a.name) == name {
            if found.is_some() {
                return None;
            }
            found = Some(a.value);
        }
    }
    found
}

/// The `array<i64: ...>` attribute `name` of `op`.
fn dims_attr<'m>(m: &'m Module, op: OpId, name: &str) -> Option<&'m [i64]> {
    get_i64_array(m, unique_attr(m, op, name)?)
}

/// The value of integer attribute `name` of `op` if its type is the
/// signless `i{width}` (an untyped literal counts as `i64`).
fn int_prop(m: &Module, op: OpId, name: &str, width: u32) -> Option<i64> {
    let a = unique_attr(m, op, name)?;
    let Attribute::Integer { text, ty } = m.attr(a) else {
        return None;
    };
    let ok = match ty {
        None => width == 64,
        Some(t) => matches!(
            m.ty(*t),
            Type::Integer { width: w, signedness: Signedness::Signless } if *w == width
        ),
    };
    if !ok {
        return None;
    }
    crate::parse::parse_int_text(text)
}

/// True if `op` has one result, no regions or successors, `n` operands
/// (when given) and no inherent attributes outside `props`.
fn fits(m: &Module, op: OpId, n: Option<usize>, props: &[&str]) -> bool {
    let o = m.op(op);
    o.results.len() == 1
        && o.regions.is_empty()
        && o.successors.is_empty()
        && n.is_none_or(|n| o.operands.len() == n)
        && has_only(m, op, props)
}

/// `kw = [1, 2]`.
fn parse_kw_list(p: &mut Parser<'_>, kw: &str) -> PResult<Vec<i64>> {
    p.c.expect_kw(kw)?;
    p.c.expect(b'=')?;
    parse_int_list(p)
}

/// `kw = [1, 2]` into the inherent `array<i64>` attribute `name`.
fn parse_kw_dims(p: &mut Parser<'_>, op: OpId, kw: &str, name: &str) -> PResult<()> {
    let v = parse_kw_list(p, kw)?;
    let a = i64_array(&mut p.m, v);
    p.set_prop(op, name, a);
    Ok(())
}

/// `kw = N` into the inherent `iW` integer attribute `name`.
fn parse_kw_int(p: &mut Parser<'_>, op: OpId, kw: &str, name: &str, width: u32) -> PResult<()> {
    p.c.expect_kw(kw)?;
    p.c.expect(b'=')?;
    let v = parse_int_of_width(p, width)?;
    let a = int_attr(&mut p.m, v, width);
    p.set_prop(op, name, a);
    Ok(())
}

/// An integer literal that fits in `i{width}` (32 or 64).
fn parse_int_of_width(p: &mut Parser<'_>, width: u32) -> PResult<i64> {
    p.c.ws();
    let pos = p.c.pos;
    let v = p.c.int()?;
    if width == 32 && i32::try_from(v).is_err() {
        return p.c.err_at(pos, format!("integer {v} does not fit in i32"));
    }
    Ok(v)
}

/// Operands each followed by a comma (`%a, %b,`), stopping before the
/// first non-operand; MLIR's `VariadicOperandWithAttribute`.
fn parse_operands_with_trailing_commas<'s>(p: &mut Parser<'s>) -> PResult<Vec<OperandRef<'s>>> {
    let mut refs = Vec::new();
    while p.at_operand() {
        refs.push(p.parse_operand()?);
        p.c.expect(b',')?;
    }
    Ok(refs)
}

/// ` %a, ` then ` kw = [..]` (the shape shared by several printers).
fn print_operands_comma(pr: &mut Printer<'_>, op: OpId) {
    let o = pr.m.op(op);
    pr.w(" ");
    pr.operands(&o.operands);
    pr.w(", ");
}

fn print_kw_dims(pr: &mut Printer<'_>, kw: &str, dims: &[i64]) {
    pr.w(kw);
    pr.w(" = ");
    print_int_list(pr, dims);
}

/// ` {attrs} : (T, ...) -> R` for the attributes not in `elided`.
fn finish_functional(pr: &mut Printer<'_>, op: OpId, elided: &[&str]) -> bool {
    pr.attr_dict(op, elided);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- `operands attr-dict : functional-type` -----

fn parse_plain(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_plain_n(pr: &mut Printer<'_>, op: OpId, n: usize) -> bool {
    let m = pr.m;
    if !fits(m, op, Some(n), &[]) {
        return false;
    }
    pr.w(" ");
    pr.operands(&m.op(op).operands);
    finish_functional(pr, op, &[])
}

/// Printers for fixed operand counts.
macro_rules! plain_printers {
    ($($name:ident => $n:literal;)*) => {
        $(fn $name(pr: &mut Printer<'_>, op: OpId) -> bool {
            print_plain_n(pr, op, $n)
        })*
    };
}

plain_printers! {
    print_plain_1 => 1;
    print_plain_2 => 2;
    print_plain_4 => 4;
    print_plain_5 => 5;
}

fn print_plain_dus(pr: &mut Printer<'_>, op: OpId) -> bool {
    let n = pr.m.op(op).operands.len();
    n >= 2 && print_plain_n(pr, op, n)
}

// ----- `operand attr-dict : SameOperandsAndResultType` -----

fn parse_unary_same(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let r = p.parse_operand()?;
    p.parse_optional_attr_dict(op, &[])?;
    parse_same_operands_and_result_type(p, op, &[r], results)
}

fn print_unary_same(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !fits(m, op, Some(1), &[]) {
        return false;
    }
    pr.w(" ");
    pr.operands(&m.op(op).operands);
    pr.attr_dict(op, &[]);
    print_same_operands_and_result_type(pr, op);
    true
}

// ----- broadcast, broadcast_in_dim, transpose -----

/// `%x, KW = [..] attr-dict : functional-type` (one operand).
fn parse_operand_kw_dims(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
    kw: &str,
    name: &str,
) -> PResult<()> {
    let r = p.parse_operand()?;
    p.c.expect(b',')?;
    parse_kw_dims(p, op, kw, name)?;
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &[r], results)
}

fn print_operand_kw_dims(pr: &mut Printer<'_>, op: OpId, n: usize, kw: &str, name: &str) -> bool {
    let m = pr.m;
    let Some(dims) = dims_attr(m, op, name) else {
        return false;
    };
    if !fits(m, op, Some(n), &[name]) {
        return false;
    }
    print_operands_comma(pr, op);
    print_kw_dims(pr, kw, dims);
    finish_functional(pr, op, &[name])
}

/// Parse and print functions for one `%x, KW = [..]` op.
macro_rules! kw_dims_format {
    ($($parse:ident, $print:ident => $kw:literal, $name:literal;)*) => {
        $(fn $parse(p: &mut Parser<'_>, op: OpId, r: &mut ResultTypes) -> PResult<()> {
            parse_operand_kw_dims(p, op, r, $kw, $name)
        }

        fn $print(pr: &mut Printer<'_>, op: OpId) -> bool {
            print_operand_kw_dims(pr, op, 1, $kw, $name)
        })*
    };
}

kw_dims_format! {
    parse_broadcast, print_broadcast => "sizes", "broadcast_sizes";
    parse_broadcast_in_dim, print_broadcast_in_dim => "dims", "broadcast_dimensions";
    parse_transpose, print_transpose => "dims", "permutation";
}

const DYN_BCAST_PROPS: &[&str] = &[
    "broadcast_dimensions",
    "known_expanding_dimensions",
    "known_nonexpanding_dimensions",
];

fn parse_dyn_broadcast_in_dim(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
) -> PResult<()> {
    let a = p.parse_operand()?;
    p.c.expect(b',')?;
    let shape = p.parse_operand()?;
    p.c.expect(b',')?;
    parse_kw_dims(p, op, "dims", "broadcast_dimensions")?;
    p.parse_optional_attr_dict(op, &DYN_BCAST_PROPS[1..])?;
    parse_functional_type(p, op, &[a, shape], results)
}

fn print_dyn_broadcast_in_dim(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(dims) = dims_attr(m, op, "broadcast_dimensions") else {
        return false;
    };
    if !fits(m, op, Some(2), DYN_BCAST_PROPS) {
        return false;
    }
    print_operands_comma(pr, op);
    print_kw_dims(pr, "dims", dims);
    finish_functional(pr, op, &["broadcast_dimensions"])
}

// ----- reverse, reduce_precision (SameOperandsAndResultType) -----

fn parse_reverse(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let r = p.parse_operand()?;
    p.c.expect(b',')?;
    parse_kw_dims(p, op, "dims", "dimensions")?;
    p.parse_optional_attr_dict(op, &[])?;
    parse_same_operands_and_result_type(p, op, &[r], results)
}

fn print_reverse(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(dims) = dims_attr(m, op, "dimensions") else {
        return false;
    };
    if !fits(m, op, Some(1), &["dimensions"]) {
        return false;
    }
    print_operands_comma(pr, op);
    print_kw_dims(pr, "dims", dims);
    pr.attr_dict(op, &["dimensions"]);
    print_same_operands_and_result_type(pr, op);
    true
}

const PRECISION_PROPS: &[&str] = &["exponent_bits", "mantissa_bits"];

fn parse_reduce_precision(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let r = p.parse_operand()?;
    p.c.expect(b',')?;
    p.c.expect_kw("format")?;
    p.c.expect(b'=')?;
    p.c.ws();
    let pos = p.c.pos;
    let kw = p.c.ident().unwrap_or("");
    let Some((e, mant)) = split_exponent_mantissa(kw) else {
        return p.c.err_at(
            pos,
            format!("expected exponent mantissa in format e#m#, saw '{kw}'"),
        );
    };
    let ea = int_attr(&mut p.m, e, 32);
    p.set_prop(op, "exponent_bits", ea);
    let ma = int_attr(&mut p.m, mant, 32);
    p.set_prop(op, "mantissa_bits", ma);
    p.parse_optional_attr_dict(op, &[])?;
    parse_same_operands_and_result_type(p, op, &[r], results)
}

/// `e5m10` → (5, 10); both must be decimal and fit in `i32`.
fn split_exponent_mantissa(kw: &str) -> Option<(i64, i64)> {
    let rest = kw.strip_prefix('e')?;
    let (e, m) = rest.split_once('m')?;
    let num = |s: &str| -> Option<i64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<i32>().ok().map(i64::from)
    };
    Some((num(e)?, num(m)?))
}

fn print_reduce_precision(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let (Some(e), Some(mant)) = (
        int_prop(m, op, "exponent_bits", 32),
        int_prop(m, op, "mantissa_bits", 32),
    ) else {
        return false;
    };
    if e < 0 || mant < 0 || !fits(m, op, Some(1), PRECISION_PROPS) {
        return false;
    }
    print_operands_comma(pr, op);
    pr.w("format = e");
    pr.int(e);
    pr.w("m");
    pr.int(mant);
    pr.attr_dict(op, PRECISION_PROPS);
    print_same_operands_and_result_type(pr, op);
    true
}

// ----- slice, dynamic_slice -----

const SLICE_PROPS: &[&str] = &["start_indices", "limit_indices", "strides"];

fn parse_slice(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let r = p.parse_operand()?;
    p.c.expect(b'[')?;
    let (mut start, mut limit, mut strides) = (Vec::new(), Vec::new(), Vec::new());
    if !p.c.eat(b']') {
        loop {
            start.push(p.c.int()?);
            p.c.expect(b':')?;
            limit.push(p.c.int()?);
            strides.push(if p.c.eat(b':') { p.c.int()? } else { 1 });
            if p.c.eat(b']') {
                break;
            }
            p.c.expect(b',')?;
        }
    }
    // Set in MLIR's (alphabetical) property order, so the generic form
    // prints like MLIR's.
    for (name, v) in [
        ("limit_indices", limit),
        ("start_indices", start),
        ("strides", strides),
    ] {
        let a = i64_array(&mut p.m, v);
        p.set_prop(op, name, a);
    }
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &[r], results)
}

fn print_slice(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let (Some(start), Some(limit), Some(strides)) = (
        dims_attr(m, op, "start_indices"),
        dims_attr(m, op, "limit_indices"),
        dims_attr(m, op, "strides"),
    ) else {
        return false;
    };
    if start.len() != limit.len()
        || start.len() != strides.len()
        || !fits(m, op, Some(1), SLICE_PROPS)
    {
        return false;
    }
    pr.w(" ");
    pr.operands(&m.op(op).operands);
    pr.w(" [");
    for (i, ((&s, &l), &st)) in start.iter().zip(limit).zip(strides).enumerate() {
        if i > 0 {
            pr.w(", ");
        }
        pr.int(s);
        pr.w(":");
        pr.int(l);
        if st != 1 {
            pr.w(":");
            pr.int(st);
        }
    }
    pr.w("]");
    finish_functional(pr, op, SLICE_PROPS)
}

fn parse_dynamic_slice(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let mut refs = vec![p.parse_operand()?];
    p.c.expect(b',')?;
    let starts = parse_operands_with_trailing_commas(p)?;
    if starts.is_empty() {
        // MLIR prints a rank-0 dynamic_slice as `%x, , sizes = []`.
        p.c.eat(b',');
    }
    refs.extend(starts);
    parse_kw_dims(p, op, "sizes", "slice_sizes")?;
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_dynamic_slice(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let Some(sizes) = dims_attr(m, op, "slice_sizes") else {
        return false;
    };
    // Without start indices MLIR's own syntax does not parse back.
    if o.operands.len() < 2 || !fits(m, op, None, &["slice_sizes"]) {
        return false;
    }
    print_operands_comma(pr, op);
    print_kw_dims(pr, "sizes", sizes);
    finish_functional(pr, op, &["slice_sizes"])
}

// ----- concatenate, iota, dynamic_iota, dimension sizes -----

fn parse_concatenate(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = parse_operands_with_trailing_commas(p)?;
    parse_kw_int(p, op, "dim", "dimension", 64)?;
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_concatenate(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(d) = int_prop(m, op, "dimension", 64) else {
        return false;
    };
    if m.op(op).operands.is_empty() || !fits(m, op, None, &["dimension"]) {
        return false;
    }
    print_operands_comma(pr, op);
    pr.w("dim = ");
    pr.int(d);
    finish_functional(pr, op, &["dimension"])
}

fn parse_iota(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    parse_kw_int(p, op, "dim", "iota_dimension", 64)?;
    p.parse_optional_attr_dict(op, &[])?;
    p.c.expect(b':')?;
    results.push(p.parse_type()?);
    Ok(())
}

fn print_iota(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(d) = int_prop(m, op, "iota_dimension", 64) else {
        return false;
    };
    if !fits(m, op, Some(0), &["iota_dimension"]) {
        return false;
    }
    pr.w(" dim = ");
    pr.int(d);
    pr.attr_dict(op, &["iota_dimension"]);
    pr.w(" : ");
    pr.ty(m.value_type(m.op(op).results[0]));
    true
}

/// `%a, (%b,)? dim = N attr-dict : functional-type` with `n` operands.
fn parse_operands_dim(
    p: &mut Parser<'_>,
    op: OpId,
    results: &mut ResultTypes,
    n: usize,
    name: &str,
) -> PResult<()> {
    let mut refs = Vec::with_capacity(n);
    for _ in 0..n {
        refs.push(p.parse_operand()?);
        p.c.expect(b',')?;
    }
    parse_kw_int(p, op, "dim", name, 64)?;
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_operands_dim(pr: &mut Printer<'_>, op: OpId, n: usize, name: &str) -> bool {
    let m = pr.m;
    let Some(d) = int_prop(m, op, name, 64) else {
        return false;
    };
    if !fits(m, op, Some(n), &[name]) {
        return false;
    }
    print_operands_comma(pr, op);
    pr.w("dim = ");
    pr.int(d);
    finish_functional(pr, op, &[name])
}

/// Parse and print functions for one `%a, (%b,)? dim = N` op.
macro_rules! dim_format {
    ($($parse:ident, $print:ident => $n:literal, $name:literal;)*) => {
        $(fn $parse(p: &mut Parser<'_>, op: OpId, r: &mut ResultTypes) -> PResult<()> {
            parse_operands_dim(p, op, r, $n, $name)
        }

        fn $print(pr: &mut Printer<'_>, op: OpId) -> bool {
            print_operands_dim(pr, op, $n, $name)
        })*
    };
}

dim_format! {
    parse_dynamic_iota, print_dynamic_iota => 1, "iota_dimension";
    parse_get_dimension_size, print_get_dimension_size => 1, "dimension";
    parse_set_dimension_size, print_set_dimension_size => 2, "dimension";
}

// ----- pad -----

const PAD_PROPS: &[&str] = &["edge_padding_low", "edge_padding_high", "interior_padding"];

fn parse_pad(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let a = p.parse_operand()?;
    p.c.expect(b',')?;
    let v = p.parse_operand()?;
    p.c.expect(b',')?;
    let low = parse_kw_list(p, "low")?;
    p.c.expect(b',')?;
    let high = parse_kw_list(p, "high")?;
    p.c.expect(b',')?;
    let interior = parse_kw_list(p, "interior")?;
    // MLIR's (alphabetical) property order, so the generic form matches.
    for (name, v) in [
        ("edge_padding_high", high),
        ("edge_padding_low", low),
        ("interior_padding", interior),
    ] {
        let a = i64_array(&mut p.m, v);
        p.set_prop(op, name, a);
    }
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &[a, v], results)
}

fn print_pad(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let (Some(low), Some(high), Some(interior)) = (
        dims_attr(m, op, PAD_PROPS[0]),
        dims_attr(m, op, PAD_PROPS[1]),
        dims_attr(m, op, PAD_PROPS[2]),
    ) else {
        return false;
    };
    if !fits(m, op, Some(2), PAD_PROPS) {
        return false;
    }
    print_operands_comma(pr, op);
    print_kw_dims(pr, "low", low);
    pr.w(", ");
    print_kw_dims(pr, "high", high);
    pr.w(", ");
    print_kw_dims(pr, "interior", interior);
    finish_functional(pr, op, PAD_PROPS)
}

// ----- tuples -----

fn parse_get_tuple_element(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let r = p.parse_operand()?;
    p.c.expect(b'[')?;
    let idx = parse_int_of_width(p, 32)?;
    p.c.expect(b']')?;
    let a = int_attr(&mut p.m, idx, 32);
    p.set_prop(op, "index", a);
    p.parse_optional_attr_dict(op, &[])?;
    parse_functional_type(p, op, &[r], results)
}

fn print_get_tuple_element(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(idx) = int_prop(m, op, "index", 32) else {
        return false;
    };
    if !fits(m, op, Some(1), &["index"]) {
        return false;
    }
    pr.w(" ");
    pr.operands(&m.op(op).operands);
    pr.w("[");
    pr.int(idx);
    pr.w("]");
    finish_functional(pr, op, &["index"])
}

fn parse_tuple(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, &[])?;
    p.c.expect(b':')?;
    p.c.ws();
    let pos = p.c.pos;
    let t = p.parse_type()?;
    let Type::Tuple(elems) = p.m.ty(t) else {
        return p.c.err_at(pos, "expected tuple type");
    };
    let elems = elems.clone();
    let vals = p.resolve_operands(&refs, &elems)?;
    p.push_operands(op, &vals);
    results.push(t);
    Ok(())
}

fn print_tuple(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    if !fits(m, op, None, &[]) {
        return false;
    }
    let o = m.op(op);
    let rt = m.value_type(o.results[0]);
    let Type::Tuple(elems) = m.ty(rt) else {
        return false;
    };
    if elems.len() != o.operands.len()
        || elems
            .iter()
            .zip(&o.operands)
            .any(|(&t, &v)| m.value_type(v) != t)
    {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.attr_dict(op, &[]);
    pr.w(" : ");
    pr.ty(rt);
    true
}
