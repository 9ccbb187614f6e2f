//! Constant folding of shape arithmetic: once the arguments' shapes are
//! known, `get_dimension_size` is a constant, and so is every small integer
//! computation on it (`convert`, `reshape`, `concatenate`, `slice`, splat
//! `broadcast_in_dim`, the integer elementwise ops, `compare`, `select`, and the
//! reshape-shape helpers). [`fold`] evaluates one op whose operands are
//! known; the driver turns the op into a `stablehlo.constant`. The set
//! follows jaxlib's refinement (`broadcast_in_dim` folds only a splat,
//! there and here).

use super::lit::{foldable_type, strides, unflatten, IntKind, Lit};
use crate::dialects::common::{get_enum, get_i64_array, get_int};
use crate::ir::{Attribute, Module, OpId, Type, ValueId};
use rustc_hash::FxHashMap;

/// The value of `op`'s single result, if it can be computed from what is
/// known (`lits`) and is a small integer tensor.
pub fn fold(m: &Module, op: OpId, lits: &FxHashMap<ValueId, Lit>) -> Option<Lit> {
    let o = m.op(op);
    if o.results.len() != 1 || !o.regions.is_empty() {
        return None;
    }
    let (dims, kind) = foldable_type(m, m.value_type(o.results[0]))?;
    let n: usize = dims.iter().map(|&d| d as usize).product();
    let name = m.op_name(op);
    if name == "stablehlo.constant" {
        let Attribute::Dense { body, ty } = m.attr(m.op_attr(op, "value")?) else {
            return None;
        };
        return Lit::parse(m, body, *ty);
    }
    if name == "stablehlo.get_dimension_size" {
        let dim = get_int(m, m.op_attr(op, "dimension")?)?;
        let Type::Tensor { dims: od, .. } = m.ty(m.value_type(*o.operands.first()?)) else {
            return None;
        };
        let d = *od.get(usize::try_from(dim).ok()?)?;
        return (d >= 0).then(|| Lit {
            dims,
            vals: vec![kind.wrap(d); n],
            kind,
        });
    }
    let args: Option<Vec<&Lit>> = o.operands.iter().map(|v| lits.get(v)).collect();
    let args = args?;
    let vals = match name {
        "stablehlo.convert" | "stablehlo.reshape" => {
            let a = args.first()?;
            (a.len() == n).then(|| {
                a.vals
                    .iter()
                    .map(|&v| convert(v, a.kind, kind))
                    .collect::<Vec<_>>()
            })?
        }
        "stablehlo.broadcast_in_dim" => {
            // A splat only (jaxlib folds no other broadcast either).
            let a = args.first()?;
            let v = *a.vals.first()?;
            a.vals.iter().all(|&x| x == v).then(|| vec![v; n])?
        }
        "stablehlo.concatenate" => {
            let axis = usize::try_from(get_int(m, m.op_attr(op, "dimension")?)?).ok()?;
            (0..n)
                .map(|i| {
                    let mut idx = unflatten(i, &dims);
                    let mut k = *idx.get(axis)? as i64;
                    for a in &args {
                        let d = *a.dims.get(axis)?;
                        if k < d {
                            idx[axis] = k as usize;
                            let st = strides(&a.dims);
                            let f: usize = idx.iter().zip(&st).map(|(x, s)| x * s).sum();
                            return a.vals.get(f).copied();
                        }
                        k -= d;
                    }
                    None
                })
                .collect::<Option<Vec<_>>>()?
        }
        "stablehlo.slice" => {
            let a = args.first()?;
            let start = get_i64_array(m, m.op_attr(op, "start_indices")?)?;
            let step = get_i64_array(m, m.op_attr(op, "strides")?)?;
            if start.len() != a.dims.len() || step.len() != a.dims.len() {
                return None;
            }
            let st = strides(&a.dims);
            (0..n)
                .map(|i| {
                    let idx = unflatten(i, &dims);
                    let f: usize = idx
                        .iter()
                        .enumerate()
                        .map(|(j, &x)| (start[j] as usize + x * step[j] as usize) * st[j])
                        .sum();
                    a.vals.get(f).copied()
                })
                .collect::<Option<Vec<_>>>()?
        }
        "stablehlo.select" => {
            let (p, t, f) = (args.first()?, args.get(1)?, args.get(2)?);
            (t.len() == n && f.len() == n && (p.len() == n || p.len() == 1)).then(|| {
                (0..n)
                    .map(|i| {
                        let c = if p.len() == 1 { p.vals[0] } else { p.vals[i] };
                        if c != 0 {
                            t.vals[i]
                        } else {
                            f.vals[i]
                        }
                    })
                    .collect::<Vec<_>>()
            })?
        }
        "stablehlo.compare" => {
            let (a, b) = (args.first()?, args.get(1)?);
            let dir = get_enum(
                m,
                m.op_attr(op, "comparison_direction")?,
                "stablehlo",
                "comparison_direction",
            )?;
            if a.len() != n || b.len() != n {
                return None;
            }
            let unsigned = a.kind.unsigned;
            (0..n)
                .map(|i| {
                    let (x, y) = (a.vals[i], b.vals[i]);
                    let ord = if unsigned {
                        (x as u64).cmp(&(y as u64))
                    } else {
                        x.cmp(&y)
                    };
                    use std::cmp::Ordering::*;
                    let r = match dir {
                        "EQ" => ord == Equal,
                        "NE" => ord != Equal,
                        "LT" => ord == Less,
                        "LE" => ord != Greater,
                        "GT" => ord == Greater,
                        "GE" => ord != Less,
                        _ => return None,
                    };
                    Some(r as i64)
                })
                .collect::<Option<Vec<_>>>()?
        }
        "stablehlo.compute_reshape_shape" | "mhlo.compute_reshape_shape" => {
            let (total, shape) = (args.first()?.scalar()?, args.get(1)?);
            let known: i64 = shape.vals.iter().filter(|&&v| v != -1).product();
            shape
                .vals
                .iter()
                .map(|&v| {
                    if v == -1 {
                        (known != 0).then(|| total / known)
                    } else {
                        Some(v)
                    }
                })
                .collect::<Option<Vec<_>>>()?
        }
        _ => {
            let un = unary(name);
            let bin = binary(name);
            if let Some(f) = un {
                let a = args.first()?;
                if a.len() != n || args.len() != 1 {
                    return None;
                }
                a.vals
                    .iter()
                    .map(|&v| f(v, a.kind))
                    .collect::<Option<Vec<_>>>()?
            } else if let Some(f) = bin {
                let (a, b) = (args.first()?, args.get(1)?);
                if a.len() != n || b.len() != n || args.len() != 2 {
                    return None;
                }
                (0..n)
                    .map(|i| f(a.vals[i], b.vals[i], a.kind))
                    .collect::<Option<Vec<_>>>()?
            } else {
                return None;
            }
        }
    };
    let vals = vals.into_iter().map(|v| kind.wrap(v)).collect();
    Some(Lit { dims, vals, kind })
}

fn convert(v: i64, from: IntKind, to: IntKind) -> i64 {
    if to.width == 1 {
        return (v != 0) as i64;
    }
    let v = if from.unsigned && from.width < 64 {
        v & ((1i64 << from.width) - 1)
    } else {
        v
    };
    to.wrap(v)
}

type Unary = fn(i64, IntKind) -> Option<i64>;
type Binary = fn(i64, i64, IntKind) -> Option<i64>;

fn unary(name: &str) -> Option<Unary> {
    Some(match name {
        "stablehlo.negate" => |v, _| Some(v.wrapping_neg()),
        "stablehlo.abs" => |v, _| Some(v.wrapping_abs()),
        "stablehlo.sign" => |v, k| {
            Some(if k.unsigned {
                (v != 0) as i64
            } else {
                v.signum()
            })
        },
        "stablehlo.not" => |v, k| Some(if k.width == 1 { (v == 0) as i64 } else { !v }),
        _ => return None,
    })
}

fn binary(name: &str) -> Option<Binary> {
    Some(match name {
        "stablehlo.add" => |a, b, _| Some(a.wrapping_add(b)),
        "stablehlo.subtract" => |a, b, _| Some(a.wrapping_sub(b)),
        "stablehlo.multiply" => |a, b, _| Some(a.wrapping_mul(b)),
        "stablehlo.divide" => |a, b, k| {
            if b == 0 {
                None
            } else if k.unsigned {
                Some(((a as u64) / (b as u64)) as i64)
            } else {
                Some(a.wrapping_div(b))
            }
        },
        "stablehlo.remainder" => |a, b, k| {
            if b == 0 {
                None
            } else if k.unsigned {
                Some(((a as u64) % (b as u64)) as i64)
            } else {
                Some(a.wrapping_rem(b))
            }
        },
        "stablehlo.maximum" => |a, b, k| {
            Some(if k.unsigned {
                (a as u64).max(b as u64) as i64
            } else {
                a.max(b)
            })
        },
        "stablehlo.minimum" => |a, b, k| {
            Some(if k.unsigned {
                (a as u64).min(b as u64) as i64
            } else {
                a.min(b)
            })
        },
        "stablehlo.and" => |a, b, _| Some(a & b),
        "stablehlo.or" => |a, b, _| Some(a | b),
        "stablehlo.xor" => |a, b, _| Some(a ^ b),
        _ => return None,
    })
}
