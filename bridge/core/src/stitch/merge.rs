//! The merge: validate the plan, order segments by their data
//! dependencies, move every segment's functions into one module under a
//! unique prefix, build `@main` by inlining (or calling) each segment's
//! entry, type-check every seam, carry shardings, meshes, donation and
//! result names across, mark the requested input-output aliases, then
//! remove dead code.

use super::emit::{
    attr_text, copy_functions, dst_entry_blocks, escape, inline_entry, insert_convert,
    merge_meshes, new_module_op, sanitize, set_function_props,
};
use super::graph::{
    check_unique_names, define_handles, find_entry, output_handle_names, topo_order, Def, Entry,
};
use super::report::{HandleReport, SegmentReport, StitchReport};
use super::sharding::{constrain, first_mesh_name, num_partitions, port_sharding, replicated};
use super::{Program, Stitched};
use crate::error::{Error, Result};
use crate::ir::{Attribute, Cloner, Module, NamedAttr, TypeId, ValueId};
use crate::print::type_to_string;
use rustc_hash::FxHashMap;

/// Attribute names carried from a segment port to the fused `@main`.
const CARRIED_PORT_ATTRS: &[&str] = &["mhlo.sharding", "sdy.sharding", "mhlo.layout_mode"];

/// Stitch `p` into one module.
pub fn stitch(p: &Program) -> Result<Stitched> {
    check_unique_names(p)?;
    super::alias::check_plan(p)?;
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

    // How often each distinct segment body is used: reused ones become
    // one function called many times.
    let mut uses: FxHashMap<u64, usize> = FxHashMap::default();
    for s in &p.segments {
        *uses.entry(s.content_hash).or_default() += 1;
    }

    // The fused module is built on a bulk copy of the largest segment that
    // is inlined exactly once; every other segment is copied op by op.
    let base = p
        .segments
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            p.inline
                && uses[&s.content_hash] == 1
                && dst_entry_blocks(&s.module, entries[*i].func) == 1
        })
        .max_by_key(|(_, s)| s.module.ops.len())
        .map(|(i, _)| i);
    // Room for every other segment's ops, reserved in the same allocation
    // as the bulk copy.
    let room = p
        .segments
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != base)
        .map(|(_, s)| s.module.ops.len())
        .sum::<usize>()
        + 16;
    let mut dst = match base {
        Some(b) => Module::adopt_with_room(&p.segments[b].module, room),
        None => {
            let mut m = Module::new();
            m.reserve(room);
            m
        }
    };
    let module_op = new_module_op(&mut dst, p)?;
    let body = dst.region(dst.op(module_op).regions[0]).blocks[0];

    // Meshes: equal ones merge, same name with different content conflicts.
    let mesh_renames = merge_meshes(p, &mut dst, body)?;

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
        let mut cl = if Some(si) == base {
            Cloner::adopting(&seg.module, &mut dst)
        } else {
            Cloner::new(&seg.module, &mut dst)
        };
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
    let mut donor_outputs = Vec::new();
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
                donor_outputs.push(q);
                let a = crate::dialects::common::int_attr(&mut dst, q as i64, 32);
                ("tf.aliasing_output", dst.add_attr(a))
            }
            None => ("jax.buffer_donor", true_attr),
        };
        let name = dst.sym(name);
        main_arg_attrs[k].push(NamedAttr { name, value });
    }
    // The caller's aliasing: inputs updated in place as outputs.
    let requested =
        super::alias::alias_attrs(&mut dst, p, &input_types, &result_types, &donor_outputs)?;
    for (k, a) in requested {
        main_arg_attrs[k].push(a);
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
    Error::SeamMismatch(Box::new(crate::error::SeamMismatch {
        handle: handle.to_string(),
        producer,
        producer_port,
        producer_type: type_to_string(dst, have),
        consumer: format!("segment '{}'", p.segments[consumer].name),
        consumer_port: format!("input {param}"),
        consumer_type: type_to_string(dst, want),
    }))
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
    // Consumers of every handle, in segment order, in one pass.
    let mut consumers_of: FxHashMap<&str, Vec<String>> = FxHashMap::default();
    for s in &p.segments {
        let mut seen = rustc_hash::FxHashSet::default();
        for h in &s.inputs {
            if seen.insert(h.as_str()) {
                consumers_of
                    .entry(h.as_str())
                    .or_default()
                    .push(s.name.clone());
            }
        }
    }
    for o in &p.outputs {
        let list = consumers_of.entry(o.handle.as_str()).or_default();
        if list.last().map(String::as_str) != Some("output") {
            list.push("output".into());
        }
    }
    names
        .into_iter()
        .map(|(name, d)| {
            let consumers = consumers_of.remove(name.as_str()).unwrap_or_default();
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
