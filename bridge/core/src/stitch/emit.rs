//! Building the fused module: module attributes, merged meshes, the
//! segments' functions under their prefixes, inlined entry bodies, seam
//! converts and `@main`'s signature.

use super::{Program, Segment};
use crate::error::{Error, Result};
use crate::ir::{
    AttrId, Attribute, Cloner, Module, NamedAttr, OpId, TopItem, Type, TypeId, ValueId,
};
use rustc_hash::FxHashMap;

/// Create `module @hlobridge_stitched` with merged module attributes.
pub(super) fn new_module_op(dst: &mut Module, p: &Program) -> Result<OpId> {
    let op = dst.add_op_named("builtin.module");
    let name = dst.add_attr(Attribute::String {
        escaped: "hlobridge_stitched".into(),
        ty: None,
    });
    let sym_name = dst.sym("sym_name");
    dst.op_mut(op).props.push(NamedAttr {
        name: sym_name,
        value: name,
    });
    let r = dst.add_region(op);
    let b = dst.add_block();
    dst.push_block(r, b);
    dst.top.push(TopItem::Op(op));
    let mut seen: FxHashMap<String, (String, String)> = FxHashMap::default();
    for seg in &p.segments {
        let m = &seg.module;
        for top in m.top_ops() {
            if m.op_name(top) != "builtin.module" {
                continue;
            }
            for a in &m.op(top).attrs {
                let key = m.str(a.name).to_string();
                let text = attr_text(m, a.value);
                match seen.get(&key) {
                    Some((prev_seg, prev)) => {
                        if prev != &text
                            && matches!(key.as_str(), "mhlo.num_partitions" | "mhlo.num_replicas")
                        {
                            return Err(Error::Conflict(format!(
                                "module attribute {key}: segment '{prev_seg}' has {prev} but segment '{}' has {text}",
                                seg.name
                            )));
                        }
                    }
                    None => {
                        let mut cl = Cloner::new(m, dst);
                        let value = cl.attr(a.value);
                        let name = cl.dst.sym(&key);
                        cl.dst.op_mut(op).attrs.push(NamedAttr { name, value });
                        seen.insert(key, (seg.name.clone(), text));
                    }
                }
            }
        }
    }
    Ok(op)
}

/// Emit the distinct `sdy.mesh` ops and return per-segment symbol renames.
pub(super) fn merge_meshes(
    p: &Program,
    dst: &mut Module,
    body: crate::ir::BlockId,
) -> Result<Vec<FxHashMap<String, String>>> {
    let mut by_name: FxHashMap<String, (String, String)> = FxHashMap::default();
    let mut by_text: FxHashMap<String, String> = FxHashMap::default();
    let mut renames = Vec::with_capacity(p.segments.len());
    for seg in &p.segments {
        let m = &seg.module;
        let mut ren = FxHashMap::default();
        for top in m.top_ops() {
            let Some(&r) = m.op(top).regions.first() else {
                continue;
            };
            for &b in &m.region(r).blocks {
                for &op in &m.block(b).ops {
                    if m.op_name(op) != "sdy.mesh" {
                        continue;
                    }
                    let name = match m.op_attr(op, "sym_name").map(|a| m.attr(a)) {
                        Some(Attribute::String { escaped, .. }) => escaped.to_string(),
                        _ => continue,
                    };
                    let text = m
                        .op_attr(op, "mesh")
                        .map(|a| attr_text(m, a))
                        .unwrap_or_default();
                    if let Some(existing) = by_text.get(&text) {
                        if existing != &name {
                            ren.insert(name.clone(), existing.clone());
                        }
                        continue;
                    }
                    if let Some((prev_seg, prev_text)) = by_name.get(&name) {
                        return Err(Error::Conflict(format!(
                            "mesh @{name}: segment '{prev_seg}' defines {prev_text} but segment '{}' defines {text}",
                            seg.name
                        )));
                    }
                    by_name.insert(name.clone(), (seg.name.clone(), text.clone()));
                    by_text.insert(text, name);
                    let mut cl = Cloner::new(m, dst);
                    let copy = cl.op(op);
                    dst.push_op(body, copy);
                }
            }
        }
        renames.push(ren);
    }
    Ok(renames)
}

pub(super) fn dst_entry_blocks(m: &Module, func: OpId) -> usize {
    m.op(func)
        .regions
        .first()
        .map_or(0, |&r| m.region(r).blocks.len())
}

/// Copy every function of the segment under `prefix`; returns the entry's
/// new name. The entry itself is skipped when it will be inlined.
pub(super) fn copy_functions(
    cl: &mut Cloner<'_>,
    seg: &Segment,
    entry: OpId,
    prefix: &str,
    inline: bool,
    body: crate::ir::BlockId,
) -> Result<String> {
    let m = &seg.module;
    let mut funcs = Vec::new();
    for top in m.top_ops() {
        let Some(&r) = m.op(top).regions.first() else {
            continue;
        };
        if m.op_name(top) != "builtin.module" {
            continue;
        }
        for &b in &m.region(r).blocks {
            for &op in &m.block(b).ops {
                if m.op_name(op) == "sdy.mesh" {
                    continue;
                }
                if let Some(Attribute::String { escaped, .. }) =
                    m.op_attr(op, "sym_name").map(|a| m.attr(a))
                {
                    cl.symbols
                        .insert(escaped.to_string(), format!("{prefix}{escaped}"));
                    // References may quote the name (`@"<lambda>"`: the
                    // parser keeps the quotes), e.g. a jax.jit of a lambda.
                    cl.symbols
                        .insert(format!("\"{escaped}\""), format!("\"{prefix}{escaped}\""));
                }
                funcs.push(op);
            }
        }
    }
    let entry_name = format!("{prefix}{}", seg.entry);
    cl.rename_in_place();
    for op in funcs {
        if op == entry && inline {
            continue;
        }
        let copy = cl.op(op);
        // Rename its own symbol and make it private.
        let old = match m.op_attr(op, "sym_name").map(|a| m.attr(a)) {
            Some(Attribute::String { escaped, .. }) => Some(escaped.to_string()),
            _ => None,
        };
        if let Some(old) = old {
            let new_name = format!("{prefix}{old}");
            set_string_prop(cl.dst, copy, "sym_name", &new_name);
            if cl.dst.op_name(copy) == "func.func" {
                set_string_prop(cl.dst, copy, "sym_visibility", "private");
                if op == entry {
                    strip_entry_port_attrs(cl.dst, copy);
                }
            }
        }
        cl.dst.push_op(body, copy);
    }
    Ok(entry_name)
}

/// A called entry loses its `jax.result_info` / aliasing attributes: they
/// describe the original program's interface, not this call.
pub(super) fn strip_entry_port_attrs(m: &mut Module, func: OpId) {
    for list in ["arg_attrs", "res_attrs"] {
        let Some(a) = m.op_attr(func, list) else {
            continue;
        };
        let Attribute::Array(dicts) = m.attr(a).clone() else {
            continue;
        };
        for d in dicts {
            if let Attribute::Dict(entries) = m.attr(d).clone() {
                let kept: Vec<NamedAttr> = entries
                    .into_iter()
                    .filter(|e| {
                        !matches!(
                            m.str(e.name),
                            "jax.result_info" | "tf.aliasing_output" | "jax.buffer_donor"
                        )
                    })
                    .collect();
                m.attrs[d.index()] = Attribute::Dict(kept);
            }
        }
    }
}

pub(super) fn set_string_prop(m: &mut Module, op: OpId, name: &str, value: &str) {
    let sym = m.sym(name);
    let value = m.add_attr(Attribute::String {
        escaped: escape(value).into(),
        ty: None,
    });
    let o = m.op_mut(op);
    o.attrs.retain(|a| a.name != sym);
    match o.props.iter_mut().find(|a| a.name == sym) {
        Some(a) => a.value = value,
        None => o.props.push(NamedAttr { name: sym, value }),
    }
}

/// Clone the entry's single block into `block`, with its arguments bound to
/// `args`; returns the values its `func.return` returned.
pub(super) fn inline_entry(
    cl: &mut Cloner<'_>,
    func: OpId,
    args: &[ValueId],
    block: crate::ir::BlockId,
) -> Result<Vec<ValueId>> {
    let m = cl_src(cl, func);
    let (entry_args, ops) = m;
    for (a, &v) in entry_args.iter().zip(args) {
        cl.bind(*a, v);
    }
    let mut results = Vec::new();
    let last = ops.len().saturating_sub(1);
    for (i, op) in ops.into_iter().enumerate() {
        if i == last {
            // The terminator: its operands are the segment's results.
            let operands: Vec<ValueId> = cl_operands(cl, op);
            results = operands.iter().map(|&v| cl.value(v)).collect();
            continue;
        }
        let copy = cl.op(op);
        cl.dst.push_op(block, copy);
    }
    Ok(results)
}

pub(super) fn cl_src(cl: &Cloner<'_>, func: OpId) -> (Vec<ValueId>, Vec<OpId>) {
    let m = cl.src();
    let r = m.op(func).regions[0];
    let b = m.region(r).blocks[0];
    (m.block(b).args.clone(), m.block(b).ops.clone())
}

pub(super) fn cl_operands(cl: &Cloner<'_>, op: OpId) -> Vec<ValueId> {
    cl.src().op(op).operands.to_vec()
}

/// `stablehlo.convert` of `v` to `to` when both are tensors of the same
/// shape; `None` otherwise.
pub(super) fn insert_convert(
    m: &mut Module,
    block: crate::ir::BlockId,
    v: ValueId,
    to: TypeId,
) -> Option<ValueId> {
    let from = m.value_type(v);
    match (m.ty(from), m.ty(to)) {
        (Type::Tensor { dims: a, .. }, Type::Tensor { dims: b, .. }) if a == b => {}
        _ => return None,
    }
    let op = m.add_op_named("stablehlo.convert");
    m.op_mut(op).operands.push(v);
    let r = m.add_result(op, to, None);
    m.push_op(block, op);
    Some(r)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn set_function_props(
    m: &mut Module,
    func: OpId,
    name: &str,
    visibility: &str,
    inputs: &[TypeId],
    results: &[TypeId],
    arg_attrs: Vec<Vec<NamedAttr>>,
    res_attrs: Vec<Vec<NamedAttr>>,
) {
    set_string_prop(m, func, "sym_name", name);
    set_string_prop(m, func, "sym_visibility", visibility);
    let fty = m.intern_type(Type::Function {
        inputs: inputs.to_vec(),
        results: results.to_vec(),
    });
    let fty = m.add_attr(Attribute::Type(fty));
    let sym = m.sym("function_type");
    m.op_mut(func).props.push(NamedAttr {
        name: sym,
        value: fty,
    });
    for (list_name, lists) in [("arg_attrs", arg_attrs), ("res_attrs", res_attrs)] {
        if lists.iter().all(|l| l.is_empty()) {
            continue;
        }
        let dicts: Vec<AttrId> = lists
            .into_iter()
            .map(|l| m.add_attr(Attribute::Dict(l)))
            .collect();
        let arr = m.add_attr(Attribute::Array(dicts));
        let sym = m.sym(list_name);
        m.op_mut(func).props.push(NamedAttr {
            name: sym,
            value: arr,
        });
    }
}

pub(super) fn attr_text(m: &Module, a: AttrId) -> String {
    let mut pr = crate::print::Printer::new(m, crate::print::PrintOptions::default());
    pr.attr(a);
    pr.out
}

/// A symbol-safe version of a user name.
pub(super) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Escape a string for an MLIR string literal body.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\22"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:02X}")),
        }
    }
    out
}
