//! Reading and checking a plan: each segment's entry function and ports,
//! where every handle comes from, and the order segments run in.

use super::{Program, Segment};
use crate::error::{Error, Result};
use crate::ir::{AttrId, Attribute, Module, NamedAttr, OpId, Type, TypeId};
use rustc_hash::{FxHashMap, FxHashSet};

/// The entry function of a segment, read from its module.
pub(crate) struct Entry {
    pub(crate) func: OpId,
    pub(crate) params: Vec<TypeId>,
    pub(crate) results: Vec<TypeId>,
    pub(crate) arg_attrs: Vec<Vec<NamedAttr>>,
    pub(crate) res_attrs: Vec<Vec<NamedAttr>>,
    /// Output port names (`jax.result_info` or `outN`).
    pub(crate) port_names: Vec<String>,
}

/// Where a handle comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Def {
    Input(usize),
    Segment(usize, usize),
}

pub(crate) fn check_unique_names(p: &Program) -> Result<()> {
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

pub(crate) fn find_entry(seg: &Segment) -> Result<Entry> {
    let m = &seg.module;
    let mut available = Vec::new();
    // Functions are direct children of the top-level module(s): no deep walk.
    for op in m.top_level_funcs() {
        if let Some(Attribute::String { escaped, .. }) =
            m.op_attr(op, "sym_name").map(|a| m.attr(a))
        {
            if **escaped == *seg.entry {
                return entry_info(m, op, &seg.name);
            }
            available.push(escaped.to_string());
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

pub(crate) fn entry_info(m: &Module, func: OpId, seg: &str) -> Result<Entry> {
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

pub(crate) fn output_handle_names(p: &Program, entries: &[Entry]) -> Result<Vec<Vec<String>>> {
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

pub(crate) fn define_handles(
    p: &Program,
    out_names: &[Vec<String>],
) -> Result<FxHashMap<String, Def>> {
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

pub(crate) fn topo_order(p: &Program, defs: &FxHashMap<String, Def>) -> Result<Vec<usize>> {
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
