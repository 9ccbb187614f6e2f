//! The merge: validate the plan, order segments by their data
//! dependencies, move every segment's functions into one module under a
//! unique prefix, build `@main` by inlining (or calling) each segment's
//! entry, type-check every seam, carry shardings, meshes, donation and
//! result names across, then remove dead code.

use super::report::{HandleReport, SegmentReport, StitchReport};
use super::{Program, Segment, Stitched};
use crate::error::{Error, Result};
use crate::ir::{
    AttrId, Attribute, Cloner, Module, NamedAttr, OpId, TopItem, Type, TypeId, ValueId,
};
use crate::print::type_to_string;
use rustc_hash::{FxHashMap, FxHashSet};

/// The entry function of a segment, read from its module.
struct Entry {
    func: OpId,
    params: Vec<TypeId>,
    results: Vec<TypeId>,
    arg_attrs: Vec<Vec<NamedAttr>>,
    res_attrs: Vec<Vec<NamedAttr>>,
    /// Output port names (`jax.result_info` or `outN`).
    port_names: Vec<String>,
}

/// Where a handle comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Def {
    Input(usize),
    Segment(usize, usize),
}

/// Attribute names carried from a segment port to the fused `@main`.
const CARRIED_PORT_ATTRS: &[&str] = &["mhlo.sharding", "sdy.sharding", "mhlo.layout_mode"];

/// Stitch `p` into one module.
pub fn stitch(p: &Program) -> Result<Stitched> {
    check_unique_names(p)?;
    let entries: Vec<Entry> = p.segments.iter().map(find_entry).collect::<Result<_>>()?;
    let out_names = output_handle_names(p, &entries)?;
    let defs = define_handles(p, &out_names)?;
    let order = topo_order(p, &defs)?;
    for o in &p.outputs {
        if !defs.contains_key(o.handle.as_str()) {
            return Err(Error::Plan(format!(
                "program output binds unknown handle '{}'",
                o.handle
            )));
        }
    }

    let mut dst = Module::new();
    dst.reserve(p.segments.iter().map(|s| s.module.ops.len()).sum());
    let module_op = new_module_op(&mut dst, p)?;
    let body = dst.region(dst.op(module_op).regions[0]).blocks[0];

    // Meshes: equal ones merge, same name with different content conflicts.
    let mesh_renames = merge_meshes(p, &mut dst, body)?;

    // How often each distinct segment body is used: reused ones become
    // one function called many times.
    let mut uses: FxHashMap<u64, usize> = FxHashMap::default();
    for s in &p.segments {
        *uses.entry(s.content_hash).or_default() += 1;
    }

    // The fused @main.
    let main = dst.add_op_named("func.func");
    dst.push_op(body, main);
    let main_region = dst.add_region(main);
    let main_block = dst.add_block();
    dst.push_block(main_region, main_block);
    let mut handles: FxHashMap<String, ValueId> = FxHashMap::default();
    let mut input_types = Vec::new();
    for inp in &p.inputs {
        let t = crate::parse::parse_type_into(&mut dst, &inp.ty).map_err(|e| {
            Error::Plan(format!(
                "program input '{}' has an invalid type '{}': {}",
                inp.name, inp.ty, e.message
            ))
        })?;
        let hint = dst.sym(&sanitize(&inp.name));
        let v = dst.add_block_arg(main_block, t, Some(hint));
        handles.insert(inp.name.clone(), v);
        input_types.push(t);
    }
    let mut main_arg_attrs: Vec<Vec<NamedAttr>> = vec![Vec::new(); p.inputs.len()];
    let mut handle_port_attrs: FxHashMap<String, Vec<NamedAttr>> = FxHashMap::default();
    let mut aliasing: Vec<(usize, String)> = Vec::new();
    let mut emitted: FxHashMap<u64, String> = FxHashMap::default();
    let mut report = StitchReport::default();

    for &si in &order {
        let seg = &p.segments[si];
        let entry = &entries[si];
        let reused = uses[&seg.content_hash] > 1;
        let single_block = dst_entry_blocks(&seg.module, entry.func) == 1;
        let inline = p.inline && !reused && single_block;
        let mut cl = Cloner::new(&seg.module, &mut dst);
        cl.symbols = mesh_renames[si].clone();
        let prefix = format!("{}__", sanitize(&seg.name));

        // Copy the segment's functions (once per distinct body).
        let entry_fn_name = match emitted.get(&seg.content_hash) {
            Some(name) => name.clone(),
            None => {
                let name = copy_functions(&mut cl, seg, entry.func, &prefix, inline, body)?;
                emitted.insert(seg.content_hash, name.clone());
                name
            }
        };

        // Arguments, with seam type checks.
        let mut args = Vec::with_capacity(seg.inputs.len());
        for (i, h) in seg.inputs.iter().enumerate() {
            let v = handles[h.as_str()];
            let want = cl.ty(entry.params[i]);
            let have = cl.dst.value_type(v);
            let v = if want == have {
                v
            } else if seg.casts.iter().any(|c| c == h) {
                insert_convert(cl.dst, main_block, v, want)
                    .ok_or_else(|| seam_error(p, &defs, &entries, h, si, i, have, want, cl.dst))?
            } else {
                return Err(seam_error(p, &defs, &entries, h, si, i, have, want, cl.dst));
            };
            args.push(v);
            if let Def::Input(k) = defs[h.as_str()] {
                for a in &entry.arg_attrs[i] {
                    let name = seg.module.str(a.name);
                    if CARRIED_PORT_ATTRS.contains(&name)
                        && !main_arg_attrs[k].iter().any(|e| cl.dst.str(e.name) == name)
                    {
                        let na = NamedAttr {
                            name: cl.dst.sym(name),
                            value: cl.attr(a.value),
                        };
                        main_arg_attrs[k].push(na);
                    }
                    if name == "tf.aliasing_output" {
                        if let Some(port) = crate::dialects::common::get_int(&seg.module, a.value) {
                            if let Some(out) = out_names[si].get(port as usize) {
                                aliasing.push((k, out.clone()));
                            }
                        }
                    }
                }
            }
        }

        // An inlined body loses its entry's parameter shardings unless they
        // become sharding constraints on the values bound to them (a
        // program input that already carries the same sharding needs none).
        if inline {
            for (i, h) in seg.inputs.iter().enumerate() {
                let Some(sh) = port_sharding(&seg.module, &entry.arg_attrs[i]) else {
                    continue;
                };
                let kind = seg.module.str(sh.name).to_string();
                let value = cl.attr(sh.value);
                if let Def::Input(k) = defs[h.as_str()] {
                    let text = attr_text(cl.dst, value);
                    if main_arg_attrs[k]
                        .iter()
                        .any(|a| cl.dst.str(a.name) == kind && attr_text(cl.dst, a.value) == text)
                    {
                        continue;
                    }
                }
                args[i] = constrain(cl.dst, main_block, args[i], &kind, value);
            }
        }

        // The body: inlined, or a call.
        let mut op_count = 0;
        seg.module.walk(entry.func, &mut |_| op_count += 1);
        op_count -= 1;
        let results: Vec<ValueId> = if inline {
            let mut results = inline_entry(&mut cl, entry.func, &args, main_block)?;
            // Likewise the result shardings.
            for (k, r) in results.iter_mut().enumerate() {
                if out_names[si][k] == "_" {
                    continue;
                }
                if let Some(sh) = port_sharding(&seg.module, &entry.res_attrs[k]) {
                    let kind = seg.module.str(sh.name).to_string();
                    let value = cl.attr(sh.value);
                    *r = constrain(cl.dst, main_block, *r, &kind, value);
                }
            }
            results
        } else {
            let call = cl.dst.add_op_named("func.call");
            let callee = cl.dst.sym(&entry_fn_name);
            let callee = cl.dst.add_attr(Attribute::SymbolRef(vec![callee]));
            let callee_name = cl.dst.sym("callee");
            cl.dst.op_mut(call).props.push(NamedAttr {
                name: callee_name,
                value: callee,
            });
            cl.dst.op_mut(call).operands = args.iter().copied().collect();
            for &t in &entry.results {
                let t = cl.ty(t);
                cl.dst.add_result(call, t, None);
            }
            cl.dst.push_op(main_block, call);
            cl.dst.op(call).results.to_vec()
        };
        for (k, name) in out_names[si].iter().enumerate() {
            if name == "_" {
                continue;
            }
            handles.insert(name.clone(), results[k]);
            let carried: Vec<NamedAttr> = entry.res_attrs[k]
                .iter()
                .filter(|a| CARRIED_PORT_ATTRS.contains(&seg.module.str(a.name)))
                .map(|a| NamedAttr {
                    name: cl.sym(a.name),
                    value: cl.attr(a.value),
                })
                .collect();
            handle_port_attrs.insert(name.clone(), carried);
        }
        report.segments.push(SegmentReport {
            name: seg.name.clone(),
            producer: seg.producer.clone(),
            ops: op_count,
            inlined: inline,
            function: (!inline).then(|| entry_fn_name.clone()),
        });
    }

    // Return the program outputs.
    let ret = dst.add_op_named("func.return");
    let out_vals: Vec<ValueId> = p
        .outputs
        .iter()
        .map(|o| handles[o.handle.as_str()])
        .collect();
    dst.op_mut(ret).operands = out_vals.iter().copied().collect();
    dst.push_op(main_block, ret);
    let result_types: Vec<TypeId> = out_vals.iter().map(|&v| dst.value_type(v)).collect();

    // Donation: plan-level donors, plus segment aliasing mapped to the
    // fused program's output indices when the donated input feeds it.
    let true_attr = dst.add_attr(Attribute::Bool(true));
    for (k, inp) in p.inputs.iter().enumerate() {
        if !inp.donate {
            continue;
        }
        let alias = aliasing
            .iter()
            .find(|(i, _)| *i == k)
            .and_then(|(_, h)| p.outputs.iter().position(|o| &o.handle == h));
        let (name, value) = match alias {
            Some(q) => {
                let a = crate::dialects::common::int_attr(&mut dst, q as i64, 32);
                ("tf.aliasing_output", dst.add_attr(a))
            }
            None => ("jax.buffer_donor", true_attr),
        };
        let name = dst.sym(name);
        main_arg_attrs[k].push(NamedAttr { name, value });
    }
    // In a multi-device program, the ports of single-device segments
    // (torch_xla, unsharded jax) hold whole arrays: program inputs and
    // outputs bound only to such ports are replicated explicitly, or
    // sharding propagation would be free to split them.
    let single: Vec<bool> = p
        .segments
        .iter()
        .map(|s| num_partitions(&s.module) <= 1)
        .collect();
    let multi = single.iter().any(|s| !s);
    let mesh = first_mesh_name(&dst, body);
    if multi {
        for (k, inp) in p.inputs.iter().enumerate() {
            let consumers_single = p
                .segments
                .iter()
                .zip(&single)
                .filter(|(s, _)| s.inputs.contains(&inp.name))
                .all(|(_, &one)| one);
            if consumers_single && port_sharding(&dst, &main_arg_attrs[k]).is_none() {
                let a = replicated(&mut dst, mesh.as_deref(), input_types[k]);
                main_arg_attrs[k].push(a);
            }
        }
    }
    let mut res_attrs: Vec<Vec<NamedAttr>> = Vec::new();
    for o in &p.outputs {
        let mut list = handle_port_attrs
            .get(&o.handle)
            .cloned()
            .unwrap_or_default();
        let from_single = match defs[o.handle.as_str()] {
            Def::Input(_) => true,
            Def::Segment(s, _) => single[s],
        };
        if multi && from_single && port_sharding(&dst, &list).is_none() {
            let t = dst.value_type(handles[o.handle.as_str()]);
            let a = replicated(&mut dst, mesh.as_deref(), t);
            list.push(a);
        }
        let label = o.name.clone().unwrap_or_else(|| o.handle.clone());
        let value = dst.add_attr(Attribute::String {
            escaped: escape(&label).into(),
            ty: None,
        });
        list.push(NamedAttr {
            name: dst.sym("jax.result_info"),
            value,
        });
        res_attrs.push(list);
    }
    set_function_props(
        &mut dst,
        main,
        "main",
        "public",
        &input_types,
        &result_types,
        main_arg_attrs,
        res_attrs,
    );

    report.dead_ops_removed = super::dce::remove_dead_ops(&mut dst, main_block);
    super::dce::remove_unused_functions(&mut dst, body, main);
    report.handles = handle_reports(p, &defs, &handles, &dst);
    Ok(Stitched {
        module: dst,
        report,
    })
}

/// The sharding attribute (`sdy.sharding` or `mhlo.sharding`) in a port's
/// attribute list.
fn port_sharding(m: &Module, attrs: &[NamedAttr]) -> Option<NamedAttr> {
    attrs
        .iter()
        .find(|a| matches!(m.str(a.name), "sdy.sharding" | "mhlo.sharding"))
        .copied()
}

/// `v` constrained to `sharding` (the value of a `kind` port attribute,
/// already in `m`): `sdy.sharding_constraint` for Shardy, the
/// `custom_call @Sharding` jax emits for GSPMD.
fn constrain(
    m: &mut Module,
    block: crate::ir::BlockId,
    v: ValueId,
    kind: &str,
    sharding: AttrId,
) -> ValueId {
    let ty = m.value_type(v);
    let op = if kind == "sdy.sharding" {
        let op = m.add_op_named("sdy.sharding_constraint");
        let name = m.sym("sharding");
        m.op_mut(op).props.push(NamedAttr {
            name,
            value: sharding,
        });
        op
    } else {
        let op = m.add_op_named("stablehlo.custom_call");
        let target = m.add_attr(Attribute::String {
            escaped: "Sharding".into(),
            ty: None,
        });
        let name = m.sym("call_target_name");
        m.op_mut(op).props.push(NamedAttr {
            name,
            value: target,
        });
        let name = m.sym("mhlo.sharding");
        m.op_mut(op).attrs.push(NamedAttr {
            name,
            value: sharding,
        });
        op
    };
    m.op_mut(op).operands.push(v);
    let r = m.add_result(op, ty, None);
    m.push_op(block, op);
    r
}

/// `mhlo.num_partitions` of a segment's module (1 when absent).
fn num_partitions(m: &Module) -> i64 {
    m.top_ops()
        .filter(|&o| m.op_name(o) == "builtin.module")
        .find_map(|o| m.op_attr(o, "mhlo.num_partitions"))
        .and_then(|a| crate::dialects::common::get_int(m, a))
        .unwrap_or(1)
}

/// The name of the first `sdy.mesh` in the fused module's body.
fn first_mesh_name(m: &Module, body: crate::ir::BlockId) -> Option<String> {
    m.block(body).ops.iter().find_map(|&op| {
        if m.op_name(op) != "sdy.mesh" {
            return None;
        }
        match m.op_attr(op, "sym_name").map(|a| m.attr(a)) {
            Some(Attribute::String { escaped, .. }) => Some(escaped.to_string()),
            _ => None,
        }
    })
}

/// A replicated sharding for a value of type `t`: over `mesh` (Shardy,
/// every dimension closed and unsharded) or GSPMD's `{replicated}`.
fn replicated(m: &mut Module, mesh: Option<&str>, t: TypeId) -> NamedAttr {
    match mesh {
        Some(mesh) => {
            let rank = match m.ty(t) {
                Type::Tensor { dims, .. } => dims.len(),
                _ => 0,
            };
            let dims = vec!["{}"; rank].join(", ");
            let value = m.add_attr(Attribute::Opaque(
                format!("sdy.sharding<@{mesh}, [{dims}]>").into(),
            ));
            NamedAttr {
                name: m.sym("sdy.sharding"),
                value,
            }
        }
        None => {
            let value = m.add_attr(Attribute::String {
                escaped: "{replicated}".into(),
                ty: None,
            });
            NamedAttr {
                name: m.sym("mhlo.sharding"),
                value,
            }
        }
    }
}

fn check_unique_names(p: &Program) -> Result<()> {
    let mut seen = FxHashSet::default();
    for s in &p.segments {
        if !seen.insert(s.name.as_str()) {
            return Err(Error::Plan(format!(
                "segment name '{}' is used twice",
                s.name
            )));
        }
    }
    Ok(())
}

fn find_entry(seg: &Segment) -> Result<Entry> {
    let m = &seg.module;
    let mut available = Vec::new();
    // Functions are direct children of the top-level module(s): no deep walk.
    for top in m.top_ops() {
        let candidates: Vec<OpId> = if m.op_name(top) == "func.func" {
            vec![top]
        } else {
            m.op(top)
                .regions
                .iter()
                .flat_map(|&r| m.region(r).blocks.iter())
                .flat_map(|&b| m.block(b).ops.iter().copied())
                .collect()
        };
        for op in candidates {
            if m.op_name(op) != "func.func" {
                continue;
            }
            if let Some(Attribute::String { escaped, .. }) =
                m.op_attr(op, "sym_name").map(|a| m.attr(a))
            {
                if **escaped == *seg.entry {
                    return entry_info(m, op, &seg.name);
                }
                available.push(escaped.to_string());
            }
        }
    }
    Err(Error::Plan(format!(
        "segment '{}': entry function '@{}' not found (functions: {})",
        seg.name,
        seg.entry,
        if available.is_empty() {
            "none".to_string()
        } else {
            available
                .iter()
                .map(|f| format!("@{f}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    )))
}

fn entry_info(m: &Module, func: OpId, seg: &str) -> Result<Entry> {
    let (params, results) = match m.op_attr(func, "function_type").map(|a| m.attr(a)) {
        Some(Attribute::Type(t)) => match m.ty(*t) {
            Type::Function { inputs, results } => (inputs.clone(), results.clone()),
            _ => {
                return Err(Error::Plan(format!(
                    "segment '{seg}': entry has no function type"
                )))
            }
        },
        _ => {
            return Err(Error::Plan(format!(
                "segment '{seg}': entry has no function type"
            )))
        }
    };
    let dicts = |name: &str, n: usize| -> Vec<Vec<NamedAttr>> {
        let list: Vec<AttrId> = match m.op_attr(func, name).map(|a| m.attr(a)) {
            Some(Attribute::Array(v)) => v.clone(),
            _ => Vec::new(),
        };
        (0..n)
            .map(|i| match list.get(i).map(|&a| m.attr(a)) {
                Some(Attribute::Dict(d)) => d.clone(),
                _ => Vec::new(),
            })
            .collect()
    };
    let arg_attrs = dicts("arg_attrs", params.len());
    let res_attrs = dicts("res_attrs", results.len());
    let port_names = res_attrs
        .iter()
        .enumerate()
        .map(|(i, attrs)| {
            attrs
                .iter()
                .find(|a| m.str(a.name) == "jax.result_info")
                .and_then(|a| match m.attr(a.value) {
                    Attribute::String { escaped, .. } if !escaped.is_empty() => {
                        Some(escaped.to_string())
                    }
                    _ => None,
                })
                .unwrap_or_else(|| format!("out{i}"))
        })
        .collect();
    if m.op(func)
        .regions
        .first()
        .is_none_or(|&r| m.region(r).blocks.is_empty())
    {
        return Err(Error::Plan(format!(
            "segment '{seg}': entry function is a declaration without a body"
        )));
    }
    Ok(Entry {
        func,
        params,
        results,
        arg_attrs,
        res_attrs,
        port_names,
    })
}

fn output_handle_names(p: &Program, entries: &[Entry]) -> Result<Vec<Vec<String>>> {
    p.segments
        .iter()
        .zip(entries)
        .map(|(s, e)| {
            if s.inputs.len() != e.params.len() {
                return Err(Error::Plan(format!(
                    "segment '{}': entry '@{}' takes {} parameter(s) but {} input handle(s) are bound",
                    s.name,
                    s.entry,
                    e.params.len(),
                    s.inputs.len()
                )));
            }
            if s.outputs.is_empty() {
                return Ok(e.port_names.iter().map(|n| format!("{}.{n}", s.name)).collect());
            }
            if s.outputs.len() != e.results.len() {
                return Err(Error::Plan(format!(
                    "segment '{}': entry '@{}' returns {} result(s) but {} output handle(s) are named",
                    s.name,
                    s.entry,
                    e.results.len(),
                    s.outputs.len()
                )));
            }
            Ok(s.outputs.clone())
        })
        .collect()
}

fn define_handles(p: &Program, out_names: &[Vec<String>]) -> Result<FxHashMap<String, Def>> {
    let mut defs: FxHashMap<String, Def> = FxHashMap::default();
    let mut define = |name: &str, d: Def, what: String| -> Result<()> {
        if name == "_" {
            return Ok(());
        }
        if defs.insert(name.to_string(), d).is_some() {
            return Err(Error::Plan(format!(
                "handle '{name}' is defined twice (again by {what})"
            )));
        }
        Ok(())
    };
    for (i, inp) in p.inputs.iter().enumerate() {
        define(&inp.name, Def::Input(i), format!("program input {i}"))?;
    }
    for (si, names) in out_names.iter().enumerate() {
        for (k, n) in names.iter().enumerate() {
            define(
                n,
                Def::Segment(si, k),
                format!("segment '{}' output {k}", p.segments[si].name),
            )?;
        }
    }
    for s in &p.segments {
        for (i, h) in s.inputs.iter().enumerate() {
            if !defs.contains_key(h.as_str()) {
                return Err(Error::Plan(format!(
                    "segment '{}' input {i} binds unknown handle '{h}'",
                    s.name
                )));
            }
        }
    }
    Ok(defs)
}

fn topo_order(p: &Program, defs: &FxHashMap<String, Def>) -> Result<Vec<usize>> {
    let n = p.segments.len();
    let mut indeg = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (si, s) in p.segments.iter().enumerate() {
        let mut deps = FxHashSet::default();
        for h in &s.inputs {
            if let Some(Def::Segment(src, _)) = defs.get(h.as_str()) {
                deps.insert(*src);
            }
        }
        for d in deps {
            indeg[si] += 1;
            users[d].push(si);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &u in users[i].iter().rev() {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.push(u);
            }
        }
    }
    if order.len() != n {
        let stuck: Vec<&str> = (0..n)
            .filter(|&i| indeg[i] > 0)
            .map(|i| p.segments[i].name.as_str())
            .collect();
        return Err(Error::Cycle(format!(
            "segments {} depend on each other's outputs",
            stuck
                .iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(order)
}

/// Create `module @hlobridge_stitched` with merged module attributes.
fn new_module_op(dst: &mut Module, p: &Program) -> Result<OpId> {
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
fn merge_meshes(
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

fn dst_entry_blocks(m: &Module, func: OpId) -> usize {
    m.op(func)
        .regions
        .first()
        .map_or(0, |&r| m.region(r).blocks.len())
}

/// Copy every function of the segment under `prefix`; returns the entry's
/// new name. The entry itself is skipped when it will be inlined.
fn copy_functions(
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
                }
                funcs.push(op);
            }
        }
    }
    let entry_name = format!("{prefix}{}", seg.entry);
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
fn strip_entry_port_attrs(m: &mut Module, func: OpId) {
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

fn set_string_prop(m: &mut Module, op: OpId, name: &str, value: &str) {
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
fn inline_entry(
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

fn cl_src(cl: &Cloner<'_>, func: OpId) -> (Vec<ValueId>, Vec<OpId>) {
    let m = cl.src();
    let r = m.op(func).regions[0];
    let b = m.region(r).blocks[0];
    (m.block(b).args.clone(), m.block(b).ops.clone())
}

fn cl_operands(cl: &Cloner<'_>, op: OpId) -> Vec<ValueId> {
    cl.src().op(op).operands.to_vec()
}

/// `stablehlo.convert` of `v` to `to` when both are tensors of the same
/// shape; `None` otherwise.
fn insert_convert(
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
fn seam_error(
    p: &Program,
    defs: &FxHashMap<String, Def>,
    entries: &[Entry],
    handle: &str,
    consumer: usize,
    param: usize,
    have: TypeId,
    want: TypeId,
    dst: &Module,
) -> Error {
    let (producer, producer_port) = match defs[handle] {
        Def::Input(i) => (
            "program input".to_string(),
            format!("{i} ('{}')", p.inputs[i].name),
        ),
        Def::Segment(s, k) => (
            format!("segment '{}'", p.segments[s].name),
            format!("output {k} ({})", entries[s].port_names[k]),
        ),
    };
    Error::SeamMismatch {
        handle: handle.to_string(),
        producer,
        producer_port,
        producer_type: type_to_string(dst, have),
        consumer: format!("segment '{}'", p.segments[consumer].name),
        consumer_port: format!("input {param}"),
        consumer_type: type_to_string(dst, want),
    }
}

#[allow(clippy::too_many_arguments)]
fn set_function_props(
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

fn handle_reports(
    p: &Program,
    defs: &FxHashMap<String, Def>,
    handles: &FxHashMap<String, ValueId>,
    dst: &Module,
) -> Vec<HandleReport> {
    let mut names: Vec<(&String, &Def)> = defs.iter().collect();
    names.sort_by_key(|(_, d)| match d {
        Def::Input(i) => (0, *i, 0),
        Def::Segment(s, k) => (1, *s, *k),
    });
    names
        .into_iter()
        .map(|(name, d)| {
            let mut consumers: Vec<String> = p
                .segments
                .iter()
                .filter(|s| s.inputs.iter().any(|h| h == name))
                .map(|s| s.name.clone())
                .collect();
            if p.outputs.iter().any(|o| &o.handle == name) {
                consumers.push("output".into());
            }
            let (producer, donated) = match d {
                Def::Input(i) => ("input".to_string(), p.inputs[*i].donate),
                Def::Segment(s, _) => (p.segments[*s].name.clone(), false),
            };
            HandleReport {
                name: name.clone(),
                ty: handles
                    .get(name)
                    .map(|&v| type_to_string(dst, dst.value_type(v)))
                    .unwrap_or_default(),
                producer,
                consumers,
                donated,
            }
        })
        .collect()
}

fn attr_text(m: &Module, a: AttrId) -> String {
    let mut pr = crate::print::Printer::new(m, crate::print::PrintOptions::default());
    pr.attr(a);
    pr.out
}

/// A symbol-safe version of a user name.
fn sanitize(s: &str) -> String {
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
fn escape(s: &str) -> String {
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
