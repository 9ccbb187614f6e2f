//! StableHLO contractions: `stablehlo.dot`, `stablehlo.dot_general`
//! (`batching_dims = [0] x [0], contracting_dims = [2] x [1], precision =
//! [DEFAULT, DEFAULT], algorithm = <...>`) and `stablehlo.convolution`
//! (`dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window =
//! {stride = [..], pad = [[..]], ...}`).
//!
//! The pretty syntax stands for structured dialect attributes
//! (`#stablehlo.dot<...>`, `#stablehlo.conv<...>`, `dense<..> :
//! tensor<Nx2xi64>` padding); the parsers build exactly the text MLIR
//! prints for them in generic form, and the printers read that text back.

use super::common::{
    enum_attr, get_bool_array, get_enum, get_i64_array, i64_array, parse_functional_type,
    print_attr_dict_sorted,
};
use super::{OpFormat, ResultTypes};
use crate::ir::{AttrId, Attribute, OpId, Type};
use crate::parse::cursor::Cursor;
use crate::parse::{PResult, Parser};
use crate::print::Printer;
use smallvec::SmallVec;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[
    OpFormat {
        name: "stablehlo.dot",
        parse: parse_dot,
        print: print_dot,
    },
    OpFormat {
        name: "stablehlo.dot_general",
        parse: parse_dot_general,
        print: print_dot_general,
    },
    OpFormat {
        name: "stablehlo.convolution",
        parse: parse_convolution,
        print: print_convolution,
    },
];

// ----- shared pieces -----

/// `[1, 2]` (integers; `true`/`false` read as 1/0 like MLIR's
/// `parseInteger`).
fn cursor_int_list(c: &mut Cursor<'_>) -> PResult<Vec<i64>> {
    c.expect(b'[')?;
    let mut out = Vec::new();
    if c.eat(b']') {
        return Ok(out);
    }
    loop {
        if c.eat_kw("true") {
            out.push(1);
        } else if c.eat_kw("false") {
            out.push(0);
        } else {
            out.push(c.int()?);
        }
        if c.eat(b']') {
            return Ok(out);
        }
        c.expect(b',')?;
    }
}

fn push_int_list(out: &mut String, vals: &[i64]) {
    out.push('[');
    for (i, &v) in vals.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        crate::print::push_int(out, v);
    }
    out.push(']');
}

fn print_list(pr: &mut Printer<'_>, vals: &[i64]) {
    let mut s = String::new();
    push_int_list(&mut s, vals);
    pr.w(&s);
}

/// `precision = [DEFAULT, HIGH]` after the `precision` keyword.
fn parse_precision_list(p: &mut Parser<'_>) -> PResult<Attribute> {
    p.c.expect(b'=')?;
    p.c.expect(b'[')?;
    let mut elems = Vec::new();
    if !p.c.eat(b']') {
        loop {
            let v = p.c.expect_ident("precision value")?;
            let a = enum_attr("stablehlo", "precision", v);
            elems.push(p.m.add_attr(a));
            if p.c.eat(b']') {
                break;
            }
            p.c.expect(b',')?;
        }
    }
    Ok(Attribute::Array(elems))
}

/// The values of a `precision_config` array, if it holds only
/// `#stablehlo<precision X>` entries.
fn precision_values<'m>(pr: &Printer<'m>, a: AttrId) -> Option<Vec<&'m str>> {
    let m = pr.m;
    let Attribute::Array(elems) = m.attr(a) else {
        return None;
    };
    elems
        .iter()
        .map(|&e| get_enum(m, e, "stablehlo", "precision"))
        .collect()
}

fn print_precision(pr: &mut Printer<'_>, vals: &[&str]) {
    pr.w(", precision = [");
    for (i, v) in vals.iter().enumerate() {
        if i > 0 {
            pr.w(", ");
        }
        pr.w(v);
    }
    pr.w("]");
}

/// Set inherent attributes in name order (MLIR prints properties sorted).
fn set_props_sorted(p: &mut Parser<'_>, op: OpId, mut props: Vec<(&'static str, Attribute)>) {
    props.sort_by(|a, b| a.0.cmp(b.0));
    for (name, value) in props {
        p.set_prop(op, name, value);
    }
}

// ----- stablehlo.dot -----

fn parse_dot(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let lhs = p.parse_operand()?;
    p.c.expect(b',')?;
    let rhs = p.parse_operand()?;
    if p.c.eat(b',') {
        p.c.expect_kw("precision")?;
        let prec = parse_precision_list(p)?;
        p.set_prop(op, "precision_config", prec);
    }
    p.parse_optional_attr_dict(op, &["precision_config"])?;
    parse_functional_type(p, op, &[lhs, rhs], results)
}

fn print_dot(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.operands.len() != 2 || o.results.len() != 1 || !o.regions.is_empty() {
        return false;
    }
    let prec = match m.op_attr(op, "precision_config") {
        Some(a) => match precision_values(pr, a) {
            Some(v) => Some(v),
            None => return false,
        },
        None => None,
    };
    pr.w(" ");
    pr.operands(&o.operands);
    if let Some(v) = prec {
        print_precision(pr, &v);
    }
    print_attr_dict_sorted(pr, op, &["precision_config"], false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- stablehlo.dot_general -----

/// Field names of `#stablehlo.dot<...>`, in MLIR's print order.
const DOT_FIELDS: [&str; 4] = [
    "lhs_batching_dimensions",
    "rhs_batching_dimensions",
    "lhs_contracting_dimensions",
    "rhs_contracting_dimensions",
];

/// The generic text of `#stablehlo.dot<...>` (without `#`): empty fields
/// are left out.
pub(crate) fn dot_dims_text(fields: &[Vec<i64>; 4]) -> String {
    let mut s = String::from("stablehlo.dot<");
    let mut first = true;
    for (name, vals) in DOT_FIELDS.iter().zip(fields) {
        if vals.is_empty() {
            continue;
        }
        if !first {
            s.push_str(", ");
        }
        first = false;
        s.push_str(name);
        s.push_str(" = ");
        push_int_list(&mut s, vals);
    }
    s.push('>');
    s
}

/// Read `stablehlo.dot<...>` back into its four lists.
pub(crate) fn read_dot_dims(text: &str) -> Option<[Vec<i64>; 4]> {
    let body = text.strip_prefix("stablehlo.dot<")?.strip_suffix('>')?;
    let mut c = Cursor::new(body);
    let mut out: [Option<Vec<i64>>; 4] = Default::default();
    if !c.at_end() {
        loop {
            let key = c.ident()?;
            let idx = DOT_FIELDS.iter().position(|&n| n == key)?;
            if out[idx].is_some() || !c.eat(b'=') {
                return None;
            }
            out[idx] = Some(cursor_int_list(&mut c).ok()?);
            if c.at_end() {
                break;
            }
            if !c.eat(b',') {
                return None;
            }
        }
    }
    Some(out.map(Option::unwrap_or_default))
}

fn parse_lhs_rhs(p: &mut Parser<'_>) -> PResult<(Vec<i64>, Vec<i64>)> {
    p.c.expect(b'=')?;
    let lhs = cursor_int_list(&mut p.c)?;
    p.c.expect_kw("x")?;
    let rhs = cursor_int_list(&mut p.c)?;
    Ok((lhs, rhs))
}

fn parse_dot_general(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let lhs = p.parse_operand()?;
    p.c.expect(b',')?;
    let rhs = p.parse_operand()?;
    p.c.expect(b',')?;
    let mut fields: [Vec<i64>; 4] = Default::default();
    if p.c.eat_kw("batching_dims") {
        let (l, r) = parse_lhs_rhs(p)?;
        fields[0] = l;
        fields[1] = r;
        p.c.expect(b',')?;
    }
    p.c.expect_kw("contracting_dims")?;
    let (l, r) = parse_lhs_rhs(p)?;
    fields[2] = l;
    fields[3] = r;
    let mut props = vec![(
        "dot_dimension_numbers",
        Attribute::Opaque(dot_dims_text(&fields).into()),
    )];
    if p.c.eat(b',') {
        if !p.c.eat_kw("algorithm") {
            p.c.expect_kw("precision")?;
            props.push(("precision_config", parse_precision_list(p)?));
            if p.c.eat(b',') {
                p.c.expect_kw("algorithm")?;
                props.push(("algorithm", parse_algorithm(p)?));
            }
        } else {
            props.push(("algorithm", parse_algorithm(p)?));
        }
    }
    set_props_sorted(p, op, props);
    p.parse_optional_attr_dict(
        op,
        &["dot_dimension_numbers", "precision_config", "algorithm"],
    )?;
    parse_functional_type(p, op, &[lhs, rhs], results)
}

/// `= <...>` after `algorithm`: `#stablehlo.dot_algorithm<...>` stripped.
fn parse_algorithm(p: &mut Parser<'_>) -> PResult<Attribute> {
    p.c.expect(b'=')?;
    p.c.ws();
    if p.c.cur() != Some(b'<') {
        return p.c.expected("'<' starting a dot algorithm");
    }
    let open = p.c.pos;
    p.c.pos += 1;
    let body = p.c.balanced(open)?;
    Ok(Attribute::Opaque(
        format!("stablehlo.dot_algorithm<{body}>").into(),
    ))
}

fn print_dot_general(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.operands.len() != 2 || o.results.len() != 1 || !o.regions.is_empty() {
        return false;
    }
    let Some(dims) = m.op_attr(op, "dot_dimension_numbers") else {
        return false;
    };
    let Attribute::Opaque(text) = m.attr(dims) else {
        return false;
    };
    let Some(fields) = read_dot_dims(text) else {
        return false;
    };
    let prec = match m.op_attr(op, "precision_config") {
        Some(a) => match precision_values(pr, a) {
            Some(v) => Some(v),
            None => return false,
        },
        None => None,
    };
    let algo = match m.op_attr(op, "algorithm") {
        Some(a) => match m.attr(a) {
            Attribute::Opaque(t) => match t.strip_prefix("stablehlo.dot_algorithm") {
                Some(rest) if rest.starts_with('<') && rest.ends_with('>') => Some(rest),
                _ => return false,
            },
            _ => return false,
        },
        None => None,
    };
    pr.w(" ");
    pr.operands(&o.operands);
    pr.w(", ");
    if !fields[0].is_empty() || !fields[1].is_empty() {
        pr.w("batching_dims = ");
        print_list(pr, &fields[0]);
        pr.w(" x ");
        print_list(pr, &fields[1]);
        pr.w(", ");
    }
    pr.w("contracting_dims = ");
    print_list(pr, &fields[2]);
    pr.w(" x ");
    print_list(pr, &fields[3]);
    if let Some(v) = prec {
        print_precision(pr, &v);
    }
    if let Some(a) = algo {
        pr.w(", algorithm = ");
        pr.w(a);
    }
    print_attr_dict_sorted(
        pr,
        op,
        &["dot_dimension_numbers", "precision_config", "algorithm"],
        false,
    );
    pr.w(" : ");
    pr.functional_type(op);
    true
}

// ----- stablehlo.convolution -----

/// Attributes the convolution syntax spells out (the rest go to the
/// attribute dictionary).
const CONV_ELIDED: &[&str] = &[
    "dimension_numbers",
    "window_strides",
    "padding",
    "lhs_dilation",
    "rhs_dilation",
    "window_reversal",
];

/// One `[b, 0, 1, f]` group: exactly one of each letter in `letters`, the
/// numbers a permutation of `0..k`. Appends its canonical text to `out`.
fn conv_group(c: &mut Cursor<'_>, letters: [&str; 2], out: &mut String) -> PResult<()> {
    let start = c.pos;
    c.expect(b'[')?;
    let mut seen_letters = [false; 2];
    let mut spatial: Vec<i64> = Vec::new();
    out.push('[');
    let mut first = true;
    if !c.eat(b']') {
        loop {
            if !first {
                out.push_str(", ");
            }
            first = false;
            c.ws();
            if c.at_number() {
                let pos = c.pos;
                let v = c.int()?;
                if v < 0 || spatial.contains(&v) {
                    return c.err_at(pos, format!("unexpected spatial dimension {v}"));
                }
                spatial.push(v);
                crate::print::push_int(out, v);
            } else {
                let pos = c.pos;
                let Some(id) = c.ident() else {
                    return c.expected("dimension ('b', 'f', 'i', 'o' or a number)");
                };
                match letters.iter().position(|&l| l == id) {
                    Some(k) if !seen_letters[k] => seen_letters[k] = true,
                    _ => {
                        return c.err_at(
                            pos,
                            format!(
                                "unexpected dimension {id}, expecting {} or {}",
                                letters[0], letters[1]
                            ),
                        )
                    }
                }
                out.push_str(id);
            }
            if c.eat(b']') {
                break;
            }
            c.expect(b',')?;
        }
    }
    out.push(']');
    if !seen_letters.iter().all(|&s| s) {
        return c.err_at(
            start,
            format!("expected dimensions {} and {}", letters[0], letters[1]),
        );
    }
    let k = spatial.len() as i64;
    if spatial.iter().any(|&v| v >= k) {
        return c.err_at(start, "spatial dimensions must be 0, 1, ... without gaps");
    }
    Ok(())
}

/// `[b, 0, f]x[0, i, o]->[b, 0, f]` → its canonical text.
fn conv_dims(c: &mut Cursor<'_>) -> PResult<String> {
    let mut out = String::new();
    conv_group(c, ["b", "f"], &mut out)?;
    c.expect_kw("x")?;
    out.push('x');
    conv_group(c, ["i", "o"], &mut out)?;
    c.expect_str("->")?;
    out.push_str("->");
    conv_group(c, ["b", "f"], &mut out)?;
    Ok(out)
}

/// The dimension-numbers text inside `stablehlo.conv<...>`, if it is in
/// the positional form.
fn read_conv_dims(text: &str) -> Option<String> {
    let body = text.strip_prefix("stablehlo.conv<")?.strip_suffix('>')?;
    let mut c = Cursor::new(body);
    let dims = conv_dims(&mut c).ok()?;
    c.at_end().then_some(dims)
}

/// The `Nx2` values of a padding attribute.
fn read_padding(pr: &Printer<'_>, a: AttrId) -> Option<Vec<i64>> {
    let m = pr.m;
    let Attribute::Dense { body, ty } = m.attr(a) else {
        return None;
    };
    let Type::Tensor {
        dims,
        elem,
        encoding: None,
    } = m.ty(*ty)
    else {
        return None;
    };
    if !matches!(m.ty(*elem), Type::Integer { width: 64, .. }) {
        return None;
    }
    let &[n, 2] = dims.as_slice() else {
        return None;
    };
    let count = usize::try_from(n).ok()?.checked_mul(2)?;
    let mut vals = Vec::new();
    for tok in body.split(['[', ']', ',', ' ', '\n', '\t']) {
        if tok.is_empty() {
            continue;
        }
        vals.push(crate::parse::parse_int_text(tok)?);
    }
    let trimmed = body.trim();
    if vals.len() == 1 && count != 1 && !trimmed.starts_with('[') {
        vals = vec![vals[0]; count];
    }
    (vals.len() == count).then_some(vals)
}

/// `dense<..> : tensor<Nx2xi64>` as MLIR prints it (splat when all equal).
fn padding_attr(p: &mut Parser<'_>, vals: &[i64]) -> Attribute {
    let n = (vals.len() / 2) as i64;
    let mut body = String::new();
    if !vals.is_empty() && vals.iter().all(|&v| v == vals[0]) {
        crate::print::push_int(&mut body, vals[0]);
    } else if !vals.is_empty() {
        body.push('[');
        for (i, pair) in vals.chunks(2).enumerate() {
            if i > 0 {
                body.push_str(", ");
            }
            push_int_list(&mut body, pair);
        }
        body.push(']');
    }
    let i64t = p.m.int_type(64);
    let mut dims = SmallVec::new();
    dims.push(n);
    dims.push(2);
    let ty = p.m.intern_type(Type::Tensor {
        dims,
        elem: i64t,
        encoding: None,
    });
    Attribute::Dense {
        body: body.into(),
        ty,
    }
}

fn parse_convolution(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.c.expect(b'(')?;
    let refs = p.parse_operand_list_until(b')')?;
    p.c.expect_kw("dim_numbers")?;
    p.c.expect(b'=')?;
    let dims = conv_dims(&mut p.c)?;
    let mut props = vec![(
        "dimension_numbers",
        Attribute::Opaque(format!("stablehlo.conv<{dims}>").into()),
    )];
    p.c.expect(b',')?;
    p.c.expect_kw("window")?;
    p.c.expect(b'=')?;
    p.c.expect(b'{')?;
    let mut seen: Vec<&str> = Vec::new();
    while let Some(key) = p.c.peek_ident() {
        let pos = p.c.pos;
        let name = match key {
            "stride" => "window_strides",
            "pad" => "padding",
            "lhs_dilate" => "lhs_dilation",
            "rhs_dilate" => "rhs_dilation",
            "reverse" => "window_reversal",
            _ => return p.c.err_at(pos, format!("Unexpected keyword {key}")),
        };
        if seen.contains(&key) {
            return p.c.err_at(pos, format!("Unexpected keyword {key}"));
        }
        seen.push(key);
        p.c.pos += key.len();
        p.c.expect(b'=')?;
        let value = if key == "pad" {
            let mut vals = Vec::new();
            p.c.expect(b'[')?;
            if !p.c.eat(b']') {
                loop {
                    let pos = p.c.pos;
                    let pair = cursor_int_list(&mut p.c)?;
                    if pair.len() != 2 {
                        return p.c.err_at(
                            pos,
                            format!(
                                "Expected array with 2 elements, got {} elements instead",
                                pair.len()
                            ),
                        );
                    }
                    vals.extend(pair);
                    if p.c.eat(b']') {
                        break;
                    }
                    p.c.expect(b',')?;
                }
            }
            padding_attr(p, &vals)
        } else {
            let vals = cursor_int_list(&mut p.c)?;
            if key == "reverse" {
                super::common::bool_array(&mut p.m, vals.into_iter().map(|v| v != 0).collect())
            } else {
                i64_array(&mut p.m, vals)
            }
        };
        props.push((name, value));
        if !p.c.eat(b',') {
            break;
        }
    }
    p.c.expect(b'}')?;
    set_props_sorted(p, op, props);
    p.parse_optional_attr_dict(
        op,
        &[
            "batch_group_count",
            "dimension_numbers",
            "feature_group_count",
            "lhs_dilation",
            "padding",
            "precision_config",
            "rhs_dilation",
            "window_reversal",
            "window_strides",
        ],
    )?;
    parse_functional_type(p, op, &refs, results)
}

fn print_convolution(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.operands.len() != 2 || o.results.len() != 1 || !o.regions.is_empty() {
        return false;
    }
    let Some(dn) = m.op_attr(op, "dimension_numbers") else {
        return false;
    };
    let Attribute::Opaque(text) = m.attr(dn) else {
        return false;
    };
    let Some(dims) = read_conv_dims(text) else {
        return false;
    };
    // (keyword, values, is_bool) in print order.
    let mut window: Vec<(&str, Vec<i64>, bool)> = Vec::new();
    for (key, name) in [
        ("stride", "window_strides"),
        ("pad", "padding"),
        ("lhs_dilate", "lhs_dilation"),
        ("rhs_dilate", "rhs_dilation"),
        ("reverse", "window_reversal"),
    ] {
        let Some(a) = m.op_attr(op, name) else {
            continue;
        };
        let vals = match key {
            "pad" => read_padding(pr, a),
            "reverse" => get_bool_array(m, a).map(<[i64]>::to_vec),
            _ => get_i64_array(m, a).map(<[i64]>::to_vec),
        };
        let Some(vals) = vals else {
            return false;
        };
        window.push((key, vals, key == "reverse"));
    }
    pr.w("(");
    pr.operands(&o.operands);
    pr.w(") dim_numbers = ");
    pr.w(&dims);
    pr.w(", window = {");
    for (i, (key, vals, is_bool)) in window.iter().enumerate() {
        if i > 0 {
            pr.w(", ");
        }
        pr.w(key);
        pr.w(" = [");
        if *key == "pad" {
            for (j, pair) in vals.chunks(2).enumerate() {
                if j > 0 {
                    pr.w(", ");
                }
                print_list(pr, pair);
            }
        } else {
            for (j, &v) in vals.iter().enumerate() {
                if j > 0 {
                    pr.w(", ");
                }
                if *is_bool {
                    pr.w(if v != 0 { "true" } else { "false" });
                } else {
                    pr.int(v);
                }
            }
        }
        pr.w("]");
    }
    pr.w("}");
    print_attr_dict_sorted(pr, op, CONV_ELIDED, false);
    pr.w(" : ");
    pr.functional_type(op);
    true
}
