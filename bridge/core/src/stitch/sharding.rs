//! Shardings across seams: carrying a sharded segment's port shardings
//! onto the values of an inlined body, and replicating the ports of
//! single-device segments inside a multi-device program.

use crate::ir::{AttrId, Attribute, Module, NamedAttr, Type, TypeId, ValueId};

/// The sharding attribute (`sdy.sharding` or `mhlo.sharding`) in a port's
/// attribute list.
pub(crate) fn port_sharding(m: &Module, attrs: &[NamedAttr]) -> Option<NamedAttr> {
    attrs
        .iter()
        .find(|a| matches!(m.str(a.name), "sdy.sharding" | "mhlo.sharding"))
        .copied()
}

/// `v` constrained to `sharding` (the value of a `kind` port attribute,
/// already in `m`): `sdy.sharding_constraint` for Shardy, the
/// `custom_call @Sharding` jax emits for GSPMD.
pub(super) fn constrain(
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
pub(super) fn num_partitions(m: &Module) -> i64 {
    m.top_ops()
        .filter(|&o| m.op_name(o) == "builtin.module")
        .find_map(|o| m.op_attr(o, "mhlo.num_partitions"))
        .and_then(|a| crate::dialects::common::get_int(m, a))
        .unwrap_or(1)
}

/// The name of the first `sdy.mesh` in the fused module's body.
pub(super) fn first_mesh_name(m: &Module, body: crate::ir::BlockId) -> Option<String> {
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
pub(super) fn replicated(m: &mut Module, mesh: Option<&str>, t: TypeId) -> NamedAttr {
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
