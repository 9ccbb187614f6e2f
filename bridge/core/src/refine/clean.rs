//! After refinement: dead shape arithmetic and unreferenced private
//! functions are removed ([`remove_dead`]), and every type left in the
//! module must be static ([`check_static`]).

use super::span::refinement_error;
use crate::ir::{Attribute, Module, OpId, Type, DYNAMIC};
use crate::Result;
use rustc_hash::FxHashSet;

/// Ops without side effects whose unused results may be dropped.
fn is_pure(m: &Module, op: OpId) -> bool {
    let name = m.op_name(op);
    m.op(op).regions.is_empty()
        && name.starts_with("stablehlo.")
        && !matches!(
            name,
            "stablehlo.custom_call"
                | "stablehlo.send"
                | "stablehlo.recv"
                | "stablehlo.infeed"
                | "stablehlo.outfeed"
                | "stablehlo.rng"
                | "stablehlo.rng_bit_generator"
                | "stablehlo.after_all"
                | "stablehlo.create_token"
                | "stablehlo.optimization_barrier"
                | "stablehlo.composite"
        )
        && !name.starts_with("stablehlo.all_")
        && !name.starts_with("stablehlo.collective")
}

/// Remove unused pure ops everywhere, and private functions no call
/// reaches from `main`.
pub fn remove_dead(m: &mut Module, main: OpId) {
    let mut uses = vec![0u32; m.values.len()];
    let live_funcs = reachable_funcs(m, main);
    for f in m.top_level_funcs() {
        if !live_funcs.contains(&f) && !is_public(m, f) {
            if let Some(b) = m.op(f).parent {
                m.blocks[b.index()].ops.retain(|&o| o != f);
            }
        }
    }
    let mut all = Vec::new();
    for f in m.top_level_funcs() {
        m.walk(f, &mut |o| all.push(o));
    }
    for &o in &all {
        for &v in &m.op(o).operands {
            if let Some(u) = uses.get_mut(v.index()) {
                *u += 1;
            }
        }
    }
    let mut blocks: Vec<_> = all.iter().filter_map(|&o| m.op(o).parent).collect();
    blocks.sort_unstable();
    blocks.dedup();
    for b in blocks {
        let ops = m.block(b).ops.clone();
        let mut dead = FxHashSet::default();
        for &o in ops.iter().rev() {
            let unused = m
                .op(o)
                .results
                .iter()
                .all(|r| uses.get(r.index()).is_none_or(|&u| u == 0));
            if unused && !m.op(o).results.is_empty() && is_pure(m, o) {
                dead.insert(o);
                for &v in &m.op(o).operands {
                    if let Some(u) = uses.get_mut(v.index()) {
                        *u = u.saturating_sub(1);
                    }
                }
            }
        }
        if !dead.is_empty() {
            m.blocks[b.index()].ops.retain(|o| !dead.contains(o));
        }
    }
}

fn is_public(m: &Module, f: OpId) -> bool {
    !matches!(m.op_attr(f, "sym_visibility").map(|a| m.attr(a)),
        Some(Attribute::String { escaped, .. }) if escaped.as_str() != "public")
}

/// Functions called (transitively) from `main`, with `main`.
fn reachable_funcs(m: &Module, main: OpId) -> FxHashSet<OpId> {
    let by_name: rustc_hash::FxHashMap<String, OpId> = m
        .top_level_funcs()
        .into_iter()
        .filter_map(|f| match m.attr(m.op_attr(f, "sym_name")?) {
            Attribute::String { escaped, .. } => Some((escaped.to_string(), f)),
            _ => None,
        })
        .collect();
    let mut seen = FxHashSet::default();
    let mut stack = vec![main];
    while let Some(f) = stack.pop() {
        if !seen.insert(f) {
            continue;
        }
        m.walk(f, &mut |o| {
            for a in m.op(o).props.iter().chain(m.op(o).attrs.iter()) {
                if let Attribute::SymbolRef(path) = m.attr(a.value) {
                    if let Some(&g) = path
                        .first()
                        .and_then(|s| by_name.get(m.str(*s).trim_matches('"')))
                    {
                        stack.push(g);
                    }
                }
            }
        });
    }
    seen
}

/// Every value of every function has a static type.
pub fn check_static(m: &Module) -> Result<()> {
    let dynamic = |t: crate::ir::TypeId| match m.ty(t) {
        Type::Tensor { dims, .. } => dims.contains(&DYNAMIC),
        Type::UnrankedTensor(_) => true,
        _ => false,
    };
    for f in m.top_level_funcs() {
        let mut bad: Option<(OpId, String)> = None;
        m.walk(f, &mut |o| {
            if bad.is_some() {
                return;
            }
            let od = m.op(o);
            let args = od
                .regions
                .iter()
                .flat_map(|&r| m.region(r).blocks.iter())
                .flat_map(|&b| m.block(b).args.iter());
            for &v in od.results.iter().chain(args) {
                let t = m.value_type(v);
                if dynamic(t) {
                    bad = Some((
                        o,
                        format!(
                            "cannot infer a static shape for {} (no rule for this op, or its shape depends on data)",
                            crate::print::type_to_string(m, t)
                        ),
                    ));
                    return;
                }
            }
        });
        if let Some((o, msg)) = bad {
            return Err(refinement_error(m, o, &msg));
        }
    }
    Ok(())
}
