//! StableHLO ops with regions and a custom syntax: `stablehlo.reduce` in
//! its compact (`applies stablehlo.add`) and region (`reducer(...) {..}`)
//! forms, and `stablehlo.while` (`(%iterArg = %x) : T cond {..} do {..}`).
//!
//! The other region ops (`if`, `case`, `map`, `sort`, `reduce_window`,
//! `select_and_scatter`, `all_reduce`, `reduce_scatter`, ...) have no
//! custom assembly format in StableHLO and always print generically.

use super::common::{
    get_i64_array, i64_array, parse_int_list, print_attr_dict_sorted, print_int_list,
};
use super::{OpFormat, ResultTypes};
use crate::ir::{Module, OpId, Type, TypeId, ValueId};
use crate::parse::{ArgDef, PResult, Parser};
use crate::print::Printer;
use smallvec::SmallVec;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[
    OpFormat {
        name: "stablehlo.reduce",
        parse: parse_reduce,
        print: print_reduce,
    },
    OpFormat {
        name: "stablehlo.while",
        parse: parse_while,
        print: print_while,
    },
];

/// StableHLO's commutative binary ops without regions: the inner ops that
/// the compact `stablehlo.reduce ... applies OP` form accepts.
const COMMUTATIVE_BINARY: &[&str] = &[
    "stablehlo.add",
    "stablehlo.and",
    "stablehlo.maximum",
    "stablehlo.minimum",
    "stablehlo.multiply",
    "stablehlo.or",
    "stablehlo.xor",
];

// ----- stablehlo.reduce -----

fn parse_reduce(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    // `(%in init: %init), ...`: inputs first, then inits.
    let mut inputs = Vec::new();
    let mut inits = Vec::new();
    while p.c.eat(b'(') {
        inputs.push(p.parse_operand()?);
        p.c.expect_kw("init")?;
        p.c.expect(b':')?;
        inits.push(p.parse_operand()?);
        p.c.expect(b')')?;
        if !p.c.eat(b',') {
            break;
        }
    }
    inputs.extend(inits);
    let refs = inputs;

    let compact = if p.c.eat_kw("applies") {
        let pos = p.c.pos;
        let Some(name) = p.c.ident() else {
            return p.c.expected("inner operation name after 'applies'");
        };
        if !COMMUTATIVE_BINARY.contains(&name) {
            return p.c.err_at(
                pos,
                format!(
                    "expected the inner-op to be a commutative binary-op from the stablehlo dialect, with zero region, producing single result (got '{name}')"
                ),
            );
        }
        Some(name)
    } else {
        None
    };

    p.c.expect_kw("across")?;
    p.c.expect_kw("dimensions")?;
    p.c.expect(b'=')?;
    let dims = parse_int_list(p)?;
    let dims = i64_array(&mut p.m, dims);
    p.set_prop(op, "dimensions", dims);
    p.parse_optional_attr_dict(op, &["dimensions"])?;
    p.c.expect(b':')?;
    p.c.ws();
    let fpos = p.c.pos;
    let (in_types, out_types) = p.parse_function_type_parts()?;
    let vals = p.resolve_operands(&refs, &in_types)?;
    p.push_operands(op, &vals);
    results.extend(out_types);

    match compact {
        Some(name) => {
            let Some(&first) = in_types.first() else {
                return p
                    .c
                    .err_at(fpos, "input types missing in reduce-op function type");
            };
            let elem = match p.m.ty(first) {
                Type::Tensor { elem, .. } | Type::UnrankedTensor(elem) => *elem,
                _ => {
                    return p
                        .c
                        .err_at(fpos, "expected a tensor type for the first input")
                }
            };
            // MLIR gives the op, the synthesized body and its arguments the
            // location written after the compact form.
            let loc = p.parse_optional_loc()?;
            p.m.op_mut(op).loc = loc;
            let scalar = p.m.intern_type(Type::Tensor {
                dims: SmallVec::new(),
                elem,
                encoding: None,
            });
            build_compact_body(p, op, name, scalar, loc);
        }
        None => {
            p.c.expect_kw("reducer")?;
            let mut firsts: Vec<ArgDef<'_>> = Vec::new();
            let mut seconds: Vec<ArgDef<'_>> = Vec::new();
            while p.c.eat(b'(') {
                firsts.push(p.parse_arg_def()?);
                p.c.expect(b',')?;
                seconds.push(p.parse_arg_def()?);
                p.c.expect(b')')?;
            }
            firsts.extend(seconds);
            p.parse_region(op, Some(&firsts))?;
        }
    }
    Ok(())
}

/// The body of a compact reduce: `^bb0(%a, %b): %r = OP %a, %b; return %r`.
fn build_compact_body(
    p: &mut Parser<'_>,
    op: OpId,
    inner_name: &str,
    scalar: TypeId,
    loc: Option<crate::ir::LocId>,
) {
    let m = &mut p.m;
    let region = m.add_region(op);
    let block = m.add_block();
    m.push_block(region, block);
    let lhs = m.add_block_arg(block, scalar, None);
    let rhs = m.add_block_arg(block, scalar, None);
    m.values[lhs.index()].loc = loc;
    m.values[rhs.index()].loc = loc;
    let name = m.sym(inner_name);
    let inner = m.add_op(name);
    m.op_mut(inner).operands.extend([lhs, rhs]);
    m.op_mut(inner).loc = loc;
    let res = m.add_result(inner, scalar, None);
    m.push_op(block, inner);
    let ret_name = m.sym("stablehlo.return");
    let ret = m.add_op(ret_name);
    m.op_mut(ret).operands.push(res);
    m.op_mut(ret).loc = loc;
    m.push_op(block, ret);
}

/// The inner op name if reduce `op` can print as `applies OP` without
/// losing anything: MLIR's eligibility rule (one commutative binary
/// stablehlo op on the block arguments, whose result is returned, typed as
/// the first input's element type) plus: no attributes on the inner op and
/// a `stablehlo.return` terminator (which is what the compact form
/// rebuilds). So also what the reduction combines its elements with (the
/// CPU lowering's `reduce_stages` reads it).
pub(crate) fn reduce_combiner(m: &Module, op: OpId) -> Option<&'static str> {
    let o = m.op(op);
    let &[region] = o.regions.as_slice() else {
        return None;
    };
    let &[block] = m.region(region).blocks.as_slice() else {
        return None;
    };
    let b = m.block(block);
    let &[inner, ret] = b.ops.as_slice() else {
        return None;
    };
    let io = m.op(inner);
    let name = COMMUTATIVE_BINARY
        .iter()
        .copied()
        .find(|&n| n == m.str(io.name))?;
    if io.operands.len() != 2
        || io.results.len() != 1
        || !io.regions.is_empty()
        || !io.successors.is_empty()
        || !io.props.is_empty()
        || !io.attrs.is_empty()
    {
        return None;
    }
    let t = m.value_type(io.results[0]);
    if io.operands.iter().any(|&v| m.value_type(v) != t) {
        return None;
    }
    let first = *o.operands.first()?;
    let elem = match m.ty(m.value_type(first)) {
        Type::Tensor { elem, .. } | Type::UnrankedTensor(elem) => *elem,
        _ => return None,
    };
    match m.ty(t) {
        Type::Tensor {
            dims,
            elem: e,
            encoding: None,
        } if dims.is_empty() && *e == elem => {}
        _ => return None,
    }
    if b.args.as_slice() != io.operands.as_slice() {
        return None;
    }
    let ro = m.op(ret);
    if m.str(ro.name) != "stablehlo.return"
        || ro.operands.as_slice() != io.results.as_slice()
        || !ro.results.is_empty()
        || !ro.regions.is_empty()
        || !ro.successors.is_empty()
        || !ro.props.is_empty()
        || !ro.attrs.is_empty()
    {
        return None;
    }
    Some(name)
}

fn print_reduce(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let Some(dims) = m
        .op_attr(op, "dimensions")
        .and_then(|a| get_i64_array(m, a))
    else {
        return false;
    };
    let n = o.operands.len() / 2;
    if 2 * n != o.operands.len() || o.regions.len() != 1 || !o.successors.is_empty() {
        return false;
    }
    let compact = reduce_combiner(pr.m, op);
    if compact.is_none() {
        // The region form prints the entry block's arguments pairwise.
        let Some(&entry) = m.region(o.regions[0]).blocks.first() else {
            return false;
        };
        if m.block(entry).args.len() != 2 * n {
            return false;
        }
    }
    let operands: SmallVec<[ValueId; 4]> = o.operands.clone().into_iter().collect();
    for i in 0..n {
        pr.w(if i == 0 { "(" } else { ", (" });
        pr.operand(operands[i]);
        pr.w(" init: ");
        pr.operand(operands[i + n]);
        pr.w(")");
    }
    if let Some(name) = compact {
        pr.w(" applies ");
        pr.w(name);
    }
    pr.w(" across dimensions = ");
    print_int_list(pr, dims);
    print_attr_dict_sorted(pr, op, &["dimensions"], false);
    pr.w(" : ");
    pr.functional_type(op);
    if compact.is_none() {
        let region = o.regions[0];
        let Some(&entry) = m.region(region).blocks.first() else {
            return false;
        };
        let args = &m.block(entry).args;
        pr.newline();
        pr.w(" reducer");
        for i in 0..n {
            pr.w("(");
            pr.arg_def(args[i], true);
            pr.w(", ");
            pr.arg_def(args[i + n], true);
            pr.w(") ");
        }
        pr.w(" ");
        pr.region(region, false);
    }
    true
}

// ----- stablehlo.while -----

fn parse_while(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    p.c.expect(b'(')?;
    let mut iter_args = Vec::new();
    let mut operands = Vec::new();
    if !p.c.eat(b')') {
        loop {
            let arg = p.parse_operand()?;
            if arg.num != 0 {
                return p.c.err_at(
                    arg.pos,
                    "a while iteration argument cannot have a result number",
                );
            }
            p.c.expect(b'=')?;
            operands.push(p.parse_operand()?);
            iter_args.push(arg);
            if p.c.eat(b')') {
                break;
            }
            p.c.expect(b',')?;
        }
    }
    let types = if operands.is_empty() {
        Default::default()
    } else {
        p.c.expect(b':')?;
        p.parse_type_list()?
    };
    let vals = p.resolve_operands(&operands, &types)?;
    p.push_operands(op, &vals);
    results.extend(types.iter().copied());
    let args: Vec<ArgDef<'_>> = iter_args
        .iter()
        .zip(&types)
        .map(|(r, &ty)| ArgDef {
            name: r.name,
            ty,
            loc: None,
            pos: r.pos,
        })
        .collect();
    p.parse_optional_attr_dict_with_keyword(op, &[])?;
    p.c.expect_kw("cond")?;
    p.parse_region(op, Some(&args))?;
    p.c.expect_kw("do")?;
    p.parse_region(op, Some(&args))?;
    Ok(())
}

/// True for the `argN` names MLIR's generic form gives block arguments.
fn is_default_arg_name(s: &str) -> bool {
    s.strip_prefix("arg")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

fn print_while(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let &[cond, body] = o.regions.as_slice() else {
        return false;
    };
    let (Some(&cond_entry), Some(&body_entry)) =
        (m.region(cond).blocks.first(), m.region(body).blocks.first())
    else {
        return false;
    };
    let n = o.operands.len();
    let cond_args = &m.block(cond_entry).args;
    let body_args = &m.block(body_entry).args;
    if o.results.len() != n || cond_args.len() != n || body_args.len() != n {
        return false;
    }
    // Operands, results and both sets of arguments share one type list.
    for i in 0..n {
        let t = m.value_type(o.operands[i]);
        if m.value_type(o.results[i]) != t
            || m.value_type(cond_args[i]) != t
            || m.value_type(body_args[i]) != t
        {
            return false;
        }
    }
    if !o.successors.is_empty() {
        return false;
    }
    // Both regions print one name per iteration argument: the source name
    // of the `cond` argument (which a generic print shows first), else of
    // the `do` argument, else MLIR's `%iterArg`, `%iterArg_0`, ...
    for i in 0..n {
        let hint = |v: ValueId| {
            m.value(v)
                .name
                .map(|s| m.str(s))
                .filter(|s| !is_default_arg_name(s))
        };
        let base = hint(cond_args[i])
            .or_else(|| hint(body_args[i]))
            .unwrap_or("iterArg");
        pr.name_value_as(body_args[i], base);
        pr.share_value_name(cond_args[i], body_args[i]);
    }
    pr.w("(");
    for (i, (&arg, &init)) in body_args.iter().zip(&o.operands).enumerate() {
        if i > 0 {
            pr.w(", ");
        }
        pr.w("%");
        pr.value_name(arg, true);
        pr.w(" = ");
        pr.operand(init);
    }
    pr.w(")");
    if n > 0 {
        pr.w(" : ");
        let tys: SmallVec<[TypeId; 4]> = o.operands.iter().map(|&v| m.value_type(v)).collect();
        pr.types(&tys);
    }
    print_attr_dict_sorted(pr, op, &[], true);
    pr.newline();
    pr.w("cond ");
    pr.region(cond, false);
    pr.w(" do ");
    pr.region(body, false);
    true
}
