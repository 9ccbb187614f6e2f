//! StableHLO elementwise ops and their neighbours: unary and binary ops
//! (`%r = stablehlo.add %a, %b : T`), `select`, `clamp`, `compare`,
//! `constant` and `stablehlo.return`.

use super::common::{
    enum_attr, get_enum, parse_same_operands_and_result_type, print_same_operands_and_result_type,
};
use super::{OpFormat, ResultTypes};
use crate::ir::{Attribute, OpId, TypeId};
use crate::parse::{PResult, Parser};
use crate::print::Printer;

macro_rules! same_type_ops {
    ($($name:literal),* $(,)?) => {
        &[$(OpFormat { name: $name, parse: parse_same_type, print: print_same_type },)*]
    };
}

/// Ops in the `SameOperandsAndResultType` shape.
pub(crate) const SAME_TYPE: &[OpFormat] = same_type_ops![
    // unary
    "stablehlo.abs",
    "stablehlo.cbrt",
    "stablehlo.ceil",
    "stablehlo.convert",
    "stablehlo.count_leading_zeros",
    "stablehlo.cosine",
    "stablehlo.exponential",
    "stablehlo.exponential_minus_one",
    "stablehlo.floor",
    "stablehlo.imag",
    "stablehlo.is_finite",
    "stablehlo.log",
    "stablehlo.log_plus_one",
    "stablehlo.logistic",
    "stablehlo.negate",
    "stablehlo.not",
    "stablehlo.popcnt",
    "stablehlo.real",
    "stablehlo.round_nearest_afz",
    "stablehlo.round_nearest_even",
    "stablehlo.rsqrt",
    "stablehlo.sign",
    "stablehlo.sine",
    "stablehlo.sqrt",
    "stablehlo.tan",
    "stablehlo.tanh",
    // binary
    "stablehlo.add",
    "stablehlo.and",
    "stablehlo.atan2",
    "stablehlo.divide",
    "stablehlo.maximum",
    "stablehlo.minimum",
    "stablehlo.multiply",
    "stablehlo.or",
    "stablehlo.power",
    "stablehlo.remainder",
    "stablehlo.shift_left",
    "stablehlo.shift_right_arithmetic",
    "stablehlo.shift_right_logical",
    "stablehlo.subtract",
    "stablehlo.xor",
    // ternary
    "stablehlo.clamp",
];

/// The other formats of this file.
pub(crate) const OTHERS: &[OpFormat] = &[
    OpFormat {
        name: "stablehlo.select",
        parse: parse_select,
        print: print_select,
    },
    OpFormat {
        name: "stablehlo.compare",
        parse: parse_compare,
        print: print_compare,
    },
    OpFormat {
        name: "stablehlo.complex",
        parse: parse_complex,
        print: print_complex,
    },
    OpFormat {
        name: "stablehlo.constant",
        parse: parse_constant,
        print: print_constant,
    },
    OpFormat {
        name: "stablehlo.return",
        parse: parse_stablehlo_return,
        print: print_stablehlo_return,
    },
];

fn parse_same_type(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, &["result_accuracy"])?;
    parse_same_operands_and_result_type(p, op, &refs, results)
}

fn print_same_type(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.results.len() != 1 || o.operands.is_empty() || !o.regions.is_empty() {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.attr_dict(op, &[]);
    print_same_operands_and_result_type(pr, op);
    true
}

fn parse_select(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, &[])?;
    p.c.expect(b':')?;
    p.c.ws();
    if p.c.cur() == Some(b'(') {
        return super::common::resolve_function_type(p, op, &refs, results);
    }
    let types = p.parse_type_list()?;
    if types.len() != 2 {
        return p
            .c
            .err("expected 'pred_type, result_type' or a function type for stablehlo.select");
    }
    let all = [types[0], types[1], types[1]];
    let vals = p.resolve_operands(&refs, &all)?;
    p.push_operands(op, &vals);
    results.push(types[1]);
    Ok(())
}

fn print_select(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.operands.len() != 3 || o.results.len() != 1 {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.attr_dict(op, &[]);
    let t: Vec<TypeId> = o.operands.iter().map(|&v| m.value_type(v)).collect();
    let r = m.value_type(o.results[0]);
    pr.w(" : ");
    if t[1] == r && t[2] == r {
        pr.ty(t[0]);
        pr.w(", ");
        pr.ty(r);
    } else {
        pr.functional_type(op);
    }
    true
}

/// `stablehlo.complex %re, %im : tensor<..xcomplex<T>>` where the operands
/// are `tensor<..xT>`; otherwise a functional type.
fn parse_complex(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, &[])?;
    p.c.expect(b':')?;
    p.c.ws();
    if p.c.cur() == Some(b'(') {
        return super::common::resolve_function_type(p, op, &refs, results);
    }
    let start = p.c.pos;
    let result = p.parse_type()?;
    let Some(part) = complex_part_type(&mut p.m, result) else {
        return p.c.err_at(
            start,
            "stablehlo.complex expects a tensor of complex element type",
        );
    };
    let vals = p.resolve_operands(&refs, &[part, part])?;
    p.push_operands(op, &vals);
    results.push(result);
    Ok(())
}

/// `tensor<..xT>` for `tensor<..xcomplex<T>>`.
fn complex_part_type(m: &mut crate::ir::Module, t: TypeId) -> Option<TypeId> {
    let crate::ir::Type::Tensor {
        dims,
        elem,
        encoding,
    } = m.ty(t).clone()
    else {
        return None;
    };
    let crate::ir::Type::Complex(part) = *m.ty(elem) else {
        return None;
    };
    Some(m.intern_type(crate::ir::Type::Tensor {
        dims,
        elem: part,
        encoding,
    }))
}

fn print_complex(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if o.operands.len() != 2 || o.results.len() != 1 {
        return false;
    }
    pr.w(" ");
    pr.operands(&o.operands);
    pr.attr_dict(op, &[]);
    let (a, b) = (m.value_type(o.operands[0]), m.value_type(o.operands[1]));
    let r = m.value_type(o.results[0]);
    // Interning lookups need `&mut`, so compare structurally instead.
    let short = a == b && is_complex_of(m, r, a);
    pr.w(" : ");
    if short {
        pr.ty(r);
    } else {
        pr.functional_type(op);
    }
    true
}

/// True if `r` is `tensor<Sxcomplex<E>>` and `part` is `tensor<SxE>` (same encoding).
fn is_complex_of(m: &crate::ir::Module, r: TypeId, part: TypeId) -> bool {
    use crate::ir::Type;
    match (m.ty(r), m.ty(part)) {
        (
            Type::Tensor {
                dims: d1,
                elem: e1,
                encoding: n1,
            },
            Type::Tensor {
                dims: d2,
                elem: e2,
                encoding: n2,
            },
        ) => d1 == d2 && n1 == n2 && matches!(m.ty(*e1), Type::Complex(x) if x == e2),
        _ => false,
    }
}

fn parse_compare(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let dir = p.c.expect_ident("comparison direction")?;
    p.set_prop(
        op,
        "comparison_direction",
        enum_attr("stablehlo", "comparison_direction", dir),
    );
    p.c.expect(b',')?;
    let lhs = p.parse_operand()?;
    p.c.expect(b',')?;
    let rhs = p.parse_operand()?;
    if p.c.eat(b',') {
        let ct = p.c.expect_ident("comparison type")?;
        p.set_prop(
            op,
            "compare_type",
            enum_attr("stablehlo", "comparison_type", ct),
        );
    }
    p.parse_optional_attr_dict(op, &["comparison_direction", "compare_type"])?;
    super::common::parse_functional_type(p, op, &[lhs, rhs], results)
}

fn print_compare(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let Some(dir) = m
        .op_attr(op, "comparison_direction")
        .and_then(|a| get_enum(m, a, "stablehlo", "comparison_direction"))
    else {
        return false;
    };
    if o.operands.len() != 2 || o.results.len() != 1 {
        return false;
    }
    let ct = match m.op_attr(op, "compare_type") {
        Some(a) => match get_enum(m, a, "stablehlo", "comparison_type") {
            Some(v) => Some(v),
            None => return false,
        },
        None => None,
    };
    // jaxlib 0.10.2's MLIR prints single spaces (older releases printed two).
    pr.w(" ");
    pr.w(dir);
    pr.w(", ");
    pr.operands(&o.operands);
    if let Some(ct) = ct {
        pr.w(", ");
        pr.w(ct);
    }
    pr.attr_dict(op, &["comparison_direction", "compare_type"]);
    pr.w(" : ");
    pr.functional_type(op);
    true
}

fn parse_constant(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.parse_optional_attr_dict(op, &["value"])?;
    let start = p.c.pos;
    let value = p.parse_attribute()?;
    let ty = match p.m.attr(value) {
        Attribute::Dense { ty, .. } | Attribute::DenseResource { ty, .. } => *ty,
        _ => {
            return p.c.err_at(
                start,
                "stablehlo.constant expects a dense elements attribute with a type",
            );
        }
    };
    p.set_prop_id(op, "value", value);
    results.push(ty);
    Ok(())
}

fn print_constant(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let Some(v) = m.op_attr(op, "value") else {
        return false;
    };
    let ty = match m.attr(v) {
        Attribute::Dense { ty, .. } | Attribute::DenseResource { ty, .. } => *ty,
        _ => return false,
    };
    if o.results.len() != 1 || !o.operands.is_empty() || m.value_type(o.results[0]) != ty {
        return false;
    }
    pr.attr_dict(op, &["value"]);
    pr.w(" ");
    pr.attr(v);
    true
}

fn parse_stablehlo_return(p: &mut Parser<'_>, op: OpId, _r: &mut ResultTypes) -> PResult<()> {
    p.parse_optional_attr_dict(op, &[])?;
    let refs = p.parse_operand_list()?;
    p.parse_optional_attr_dict(op, &[])?;
    if !refs.is_empty() {
        p.c.expect(b':')?;
        let types = p.parse_type_list()?;
        let vals = p.resolve_operands(&refs, &types)?;
        p.push_operands(op, &vals);
    }
    Ok(())
}

fn print_stablehlo_return(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if !o.results.is_empty() || !o.regions.is_empty() {
        return false;
    }
    if !o.operands.is_empty() {
        pr.w(" ");
        pr.operands(&o.operands);
    }
    pr.attr_dict(op, &[]);
    if !o.operands.is_empty() {
        pr.w(" : ");
        let tys: Vec<TypeId> = o.operands.iter().map(|&v| m.value_type(v)).collect();
        pr.types(&tys);
    }
    true
}
