//! The `stablehlo.dynamic_*` ops whose shape operands became constants,
//! rewritten in place into their static forms: `dynamic_broadcast_in_dim`
//! → `broadcast_in_dim`, `dynamic_reshape` → `reshape`, `dynamic_iota` →
//! `iota`, `real_dynamic_slice` → `slice`, `dynamic_pad` → `pad`,
//! `dynamic_gather` → `gather`, `dynamic_conv` → `convolution`. The op keeps
//! its id, result values, location and other attributes.

use super::infer::{dims_of, gather_dims, pad_dims, slice_dims};
use super::lit::Lit;
use crate::dialects::common::i64_array;
use crate::ir::{Attribute, Module, NamedAttr, OpId, Type, ValueId};
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
        let v = operands.get(i).ok_or(Unrefinable::Malformed("missing operand"))?;
        lits.get(v)
            .map(|l| l.vals.clone())
            .ok_or(Unrefinable::NotConstant(i))
    };
    let bad = Unrefinable::Malformed;
    let (new_name, keep, dims, new_props): (&str, usize, Option<Vec<i64>>, Vec<(&str, Attribute)>) =
        match name.as_str() {
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
                ("stablehlo.gather", 2, Some(d), vec![("slice_sizes", i64_array(m, sizes))])
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
    let drop: Vec<_> = ["known_expanding_dimensions", "known_nonexpanding_dimensions"]
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
