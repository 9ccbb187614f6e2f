//! Shape inference for the static StableHLO ops: the dimensions each result
//! has, given its operands' (now refined) types and the op's attributes.
//! [`infer`] answers per result, with [`DYNAMIC`] where an op does not
//! determine a dimension; the driver merges that with the declared type.

use super::attr_text::{field_int, field_list, i64s, int, opaque, pairs};
use crate::ir::{Module, OpId, Type, ValueId, DYNAMIC};

type Dims = Vec<i64>;

/// Dimensions of a ranked tensor value.
pub fn dims_of(m: &Module, v: ValueId) -> Option<Dims> {
    match m.ty(m.value_type(v)) {
        Type::Tensor { dims, .. } => Some(dims.to_vec()),
        _ => None,
    }
}

/// Ops whose result has the shape of their (same-rank) operands.
const ELEMENTWISE: &[&str] = &[
    "abs",
    "add",
    "and",
    "atan2",
    "cbrt",
    "ceil",
    "clamp",
    "compare",
    "complex",
    "convert",
    "cosine",
    "count_leading_zeros",
    "divide",
    "exponential",
    "exponential_minus_one",
    "floor",
    "imag",
    "is_finite",
    "log",
    "log_plus_one",
    "logistic",
    "maximum",
    "minimum",
    "multiply",
    "negate",
    "not",
    "or",
    "popcnt",
    "power",
    "real",
    "reduce_precision",
    "remainder",
    "round_nearest_afz",
    "round_nearest_even",
    "rsqrt",
    "select",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "sign",
    "sine",
    "sqrt",
    "subtract",
    "tan",
    "tanh",
    "xor",
    "uniform_quantize",
    "uniform_dequantize",
    "reverse",
    "cholesky",
];

/// CHLO ops that are not elementwise (everything else in `chlo.` with one
/// operand is).
const CHLO_OTHER: &[&str] = &["top_k", "constant_like", "constant", "ragged_dot", "scan"];

fn join(a: &mut Dims, b: &[i64]) {
    for (x, &y) in a.iter_mut().zip(b) {
        if *x == DYNAMIC {
            *x = y;
        }
    }
}

/// The result dimensions of `op` (one entry per result), or `None` when the
/// op is not modelled (its declared result types stand).
pub fn infer(m: &Module, op: OpId) -> Option<Vec<Dims>> {
    let o = m.op(op);
    let full = m.op_name(op);
    let declared: Vec<Dims> = o
        .results
        .iter()
        .map(|&r| dims_of(m, r).unwrap_or_default())
        .collect();
    let (dialect, name) = full.split_once('.')?;
    let elementwise = (dialect == "stablehlo" && ELEMENTWISE.contains(&name))
        || (dialect == "chlo" && !CHLO_OTHER.contains(&name) && !name.starts_with("broadcast_"));
    if elementwise {
        let mut out = vec![DYNAMIC; declared.first()?.len()];
        for &v in &o.operands {
            if let Some(d) = dims_of(m, v) {
                if d.len() == out.len() {
                    join(&mut out, &d);
                }
            }
        }
        return Some(vec![out]);
    }
    infer_other(m, op)
}

/// For an elementwise op: the first dimension in which two same-rank
/// operands have different static sizes, `(dim, a, b)`.
pub fn operand_conflict(m: &Module, op: OpId) -> Option<(usize, i64, i64)> {
    let o = m.op(op);
    let (dialect, name) = m.op_name(op).split_once('.')?;
    if !(dialect == "stablehlo" && ELEMENTWISE.contains(&name)) || name == "reverse" {
        return None;
    }
    let rank = dims_of(m, *o.results.first()?)?.len();
    let mut seen: Vec<i64> = vec![DYNAMIC; rank];
    for &v in &o.operands {
        let d = dims_of(m, v)?;
        if d.len() != rank {
            continue;
        }
        for (k, (s, &x)) in seen.iter_mut().zip(&d).enumerate() {
            if x == DYNAMIC {
                continue;
            }
            if *s != DYNAMIC && *s != x {
                return Some((k, *s, x));
            }
            *s = x;
        }
    }
    None
}

fn infer_other(m: &Module, op: OpId) -> Option<Vec<Dims>> {
    let o = m.op(op);
    let full = m.op_name(op);
    let declared: Vec<Dims> = o
        .results
        .iter()
        .map(|&r| dims_of(m, r).unwrap_or_default())
        .collect();
    let operand = |i: usize| o.operands.get(i).and_then(|&v| dims_of(m, v));
    let (dialect, name) = full.split_once('.')?;
    if dialect != "stablehlo" {
        return None;
    }
    let one = |d: Dims| Some(vec![d]);
    match name {
        "bitcast_convert" => {
            let a = operand(0)?;
            let mut out = declared.first()?.clone();
            let k = out.len().min(a.len());
            out[..k].copy_from_slice(&a[..k]);
            one(out)
        }
        "optimization_barrier" => o.operands.iter().map(|&v| dims_of(m, v)).collect(),
        "broadcast_in_dim" => {
            let a = operand(0)?;
            let bd = i64s(m, op, "broadcast_dimensions")?;
            let mut out = declared.first()?.clone();
            for (j, &r) in bd.iter().enumerate() {
                let d = *a.get(j)?;
                if d != 1 && d != DYNAMIC {
                    *out.get_mut(r as usize)? = d;
                }
            }
            one(out)
        }
        "reshape" => {
            let a = operand(0)?;
            let mut out = declared.first()?.clone();
            let unknown: Vec<usize> = (0..out.len()).filter(|&i| out[i] == DYNAMIC).collect();
            if unknown.len() == 1 && a.iter().all(|&d| d >= 0) {
                let total: i64 = a.iter().product();
                let rest: i64 = out.iter().filter(|&&d| d != DYNAMIC).product();
                if rest > 0 && total % rest == 0 {
                    out[unknown[0]] = total / rest;
                }
            }
            one(out)
        }
        "concatenate" => {
            let axis = int(m, op, "dimension")? as usize;
            let mut out = declared.first()?.clone();
            let mut sum = 0i64;
            for &v in &o.operands {
                let d = dims_of(m, v)?;
                if d.len() != out.len() || axis >= d.len() {
                    return None;
                }
                let ax = out[axis];
                join(&mut out, &d);
                out[axis] = ax;
                sum = if d[axis] == DYNAMIC || sum == DYNAMIC {
                    DYNAMIC
                } else {
                    sum + d[axis]
                };
            }
            out[axis] = sum;
            one(out)
        }
        "transpose" => {
            let a = operand(0)?;
            let perm = i64s(m, op, "permutation")?;
            one(perm
                .iter()
                .map(|&p| a.get(p as usize).copied())
                .collect::<Option<_>>()?)
        }
        "reduce" => {
            let n = o.operands.len() / 2;
            let red = i64s(m, op, "dimensions")?;
            (0..n)
                .map(|i| {
                    let a = operand(i)?;
                    Some(
                        (0..a.len())
                            .filter(|j| !red.contains(&(*j as i64)))
                            .map(|j| a[j])
                            .collect(),
                    )
                })
                .collect()
        }
        "dot_general" => {
            let (l, r) = (operand(0)?, operand(1)?);
            let text = opaque(m, op, "dot_dimension_numbers")?;
            let lb = field_list(text, "lhs_batching_dimensions")?;
            let rb = field_list(text, "rhs_batching_dimensions")?;
            let lc = field_list(text, "lhs_contracting_dimensions")?;
            let rc = field_list(text, "rhs_contracting_dimensions")?;
            let mut out: Dims = lb
                .iter()
                .map(|&i| l.get(i as usize).copied())
                .collect::<Option<_>>()?;
            for (i, &d) in l.iter().enumerate() {
                if !lb.contains(&(i as i64)) && !lc.contains(&(i as i64)) {
                    out.push(d);
                }
            }
            for (i, &d) in r.iter().enumerate() {
                if !rb.contains(&(i as i64)) && !rc.contains(&(i as i64)) {
                    out.push(d);
                }
            }
            one(out)
        }
        "dot" => {
            let (l, r) = (operand(0)?, operand(1)?);
            one(match (l.len(), r.len()) {
                (1, 1) => vec![],
                (2, 1) => vec![l[0]],
                (1, 2) => vec![r[1]],
                (2, 2) => vec![l[0], r[1]],
                _ => return None,
            })
        }
        "gather" => {
            let idx = operand(1)?;
            let text = opaque(m, op, "dimension_numbers")?;
            let sizes = i64s(m, op, "slice_sizes")?;
            one(gather_dims(text, &idx, &sizes)?)
        }
        "scatter" => {
            let n = (o.operands.len().saturating_sub(1)) / 2;
            (0..n).map(operand).collect()
        }
        "sort" => o.operands.iter().map(|&v| dims_of(m, v)).collect(),
        "select_and_scatter" | "dynamic_update_slice" => one(operand(0)?),
        "triangular_solve" => one(operand(1)?),
        "pad" => {
            let a = operand(0)?;
            let lo = i64s(m, op, "edge_padding_low")?;
            let hi = i64s(m, op, "edge_padding_high")?;
            let inner = i64s(m, op, "interior_padding")?;
            one(pad_dims(&a, &lo, &hi, &inner)?)
        }
        "slice" => {
            let a = operand(0)?;
            let start = i64s(m, op, "start_indices")?;
            let limit = i64s(m, op, "limit_indices")?;
            let step = i64s(m, op, "strides")?;
            one(slice_dims(&a, &start, &limit, &step)?)
        }
        "reduce_window" => {
            let n = o.operands.len() / 2;
            let wd = i64s(m, op, "window_dimensions")?;
            let r = wd.len();
            let st = i64s(m, op, "window_strides").unwrap_or_else(|| vec![1; r]);
            let bd = i64s(m, op, "base_dilations").unwrap_or_else(|| vec![1; r]);
            let wdl = i64s(m, op, "window_dilations").unwrap_or_else(|| vec![1; r]);
            let pad = match m.op_attr(op, "padding") {
                Some(_) => pairs(m, op, "padding")?,
                None => vec![(0, 0); r],
            };
            (0..n)
                .map(|i| {
                    let a = operand(i)?;
                    (0..a.len())
                        .map(|j| {
                            window_out(
                                a[j],
                                *wd.get(j)?,
                                *st.get(j)?,
                                *bd.get(j)?,
                                *wdl.get(j)?,
                                *pad.get(j)?,
                            )
                        })
                        .collect()
                })
                .collect()
        }
        "convolution" => {
            let (l, k) = (operand(0)?, operand(1)?);
            let [ld, kd, od] =
                crate::lower::host_conv::read_conv_dims(opaque(m, op, "dimension_numbers")?)?;
            let nsp = ld.len() - 2;
            let st = i64s(m, op, "window_strides").unwrap_or_else(|| vec![1; nsp]);
            let lhs_dil = i64s(m, op, "lhs_dilation").unwrap_or_else(|| vec![1; nsp]);
            let rhs_dil = i64s(m, op, "rhs_dilation").unwrap_or_else(|| vec![1; nsp]);
            let pad = match m.op_attr(op, "padding") {
                Some(_) => pairs(m, op, "padding")?,
                None => vec![(0, 0); nsp],
            };
            // Per-spatial-dimension lists of another length make the op
            // invalid (jaxlib refuses it too): no inference, so refinement
            // stops here with a named error.
            if [&st, &lhs_dil, &rhs_dil].iter().any(|v| v.len() != nsp) || pad.len() != nsp {
                return None;
            }
            let bgc = int(m, op, "batch_group_count").unwrap_or(1).max(1);
            let mut out = vec![DYNAMIC; ld.len()];
            let b = *l.get(ld[0])?;
            out[od[0]] = if b == DYNAMIC { b } else { b / bgc };
            out[od[1]] = *k.get(kd[1])?;
            for s in 0..nsp {
                out[od[2 + s]] = window_out(
                    *l.get(ld[2 + s])?,
                    *k.get(kd[2 + s])?,
                    *st.get(s)?,
                    *lhs_dil.get(s)?,
                    *rhs_dil.get(s)?,
                    *pad.get(s)?,
                )?;
            }
            one(out)
        }
        _ => None,
    }
}

/// Output size of a window op along one dimension.
fn window_out(
    d: i64,
    w: i64,
    stride: i64,
    base: i64,
    wdil: i64,
    (lo, hi): (i64, i64),
) -> Option<i64> {
    if d == DYNAMIC || w == DYNAMIC {
        return Some(DYNAMIC);
    }
    if stride <= 0 {
        return None;
    }
    let padded = if d == 0 { 0 } else { (d - 1) * base + 1 } + lo + hi;
    let win = if w == 0 { 0 } else { (w - 1) * wdil + 1 };
    Some(if padded < win {
        0
    } else {
        (padded - win) / stride + 1
    })
}

/// Result dims of `pad`.
pub fn pad_dims(a: &[i64], lo: &[i64], hi: &[i64], inner: &[i64]) -> Option<Dims> {
    (0..a.len())
        .map(|i| {
            let d = a[i];
            if d == DYNAMIC {
                return Some(DYNAMIC);
            }
            let (l, h, n) = (*lo.get(i)?, *hi.get(i)?, *inner.get(i)?);
            Some(l + h + d + (d - 1).max(0) * n)
        })
        .collect()
}

/// Result dims of `slice`.
pub fn slice_dims(a: &[i64], start: &[i64], limit: &[i64], step: &[i64]) -> Option<Dims> {
    (0..a.len())
        .map(|i| {
            let (s, l, k) = (*start.get(i)?, *limit.get(i)?, *step.get(i)?);
            if k <= 0 {
                return None;
            }
            Some(((l - s).max(0) + k - 1) / k)
        })
        .collect()
}

/// Result dims of `gather` with dimension numbers `text`.
pub fn gather_dims(text: &str, idx: &[i64], sizes: &[i64]) -> Option<Dims> {
    let offset = field_list(text, "offset_dims")?;
    let collapsed = field_list(text, "collapsed_slice_dims")?;
    let obatch = field_list(text, "operand_batching_dims")?;
    let ivd = field_int(text, "index_vector_dim", 0)? as usize;
    let batch: Vec<i64> = (0..idx.len())
        .filter(|&i| i != ivd)
        .map(|i| idx[i])
        .collect();
    let offs: Vec<i64> = (0..sizes.len())
        .filter(|i| !collapsed.contains(&(*i as i64)) && !obatch.contains(&(*i as i64)))
        .map(|i| sizes[i])
        .collect();
    let rank = batch.len() + offset.len();
    let (mut b, mut f) = (batch.into_iter(), offs.into_iter());
    (0..rank)
        .map(|p| {
            if offset.contains(&(p as i64)) {
                f.next()
            } else {
                b.next()
            }
        })
        .collect()
}
