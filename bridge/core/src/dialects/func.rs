//! `func` dialect: `func.func`, `func.return`, `func.call`.

use super::builtin::print_symbol_text;
use super::common::parse_functional_type;
use super::{OpFormat, ResultTypes};
use crate::ir::{AttrId, Attribute, NamedAttr, OpId, Type, TypeId};
use crate::parse::{ArgDef, PResult, Parser};
use crate::print::Printer;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[
    OpFormat {
        name: "func.func",
        parse: parse_func,
        print: print_func,
    },
    OpFormat {
        name: "func.return",
        parse: parse_return,
        print: print_return,
    },
    OpFormat {
        name: "func.call",
        parse: parse_call,
        print: print_call,
    },
];

const FUNC_INHERENT: &[&str] = &[
    "sym_name",
    "function_type",
    "sym_visibility",
    "arg_attrs",
    "res_attrs",
    "no_inline",
];

fn string_attr(s: &str) -> Attribute {
    Attribute::String {
        escaped: s.into(),
        ty: None,
    }
}

fn parse_func(p: &mut Parser<'_>, op: OpId, _results: &mut ResultTypes) -> PResult<()> {
    super::builtin::parse_optional_visibility(p, op);
    let name = p.parse_symbol_name()?;
    let text = p.m.str(name).trim_matches('"').to_string();
    p.set_prop(op, "sym_name", string_attr(&text));

    // Arguments: named (definition) or types only (declaration).
    p.c.expect(b'(')?;
    let mut args: Vec<ArgDef<'_>> = Vec::new();
    let mut arg_types: Vec<TypeId> = Vec::new();
    let mut arg_attrs: Vec<Vec<NamedAttr>> = Vec::new();
    let mut named = None;
    if !p.c.eat(b')') {
        loop {
            let is_named = p.at_operand();
            if *named.get_or_insert(is_named) != is_named {
                return p.c.expected("all arguments named or all unnamed");
            }
            if is_named {
                p.c.ws();
                let pos = p.c.pos;
                let r = p.parse_operand()?;
                p.c.expect(b':')?;
                let ty = p.parse_type()?;
                let attrs = parse_optional_dict(p)?;
                let loc = p.parse_optional_loc()?;
                args.push(ArgDef {
                    name: r.name,
                    ty,
                    loc,
                    pos,
                });
                arg_types.push(ty);
                arg_attrs.push(attrs);
            } else {
                let ty = p.parse_type()?;
                arg_types.push(ty);
                arg_attrs.push(parse_optional_dict(p)?);
                let _ = p.parse_optional_loc()?;
            }
            if p.c.eat(b')') {
                break;
            }
            p.c.expect(b',')?;
        }
    }

    // Results.
    let mut res_types = Vec::new();
    let mut res_attrs: Vec<Vec<NamedAttr>> = Vec::new();
    if p.c.eat_arrow() {
        if p.c.eat(b'(') {
            if !p.c.eat(b')') {
                loop {
                    res_types.push(p.parse_type()?);
                    res_attrs.push(parse_optional_dict(p)?);
                    if p.c.eat(b')') {
                        break;
                    }
                    p.c.expect(b',')?;
                }
            }
        } else {
            res_types.push(p.parse_type()?);
            res_attrs.push(Vec::new());
        }
    }
    let fty = p.m.intern_type(Type::Function {
        inputs: arg_types,
        results: res_types,
    });
    p.set_prop(op, "function_type", Attribute::Type(fty));
    set_attr_list(p, op, "arg_attrs", arg_attrs);
    set_attr_list(p, op, "res_attrs", res_attrs);
    p.parse_optional_attr_dict_with_keyword(op, FUNC_INHERENT)?;
    if p.c.peek() == Some(b'{') {
        if named == Some(false) {
            return p.c.err("function body requires named arguments");
        }
        p.parse_region(op, Some(&args))?;
    } else {
        // A declaration: one empty region, as MLIR has.
        p.m.add_region(op);
    }
    Ok(())
}

fn parse_optional_dict(p: &mut Parser<'_>) -> PResult<Vec<NamedAttr>> {
    if p.c.peek() == Some(b'{') {
        p.parse_attr_dict_body()
    } else {
        Ok(Vec::new())
    }
}

fn set_attr_list(p: &mut Parser<'_>, op: OpId, name: &str, lists: Vec<Vec<NamedAttr>>) {
    if lists.iter().all(|l| l.is_empty()) {
        return;
    }
    let dicts: Vec<AttrId> = lists
        .into_iter()
        .map(|l| p.m.add_attr(Attribute::Dict(l)))
        .collect();
    p.set_prop(op, name, Attribute::Array(dicts));
}

fn dict_entries(pr: &Printer<'_>, list: Option<AttrId>, i: usize) -> Option<Vec<NamedAttr>> {
    let m = pr.m;
    let Some(list) = list else {
        return Some(Vec::new());
    };
    let Attribute::Array(elems) = m.attr(list) else {
        return None;
    };
    match elems.get(i).map(|&e| m.attr(e)) {
        Some(Attribute::Dict(d)) => Some(d.clone()),
        None => Some(Vec::new()),
        Some(_) => None,
    }
}

fn print_func(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    let (Some(name), Some(fty)) = (m.op_attr(op, "sym_name"), m.op_attr(op, "function_type"))
    else {
        return false;
    };
    let (Attribute::String { escaped: name, .. }, Attribute::Type(fty)) =
        (m.attr(name), m.attr(fty))
    else {
        return false;
    };
    let Type::Function { inputs, results } = m.ty(*fty) else {
        return false;
    };
    if o.regions.len() != 1 || !o.results.is_empty() || !o.operands.is_empty() {
        return false;
    }
    let arg_attrs = m.op_attr(op, "arg_attrs");
    let res_attrs = m.op_attr(op, "res_attrs");
    let region = o.regions[0];
    let entry = m.region(region).blocks.first().copied();
    let is_decl = entry.is_none();
    if let Some(b) = entry {
        let args = &m.block(b).args;
        if args.len() != inputs.len()
            || args.iter().zip(inputs).any(|(&a, &t)| m.value_type(a) != t)
        {
            return false;
        }
    }
    if !super::builtin::print_visibility(pr, op) {
        return false;
    }
    pr.w(" @");
    print_symbol_text(pr, name);
    pr.w("(");
    for (i, &t) in inputs.iter().enumerate() {
        if i > 0 {
            pr.w(", ");
        }
        let Some(attrs) = dict_entries(pr, arg_attrs, i) else {
            return false;
        };
        match entry {
            Some(b) => {
                let a = m.block(b).args[i];
                pr.w("%");
                pr.value_name(a, true);
                pr.w(": ");
                pr.ty(t);
                if !attrs.is_empty() {
                    pr.w(" ");
                    pr.dict(&attrs);
                }
                pr.trailing_loc(m.value(a).loc);
            }
            None => {
                pr.ty(t);
                if !attrs.is_empty() {
                    pr.w(" ");
                    pr.dict(&attrs);
                }
            }
        }
    }
    pr.w(")");
    if !results.is_empty() {
        pr.w(" -> ");
        let mut any_attrs = false;
        let mut res_dicts = Vec::with_capacity(results.len());
        for i in 0..results.len() {
            let Some(d) = dict_entries(pr, res_attrs, i) else {
                return false;
            };
            any_attrs |= !d.is_empty();
            res_dicts.push(d);
        }
        let paren =
            results.len() > 1 || any_attrs || matches!(m.ty(results[0]), Type::Function { .. });
        if paren {
            pr.w("(");
        }
        for (i, &t) in results.iter().enumerate() {
            if i > 0 {
                pr.w(", ");
            }
            pr.ty(t);
            if !res_dicts[i].is_empty() {
                pr.w(" ");
                pr.dict(&res_dicts[i]);
            }
        }
        if paren {
            pr.w(")");
        }
    }
    pr.attr_dict_with_keyword(op, FUNC_INHERENT);
    if !is_decl {
        pr.w(" ");
        pr.region(region, false);
    }
    true
}

fn parse_return(p: &mut Parser<'_>, op: OpId, _results: &mut ResultTypes) -> PResult<()> {
    p.parse_optional_attr_dict(op, &[])?;
    let refs = p.parse_operand_list()?;
    if !refs.is_empty() {
        p.c.expect(b':')?;
        let types = p.parse_type_list()?;
        let vals = p.resolve_operands(&refs, &types)?;
        p.push_operands(op, &vals);
    }
    Ok(())
}

/// Print `attr-dict ($operands : types)?`, the shape of every `return`.
pub(crate) fn print_return(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let o = m.op(op);
    if !o.results.is_empty() || !o.regions.is_empty() {
        return false;
    }
    pr.attr_dict(op, &[]);
    if !o.operands.is_empty() {
        pr.w(" ");
        pr.operands(&o.operands);
        pr.w(" : ");
        let tys: Vec<TypeId> = o.operands.iter().map(|&v| m.value_type(v)).collect();
        pr.types(&tys);
    }
    true
}

fn parse_call(p: &mut Parser<'_>, op: OpId, results: &mut ResultTypes) -> PResult<()> {
    let callee = p.parse_symbol_ref()?;
    p.set_prop(op, "callee", Attribute::SymbolRef(callee));
    p.c.expect(b'(')?;
    let refs = p.parse_operand_list_until(b')')?;
    p.parse_optional_attr_dict(op, &["callee", "arg_attrs", "res_attrs", "no_inline"])?;
    parse_functional_type(p, op, &refs, results)
}

fn print_call(pr: &mut Printer<'_>, op: OpId) -> bool {
    let m = pr.m;
    let Some(callee) = m.op_attr(op, "callee") else {
        return false;
    };
    if !matches!(m.attr(callee), Attribute::SymbolRef(_)) {
        return false;
    }
    pr.w(" ");
    pr.attr(callee);
    pr.w("(");
    pr.operands(&m.op(op).operands);
    pr.w(")");
    pr.attr_dict(op, &["callee"]);
    pr.w(" : ");
    pr.functional_type(op);
    true
}
