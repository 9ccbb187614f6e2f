//! Dead code removal for the fused `@main`: results nothing uses are
//! removed together with the ops that only they needed, then functions no
//! longer referenced from `@main` are dropped.

use crate::ir::{Attribute, BlockId, Module, OpId};
use rustc_hash::{FxHashMap, FxHashSet};

/// True if `op` may be removed when its results are unused.
fn is_removable(m: &Module, op: OpId) -> bool {
    let name = m.op_name(op);
    if matches!(
        name,
        "func.return"
            | "stablehlo.return"
            | "stablehlo.send"
            | "stablehlo.recv"
            | "stablehlo.infeed"
            | "stablehlo.outfeed"
            | "stablehlo.after_all"
            | "stablehlo.optimization_barrier"
            | "func.call"
    ) {
        return false;
    }
    if name == "stablehlo.custom_call" {
        if let Some(a) = m.op_attr(op, "has_side_effect") {
            if matches!(m.attr(a), Attribute::Bool(true)) {
                return false;
            }
        }
    }
    // Anything nested that has side effects keeps the op.
    let mut pure = true;
    for &r in &m.op(op).regions {
        for &b in &m.region(r).blocks {
            for &child in &m.block(b).ops {
                let n = m.op_name(child);
                if n != "stablehlo.return" && n != "func.return" && !is_removable(m, child) {
                    pure = false;
                }
            }
        }
    }
    pure
}

/// Remove dead ops from `block` (a function body); returns how many ops
/// (nested ones included) were removed.
pub fn remove_dead_ops(m: &mut Module, block: BlockId) -> usize {
    // Use counts of every value, from all ops nested in the block.
    let mut uses: Vec<u32> = vec![0; m.values.len()];
    for &op in &m.block(block).ops {
        m.walk(op, &mut |o| {
            for &v in &m.op(o).operands {
                uses[v.index()] += 1;
            }
        });
    }
    let ops = m.block(block).ops.clone();
    let mut keep = vec![true; ops.len()];
    let mut removed = 0;
    for (i, &op) in ops.iter().enumerate().rev() {
        let dead = m.op(op).results.iter().all(|r| uses[r.index()] == 0);
        if dead && is_removable(m, op) {
            keep[i] = false;
            m.walk(op, &mut |o| {
                removed += 1;
                for &v in &m.op(o).operands {
                    uses[v.index()] = uses[v.index()].saturating_sub(1);
                }
            });
        }
    }
    let kept: Vec<OpId> = ops
        .into_iter()
        .zip(keep)
        .filter_map(|(o, k)| k.then_some(o))
        .collect();
    m.blocks[block.index()].ops = kept;
    removed
}

/// Drop top-level symbols of `body` that `root` does not reference,
/// directly or through other kept symbols. `sdy.mesh` ops referenced from
/// attribute text are kept too.
pub fn remove_unused_functions(m: &mut Module, body: BlockId, root: OpId) {
    let mut by_name: FxHashMap<String, OpId> = FxHashMap::default();
    for &op in &m.block(body).ops {
        if let Some(Attribute::String { escaped, .. }) =
            m.op_attr(op, "sym_name").map(|a| m.attr(a))
        {
            by_name.insert(escaped.to_string(), op);
        }
    }
    let mut live: FxHashSet<OpId> = FxHashSet::default();
    let mut stack = vec![root];
    while let Some(op) = stack.pop() {
        if !live.insert(op) {
            continue;
        }
        let mut refs = Vec::new();
        m.walk(op, &mut |o| {
            let od = m.op(o);
            for a in od.props.iter().chain(od.attrs.iter()) {
                collect_refs(m, a.value, &mut refs);
            }
        });
        for r in refs {
            if let Some(&target) = by_name.get(&r) {
                stack.push(target);
            }
        }
    }
    let kept: Vec<OpId> = m
        .block(body)
        .ops
        .iter()
        .copied()
        .filter(|&op| {
            live.contains(&op) || m.op_name(op) == "sdy.mesh" || m.op_attr(op, "sym_name").is_none()
        })
        .collect();
    m.blocks[body.index()].ops = kept;
}

fn collect_refs(m: &Module, a: crate::ir::AttrId, out: &mut Vec<String>) {
    match m.attr(a) {
        Attribute::SymbolRef(parts) => {
            if let Some(&p) = parts.first() {
                // `@"name"` keeps its quotes in the reference; sym_name has none.
                out.push(m.str(p).trim_matches('"').to_string());
            }
        }
        Attribute::Array(es) => {
            for &e in es {
                collect_refs(m, e, out);
            }
        }
        Attribute::Dict(es) => {
            for e in es {
                collect_refs(m, e.value, out);
            }
        }
        Attribute::Opaque(text) => {
            let mut rest: &str = text;
            while let Some(at) = rest.find('@') {
                let after = &rest[at + 1..];
                let end = after
                    .find(|c: char| {
                        !(c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '-'))
                    })
                    .unwrap_or(after.len());
                out.push(after[..end].to_string());
                rest = &after[end..];
            }
        }
        _ => {}
    }
}
