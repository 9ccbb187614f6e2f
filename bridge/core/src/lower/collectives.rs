//! Rewrites the collectives of torch segments into the global-device-id
//! form, so that a stitched program can run as the per-device body of an
//! SPMD program over several processes (JAX's distributed runtime).
//!
//! torch_xla lowers `_c10d_functional.all_reduce` for the process group it
//! saw at capture time, in its own convention:
//!
//! ```text
//! %r:2 = "stablehlo.all_reduce"(%v, %tok) <{replica_groups = dense<> : tensor<0x0xi64>}> ({...})
//!     : (tensor<4x5xf32>, tensor<f32>) -> (tensor<4x5xf32>, tensor<f32>)
//! ```
//!
//! - the last operand is torch_xla's token, a scalar `tensor<f32>` that is
//!   always zero (a constant input of the program), threaded through every
//!   collective to order them;
//! - `replica_groups` is empty ("all replicas" of a one-replica program),
//!   and there is no `channel_handle`.
//!
//! In a program that XLA compiles for several devices, that op either fails
//! or reduces over nothing. This pass turns it into the form JAX emits for a
//! `psum` over every device of a mesh:
//!
//! ```text
//! %r = "stablehlo.all_reduce"(%v) <{channel_handle = #stablehlo.channel_handle<handle = K, type = 1>,
//!     replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({...})
//! ```
//!
//! The token result's users take the token operand instead (the token is a
//! zero that only orders ops; the new collectives carry their own channel).
//! The reduction region is kept (it is applied to each operand on its own).
//!
//! Collectives already in a global form (`use_global_device_ids`, with
//! replica groups that cover devices `0..n` once each) are kept. Every other
//! collective is refused with [`Error::Collective`]: an `all_gather`,
//! `reduce_scatter`, `all_to_all` or `collective_permute` captured for a
//! group of another size has result shapes (or pairs) fixed for that size,
//! which no rewrite of attributes can fix.

use crate::ir::{Attribute, NamedAttr, OpId, Type, ValueId};
use crate::{Error, Module};
use smallvec::SmallVec;

/// Bump whenever the rewrite's output for a given input changes.
pub const REWRITE_VERSION: u32 = 1;

/// The collective ops the pass looks at (every StableHLO collective).
pub const COLLECTIVE_OPS: [&str; 6] = [
    "stablehlo.all_reduce",
    "stablehlo.all_gather",
    "stablehlo.reduce_scatter",
    "stablehlo.all_to_all",
    "stablehlo.collective_permute",
    "stablehlo.collective_broadcast",
];

/// Where the program runs: the devices the rewritten collectives span.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CollectiveTarget {
    /// Number of global devices (all processes together).
    pub num_devices: u32,
    /// The replica groups the rewritten all-reduces take, in global device
    /// ids (positions in the SPMD program's device assignment, e.g. a JAX
    /// mesh's flattened devices); they must partition `0..num_devices` into
    /// groups of one size. `None`: one group of every device.
    pub groups: Option<Vec<Vec<i64>>>,
    /// The first channel id to hand out; `None`: one above the largest
    /// channel id already in the module.
    pub first_channel: Option<i64>,
}

/// What the pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CollectivesReport {
    /// All-reduces rewritten into the global-device-id form.
    pub rewritten: usize,
    /// torch_xla tokens dropped from them.
    pub tokens_dropped: usize,
    /// Collectives already in the global form, kept as they were.
    pub kept: usize,
    /// Channel ids given to the rewritten ops, in order.
    pub channels: Vec<i64>,
}

/// Rewrites every collective of `m` for `target` (see the module docs).
/// On error the module may be partly rewritten; callers drop it.
pub fn rewrite_collectives(
    m: &mut Module,
    target: &CollectiveTarget,
) -> Result<CollectivesReport, Error> {
    let groups = target_groups(target)?;
    let mut found = Vec::new();
    let tops: Vec<OpId> = m.top_ops().collect();
    for top in tops {
        m.walk(top, &mut |o| {
            if COLLECTIVE_OPS.contains(&m.op_name(o)) {
                found.push(o);
            }
        });
    }
    let mut report = CollectivesReport::default();
    let mut next_channel = match target.first_channel {
        Some(c) => c,
        None => max_channel(m, &found) + 1,
    };
    for op in found {
        match classify(m, op, target)? {
            Form::Global => report.kept += 1,
            Form::TorchXla { token } => {
                apply(m, op, token, &groups, next_channel);
                report.rewritten += 1;
                report.tokens_dropped += usize::from(token);
                report.channels.push(next_channel);
                next_channel += 1;
            }
        }
    }
    Ok(report)
}

/// Parses `text`, rewrites its collectives and prints it back. Returns the
/// text unchanged (and an empty report) when it holds no collective.
pub fn rewrite_collectives_text(
    text: &str,
    target: &CollectiveTarget,
) -> Result<(String, CollectivesReport), Error> {
    if !COLLECTIVE_OPS
        .iter()
        .any(|op| text.contains(&op["stablehlo.".len()..]))
    {
        target_groups(target)?;
        return Ok((text.to_owned(), CollectivesReport::default()));
    }
    let mut m = crate::parse_module(text)?;
    let report = rewrite_collectives(&mut m, target)?;
    Ok((
        crate::print_module(&m, &crate::PrintOptions::default()),
        report,
    ))
}

/// The target's groups, checked: a partition of the devices into groups of
/// one size.
fn target_groups(target: &CollectiveTarget) -> Result<Vec<Vec<i64>>, Error> {
    let n = target.num_devices;
    if n == 0 {
        return Err(Error::Collective("the target has no devices".into()));
    }
    let groups = match &target.groups {
        Some(g) => g.clone(),
        None => return Ok(vec![(0..i64::from(n)).collect()]),
    };
    let mut seen = vec![false; n as usize];
    let size = groups.first().map_or(0, Vec::len);
    let mut ok = size > 0 && groups.iter().all(|g| g.len() == size);
    for &d in groups.iter().flatten() {
        match usize::try_from(d).ok().filter(|&d| d < seen.len()) {
            Some(d) if !seen[d] => seen[d] = true,
            _ => ok = false,
        }
    }
    if ok && seen.iter().all(|&s| s) {
        Ok(groups)
    } else {
        Err(Error::Collective(format!(
            "replica groups {groups:?} do not split the {n} devices into groups of one size"
        )))
    }
}

/// How a collective is written.
enum Form {
    /// Already over global device ids: keep.
    Global,
    /// torch_xla's all-reduce over "all replicas"; `token`: its last
    /// operand is torch_xla's token.
    TorchXla { token: bool },
}

fn short(name: &str) -> &str {
    name.strip_prefix("stablehlo.").unwrap_or(name)
}

fn classify(m: &Module, op: OpId, target: &CollectiveTarget) -> Result<Form, Error> {
    let name = short(m.op_name(op)).to_owned();
    let groups = replica_groups(m, op)?;
    let global = m.op_attr(op, "use_global_device_ids").is_some();
    let n = i64::from(target.num_devices);
    if global {
        let groups = groups.unwrap_or_default();
        let mut seen = vec![false; target.num_devices as usize];
        let mut ok = !groups.is_empty();
        for g in &groups {
            for &d in g {
                match usize::try_from(d).ok().filter(|&d| d < seen.len()) {
                    Some(d) if !seen[d] => seen[d] = true,
                    _ => ok = false,
                }
            }
        }
        if ok && seen.iter().all(|&s| s) {
            return Ok(Form::Global);
        }
        return Err(Error::Collective(format!(
            "{name} over replica groups {groups:?} (global device ids) does not cover the {n} \
             devices the program runs on once each; its shapes were fixed for another group \
             size: capture the torch segment with a process group of {n} ranks"
        )));
    }
    let empty = groups
        .as_ref()
        .is_none_or(|g| g.iter().all(|g| g.is_empty()));
    let has_channel = m.op_attr(op, "channel_handle").is_some();
    if name != "all_reduce" {
        return Err(Error::Collective(format!(
            "{name} with replica groups {:?} and no use_global_device_ids: only all_reduce can be \
             rewritten for {n} devices (the result shape or the pairs of {name} depend on the \
             group it was captured for); capture it with a process group of {n} ranks, or \
             express it in a JAX segment",
            groups.unwrap_or_default()
        )));
    }
    if !empty || has_channel {
        return Err(Error::Collective(format!(
            "all_reduce with replica groups {:?}{} is neither torch_xla's one-replica form \
             (empty groups, no channel) nor over global device ids: cannot tell which of the {n} \
             devices it means",
            groups.unwrap_or_default(),
            if has_channel {
                " and a channel_handle"
            } else {
                ""
            }
        )));
    }
    let o = m.op(op);
    if o.operands.is_empty() || o.operands.len() != o.results.len() {
        return Err(Error::Collective(format!(
            "all_reduce with {} operands and {} results",
            o.operands.len(),
            o.results.len()
        )));
    }
    let token = o.operands.len() >= 2 && is_f32_scalar(m, *o.operands.last().expect("non-empty"));
    Ok(Form::TorchXla { token })
}

fn is_f32_scalar(m: &Module, v: ValueId) -> bool {
    match m.ty(m.value_type(v)) {
        Type::Tensor { dims, elem, .. } => {
            dims.is_empty() && matches!(m.ty(*elem), Type::Float(crate::ir::FloatKind::F32))
        }
        _ => false,
    }
}

/// The op's `replica_groups` as lists of device ids (`None` if absent).
fn replica_groups(m: &Module, op: OpId) -> Result<Option<Vec<Vec<i64>>>, Error> {
    let Some(a) = m.op_attr(op, "replica_groups") else {
        return Ok(None);
    };
    let bad = |why: &str| {
        Error::Collective(format!(
            "{}: cannot read replica_groups ({why})",
            short(m.op_name(op))
        ))
    };
    let Attribute::Dense { body, ty } = m.attr(a) else {
        return Err(bad("not a dense attribute"));
    };
    let (rows, cols) = match m.ty(*ty) {
        Type::Tensor { dims, .. } if dims.len() == 2 && dims[0] >= 0 && dims[1] >= 0 => {
            (dims[0] as usize, dims[1] as usize)
        }
        _ => return Err(bad("not a static 2-D tensor")),
    };
    if rows * cols == 0 {
        return Ok(Some(Vec::new()));
    }
    let body = body.trim();
    if body.starts_with('"') {
        return Err(bad("hex payload"));
    }
    let nums: Vec<i64> = body
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<i64>().map_err(|_| bad("not integers")))
        .collect::<Result<_, _>>()?;
    let flat = if nums.len() == 1 && !body.contains('[') {
        vec![nums[0]; rows * cols]
    } else if nums.len() == rows * cols {
        nums
    } else {
        return Err(bad("element count does not match its type"));
    };
    // -1 pads ragged groups.
    Ok(Some(
        flat.chunks(cols)
            .map(|r| r.iter().copied().filter(|&d| d >= 0).collect())
            .collect(),
    ))
}

/// The largest `handle = N` among the channel handles of `ops` (0 if none).
fn max_channel(m: &Module, ops: &[OpId]) -> i64 {
    ops.iter()
        .filter_map(|&o| m.op_attr(o, "channel_handle"))
        .filter_map(|a| match m.attr(a) {
            Attribute::Opaque(s) => s
                .split("handle =")
                .nth(1)
                .and_then(|r| r.split([',', '>']).next())
                .and_then(|n| n.trim().parse::<i64>().ok()),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

fn apply(m: &mut Module, op: OpId, token: bool, groups: &[Vec<i64>], channel: i64) {
    if token {
        let tok_in = *m.op(op).operands.last().expect("token operand");
        let tok_out = *m.op(op).results.last().expect("token result");
        for o in m.ops.iter_mut() {
            for v in o.operands.iter_mut() {
                if *v == tok_out {
                    *v = tok_in;
                }
            }
        }
        let o = m.op_mut(op);
        o.operands.pop();
        o.results.pop();
    }
    let i64_ty = m.int_type(64);
    let groups_ty = m.intern_type(Type::Tensor {
        dims: SmallVec::from_slice(&[groups.len() as i64, groups[0].len() as i64]),
        elem: i64_ty,
        encoding: None,
    });
    let rows: Vec<String> = groups
        .iter()
        .map(|g| {
            let ids: Vec<String> = g.iter().map(|d| d.to_string()).collect();
            format!("[{}]", ids.join(", "))
        })
        .collect();
    let groups = m.add_attr(Attribute::Dense {
        body: format!("[{}]", rows.join(", ")).into(),
        ty: groups_ty,
    });
    let handle = m.add_attr(Attribute::Opaque(
        format!("stablehlo.channel_handle<handle = {channel}, type = 1>").into(),
    ));
    let unit = m.add_attr(Attribute::Unit);
    let names = [
        m.sym("channel_handle"),
        m.sym("replica_groups"),
        m.sym("use_global_device_ids"),
    ];
    let o = m.op_mut(op);
    o.props.retain(|a| !names.contains(&a.name));
    o.attrs.retain(|a| !names.contains(&a.name));
    o.props.push(NamedAttr {
        name: names[0],
        value: handle,
    });
    o.props.push(NamedAttr {
        name: names[1],
        value: groups,
    });
    o.props.push(NamedAttr {
        name: names[2],
        value: unit,
    });
}

#[cfg(test)]
mod tests;
