//! The `stablehlo.dynamic_*` ops whose shape operands became constants,
//! rewritten in place into their static forms: `dynamic_broadcast_in_dim`
//! → `broadcast_in_dim`, `dynamic_reshape` → `reshape`, `dynamic_iota` →
//! `iota`, `real_dynamic_slice` → `slice`, `dynamic_pad` → `pad`,
//! `dynamic_gather` → `gather`, `dynamic_conv` → `convolution`; and a
//! `real_dynamic_slice` of data-dependent start but constant size →
//! `dynamic_slice`. The op keeps its id, result values, location and other
//! attributes.

use super::infer::{dims_of, gather_dims, pad_dims, slice_dims};
use super::lit::Lit;
use crate::dialects::common::i64_array;
use crate::ir::{Attribute, Module, NamedAttr, OpId, Type, ValueDef, ValueId};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

/// True for the ops [`rewrite`] handles.
pub fn is_dynamic(name: &str) -> bool {
    matches!(
        name,
        "stablehlo.dynamic_broadcast_in_dim"
            | "stablehlo.dynamic_reshape"
            | "stablehlo.dynamic_iota"
            | "stablehlo.real_dynamic_slice"
            | "stablehlo.dynamic_pad"
            | "stablehlo.dynamic_gather"
            | "stablehlo.dynamic_conv"
    )
}

/// The static op: name, operands kept, result dims, new attributes.
type Static<'a> = (&'a str, usize, Option<Vec<i64>>, Vec<(&'a str, Attribute)>);

/// Why a dynamic op could not be made static.
pub enum Unrefinable {
    /// Operand `index` (a shape operand) is not known at refinement time.
    NotConstant(usize),
    /// The operands do not fit the op.
    Malformed(&'static str),
}

/// Rewrite `op` into its static form; returns the result's dimensions
/// (`None`: inferred from the static op, as for `convolution`).
pub fn rewrite(
    m: &mut Module,
    op: OpId,
    lits: &FxHashMap<ValueId, Lit>,
) -> Result<Option<Vec<i64>>, Unrefinable> {
    let name = m.op_name(op).to_string();
    let operands: Vec<ValueId> = m.op(op).operands.to_vec();
    let lit = |i: usize| -> Result<Vec<i64>, Unrefinable> {
        let v = operands
            .get(i)
            .ok_or(Unrefinable::Malformed("missing operand"))?;
        lits.get(v)
            .map(|l| l.vals.clone())
            .ok_or(Unrefinable::NotConstant(i))
    };
    let bad = Unrefinable::Malformed;
    let (new_name, keep, dims, new_props): Static<'_> = match name.as_str() {
        "stablehlo.dynamic_broadcast_in_dim" => {
            let d = lit(1)?;
            ("stablehlo.broadcast_in_dim", 1, Some(d), vec![])
        }
        "stablehlo.dynamic_reshape" => ("stablehlo.reshape", 1, Some(lit(1)?), vec![]),
        "stablehlo.dynamic_iota" => ("stablehlo.iota", 0, Some(lit(0)?), vec![]),
        "stablehlo.real_dynamic_slice" => {
            let (s, l, k) = (lit(1)?, lit(2)?, lit(3)?);
            let a = dims_of(m, operands[0]).ok_or(bad("unranked operand"))?;
            let d = slice_dims(&a, &s, &l, &k).ok_or(bad("bad slice bounds"))?;
            let props = vec![
                ("start_indices", i64_array(m, s)),
                ("limit_indices", i64_array(m, l)),
                ("strides", i64_array(m, k)),
            ];
            ("stablehlo.slice", 1, Some(d), props)
        }
        "stablehlo.dynamic_pad" => {
            let (lo, hi, inner) = (lit(2)?, lit(3)?, lit(4)?);
            let a = dims_of(m, operands[0]).ok_or(bad("unranked operand"))?;
            let d = pad_dims(&a, &lo, &hi, &inner).ok_or(bad("bad padding"))?;
            let props = vec![
                ("edge_padding_low", i64_array(m, lo)),
                ("edge_padding_high", i64_array(m, hi)),
                ("interior_padding", i64_array(m, inner)),
            ];
            ("stablehlo.pad", 2, Some(d), props)
        }
        "stablehlo.dynamic_gather" => {
            let sizes = lit(2)?;
            let idx = operands
                .get(1)
                .and_then(|&v| dims_of(m, v))
                .ok_or(bad("unranked indices"))?;
            let text = super::attr_text::opaque(m, op, "dimension_numbers")
                .ok_or(bad("no dimension_numbers"))?;
            let d = gather_dims(text, &idx, &sizes).ok_or(bad("bad gather dimensions"))?;
            (
                "stablehlo.gather",
                2,
                Some(d),
                vec![("slice_sizes", i64_array(m, sizes))],
            )
        }
        "stablehlo.dynamic_conv" => {
            let p = lit(2)?;
            if p.len() % 2 != 0 {
                return Err(bad("padding is not Nx2"));
            }
            let body = format!(
                "[{}]",
                p.chunks(2)
                    .map(|c| format!("[{}, {}]", c[0], c[1]))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let i64t = m.int_type(64);
            let ty = m.intern_type(Type::Tensor {
                dims: [(p.len() / 2) as i64, 2].into_iter().collect(),
                elem: i64t,
                encoding: None,
            });
            let props = vec![(
                "padding",
                Attribute::Dense {
                    body: body.into(),
                    ty,
                },
            )];
            // Dims come from convolution inference after the rename.
            ("stablehlo.convolution", 2, None, props)
        }
        _ => return Err(bad("not a dynamic op")),
    };
    if operands.len() < keep {
        return Err(bad("missing operand"));
    }
    let sym = m.sym(new_name);
    let mut extra: SmallVec<[NamedAttr; 2]> = SmallVec::new();
    for (k, v) in new_props {
        let name = m.sym(k);
        let value = m.add_attr(v);
        extra.push(NamedAttr { name, value });
    }
    // Attributes of the dynamic form with no static counterpart.
    let drop: Vec<_> = [
        "known_expanding_dimensions",
        "known_nonexpanding_dimensions",
    ]
    .iter()
    .filter_map(|n| m.strings.get(n))
    .collect();
    let o = m.op_mut(op);
    o.name = sym;
    o.operands.truncate(keep);
    o.props.retain(|a| !drop.contains(&a.name));
    o.attrs.retain(|a| !drop.contains(&a.name));
    o.props.extend(extra);
    Ok(dims)
}

/// `real_dynamic_slice(x, start, start + sizes, 1...)` with data-dependent
/// `start` but constant `sizes` (how jax writes `lax.dynamic_slice` with a
/// symbolic size) → `dynamic_slice(x, start[0], ..., sizes = sizes)`, the
/// start split into scalars by `slice` + `reshape` ops inserted before it.
/// The limit's `start` may be a recomputation of the same value. Returns
/// the sizes, or `None` when the op is not of this form.
pub fn slice_with_constant_sizes(
    m: &mut Module,
    op: OpId,
    lits: &FxHashMap<ValueId, Lit>,
) -> Option<Vec<i64>> {
    let ops = m.op(op).operands.to_vec();
    let [x, start, limit, step] = ops.as_slice() else {
        return None;
    };
    if lits.get(step)?.vals.iter().any(|&s| s != 1) {
        return None;
    }
    let ValueDef::OpResult { op: add, .. } = m.value(*limit).def else {
        return None;
    };
    if m.op_name(add) != "stablehlo.add" {
        return None;
    }
    let (a, b) = (m.op(add).operands[0], *m.op(add).operands.get(1)?);
    let (base, sizes) = match (lits.get(&a), lits.get(&b)) {
        (_, Some(c)) => (a, c.vals.clone()),
        (Some(c), _) => (b, c.vals.clone()),
        _ => return None,
    };
    if !same_value(m, base, *start, 8) {
        return None;
    }
    let Type::Tensor { dims, elem, .. } = m.ty(m.value_type(*start)).clone() else {
        return None;
    };
    let rank = usize::try_from(*dims.first()?).ok()?;
    if dims.len() != 1 || sizes.len() != rank || dims_of(m, *x)?.len() != rank {
        return None;
    }
    let block = m.op(op).parent?;
    let at = m.block(block).ops.iter().position(|&o| o == op)?;
    let one = m.intern_type(Type::Tensor {
        dims: [1].into_iter().collect(),
        elem,
        encoding: None,
    });
    let scalar = m.intern_type(Type::Tensor {
        dims: SmallVec::new(),
        elem,
        encoding: None,
    });
    let loc = m.op(op).loc;
    let mut new_ops = Vec::with_capacity(2 * rank);
    let mut scalars = Vec::with_capacity(rank);
    for i in 0..rank as i64 {
        let slice = m.add_op_named("stablehlo.slice");
        m.op_mut(slice).operands.push(*start);
        for (k, v) in [
            ("start_indices", i),
            ("limit_indices", i + 1),
            ("strides", 1),
        ] {
            let name = m.sym(k);
            let attr = i64_array(m, vec![v]);
            let value = m.add_attr(attr);
            m.op_mut(slice).props.push(NamedAttr { name, value });
        }
        let s = m.add_result(slice, one, None);
        let reshape = m.add_op_named("stablehlo.reshape");
        m.op_mut(reshape).operands.push(s);
        let r = m.add_result(reshape, scalar, None);
        for o in [slice, reshape] {
            m.op_mut(o).loc = loc;
            m.op_mut(o).parent = Some(block);
            new_ops.push(o);
        }
        scalars.push(r);
    }
    m.blocks[block.index()].ops.splice(at..at, new_ops);
    let name = m.sym("stablehlo.dynamic_slice");
    let key = m.sym("slice_sizes");
    let attr = i64_array(m, sizes.clone());
    let value = m.add_attr(attr);
    let o = m.op_mut(op);
    o.name = name;
    o.operands.truncate(1);
    o.operands.extend(scalars);
    o.props.clear();
    o.props.push(NamedAttr { name: key, value });
    Some(sizes)
}

/// `a` and `b` are the same value, or results of identical pure
/// computations on the same values (up to `depth` ops deep).
fn same_value(m: &Module, a: ValueId, b: ValueId, depth: u32) -> bool {
    if a == b {
        return true;
    }
    if depth == 0 || m.value_type(a) != m.value_type(b) {
        return false;
    }
    let (ValueDef::OpResult { op: oa, index: ia }, ValueDef::OpResult { op: ob, index: ib }) =
        (m.value(a).def, m.value(b).def)
    else {
        return false;
    };
    let (x, y) = (m.op(oa), m.op(ob));
    let attrs_eq = |p: &[NamedAttr], q: &[NamedAttr]| {
        p.len() == q.len()
            && p.iter()
                .zip(q)
                .all(|(s, t)| s.name == t.name && m.attr(s.value) == m.attr(t.value))
    };
    ia == ib
        && x.name == y.name
        && x.regions.is_empty()
        && y.regions.is_empty()
        && m.op_name(oa).starts_with("stablehlo.")
        && m.op_name(oa) != "stablehlo.custom_call"
        && attrs_eq(&x.props, &y.props)
        && attrs_eq(&x.attrs, &y.attrs)
        && x.operands.len() == y.operands.len()
        && x.operands
            .iter()
            .zip(&y.operands)
            .all(|(&p, &q)| same_value(m, p, q, depth - 1))
}
