//! Folds the transposes and reversals around a host convolution call into
//! its config, so that XLA copies nothing before or after the call.
//!
//! - **The result.** A weight gradient comes out of the convolution as
//!   `[kh, kw, I, O]` (torch_xla's `[0, 1, b, f]` result dims) and is then
//!   transposed to the parameter's `[O, I, kh, kw]`. XLA fused that
//!   transpose into every consumer (AdamW's moment and parameter updates),
//!   each reading the call's result with a stride of a whole `I·O` plane:
//!   a ResNet-50 step spent about 5% of its time there. When the call's
//!   only use is a `stablehlo.transpose`, the call writes the transposed
//!   result itself: the permutation moves into the result dims (the kernel
//!   writes any layout).
//! - **The rhs.** An input gradient's kernel arrives as
//!   `reverse(transpose(W))`. With [`peel_rhs`], the call reads `W`
//!   itself: a transpose moves into the rhs dims, a reversal of spatial
//!   dims into the window reversal. oneDNN's backward-data convolution
//!   then takes `W` as it is (the mapping had reversed XLA's reversed copy
//!   back; `pjrt-client`'s `host_kernels/conv/onednn_data.rs`).

use super::ConvConfig;
use crate::dialects::common::get_i64_array;
use crate::ir::{OpId, ValueDef, ValueId};
use crate::Module;
use smallvec::SmallVec;

/// The `stablehlo.transpose` that is the only use of `op`'s result (of
/// rank `n`), in `op`'s block, and its permutation.
pub(super) fn result_transpose(
    m: &Module,
    op: OpId,
    n: usize,
    uses: &[SmallVec<[OpId; 2]>],
) -> Option<(OpId, Vec<usize>)> {
    let v = *m.op(op).results.first()?;
    let [user] = uses[v.index()].as_slice() else {
        return None;
    };
    if m.op_name(*user) != "stablehlo.transpose" || m.op(*user).parent != m.op(op).parent {
        return None;
    }
    let perm = permutation(m, *user, n)?;
    Some((*user, perm))
}

/// Moves a transpose of the result by `perm` into `cfg`'s result dims:
/// a role at result dim `d` ends at the position `i` with `perm[i] = d`.
pub(super) fn fold_result(cfg: &mut ConvConfig, perm: &[usize]) {
    let mut inverse = vec![0; perm.len()];
    for (i, &d) in perm.iter().enumerate() {
        inverse[d] = i;
    }
    for d in &mut cfg.out {
        *d = inverse[*d];
    }
}

/// Peels the `stablehlo.transpose` and `stablehlo.reverse` ops (of spatial
/// dims only) that produce `rhs` into `cfg`'s rhs dims and window
/// reversal; returns the value the call reads instead.
pub(super) fn peel_rhs(m: &Module, mut rhs: ValueId, cfg: &mut ConvConfig) -> ValueId {
    loop {
        let ValueDef::OpResult { op, .. } = m.value(rhs).def else {
            return rhs;
        };
        let o = m.op(op);
        if o.operands.len() != 1 || o.results.len() != 1 {
            return rhs;
        }
        let n = cfg.rhs.len();
        match m.op_name(op) {
            "stablehlo.transpose" => {
                let Some(perm) = permutation(m, op, n) else {
                    return rhs;
                };
                // Rhs dim `i` is the operand's dim `perm[i]`.
                for d in &mut cfg.rhs {
                    *d = perm[*d];
                }
            }
            "stablehlo.reverse" => {
                let Some(dims) = m
                    .op_attr(op, "dimensions")
                    .and_then(|a| get_i64_array(m, a))
                else {
                    return rhs;
                };
                let spatial: Option<Vec<usize>> = dims
                    .iter()
                    .map(|&d| cfg.rhs[2..].iter().position(|&r| r as i64 == d))
                    .collect();
                let Some(spatial) = spatial else {
                    return rhs;
                };
                for s in spatial {
                    cfg.reverse[s] = !cfg.reverse[s];
                }
            }
            _ => return rhs,
        }
        rhs = o.operands[0];
    }
}

/// A transpose's permutation, checked to be one of `0..n`.
fn permutation(m: &Module, op: OpId, n: usize) -> Option<Vec<usize>> {
    let perm = get_i64_array(m, m.op_attr(op, "permutation")?)?;
    let mut seen = vec![false; n];
    let mut out = Vec::with_capacity(n);
    for &p in perm {
        let p = usize::try_from(p).ok().filter(|&p| p < n)?;
        if std::mem::replace(&mut seen[p], true) {
            return None;
        }
        out.push(p);
    }
    (out.len() == n).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::super::wgrad_host::tests::routed_text;
    use super::super::{ConvConfig, WeightGradRoute};

    /// A training program's convolutions at ResNet-50's 3×3 128@28 (batch
    /// 8) as torch_xla spells them: the forward, the weight gradient and
    /// its transpose to `[O, I, kh, kw]`, and the input gradient of the
    /// stride-2 forward over `reverse(transpose(w))`.
    const TRAINING: &str = r#"func.func public @main(%x: tensor<8x128x56x56xf32>, %w: tensor<128x128x3x3xf32>, %dy: tensor<8x128x28x28xf32>) -> (tensor<8x128x28x28xf32>, tensor<128x128x3x3xf32>, tensor<8x128x56x56xf32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x128x56x56xf32>, tensor<128x128x3x3xf32>) -> tensor<8x128x28x28xf32>
  %1 = stablehlo.convolution(%x, %dy) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f], window = {stride = [1, 1], pad = [[1, 0], [1, 0]], lhs_dilate = [1, 1], rhs_dilate = [2, 2], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x128x56x56xf32>, tensor<8x128x28x28xf32>) -> tensor<3x3x128x128xf32>
  %2 = stablehlo.transpose %1, dims = [3, 2, 0, 1] : (tensor<3x3x128x128xf32>) -> tensor<128x128x3x3xf32>
  %3 = stablehlo.transpose %w, dims = [2, 3, 1, 0] : (tensor<128x128x3x3xf32>) -> tensor<3x3x128x128xf32>
  %4 = stablehlo.reverse %3, dims = [0, 1] : tensor<3x3x128x128xf32>
  %5 = stablehlo.convolution(%dy, %4) dim_numbers = [b, f, 0, 1]x[0, 1, o, i]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 2], [1, 2]], lhs_dilate = [2, 2], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x128x28x28xf32>, tensor<3x3x128x128xf32>) -> tensor<8x128x56x56xf32>
  return %0, %2, %5 : tensor<8x128x28x28xf32>, tensor<128x128x3x3xf32>, tensor<8x128x56x56xf32>
}"#;

    /// Each host call's operand names and decoded config, in order.
    fn calls(out: &str) -> Vec<(String, ConvConfig)> {
        out.lines()
            .filter(|l| l.contains("@hlobridge_conv("))
            .map(|l| {
                let args = l.split("@hlobridge_conv(").nth(1).unwrap();
                let args = args.split(')').next().unwrap().to_string();
                let cfg_name = args.rsplit(", ").next().unwrap().to_string();
                let def = out
                    .lines()
                    .find(|d| d.trim_start().starts_with(&format!("{cfg_name} = ")))
                    .expect("config constant");
                let body = def
                    .split("dense<")
                    .nth(1)
                    .unwrap()
                    .split('>')
                    .next()
                    .unwrap();
                let v: Vec<i64> = body
                    .trim_matches(['[', ']'])
                    .split(',')
                    .map(|t| t.trim().parse().unwrap())
                    .collect();
                (args, ConvConfig::decode(&v).expect("config decodes"))
            })
            .collect()
    }

    #[test]
    fn training_calls_write_and_read_the_parameters_layout() {
        let out = routed_text(TRAINING, WeightGradRoute::OneDnn);
        assert!(!out.contains("stablehlo.convolution"), "{out}");
        assert_eq!(out.matches("stablehlo.transpose").count(), 1, "{out}");
        let c = calls(&out);
        assert_eq!(c.len(), 3, "{out}");
        // The weight gradient writes `[O, I, kh, kw]`: `f` at 0, `b` at 1,
        // and its result is the returned value.
        assert_eq!(c[1].1.out, vec![1, 0, 2, 3], "{out}");
        assert!(
            out.lines().any(|l| l.contains("@hlobridge_conv(")
                && l.contains("-> tensor<128x128x3x3xf32>")),
            "{out}"
        );
        // The input gradient reads `%w` itself, its window reversed: the
        // rhs input feature (the forward's O) is dim 0, its output feature
        // (the forward's I) dim 1.
        assert!(c[2].0.contains("%w") || c[2].0.contains("%arg1"), "{out}");
        assert_eq!(c[2].1.rhs, vec![0, 1, 2, 3], "{out}");
        assert_eq!(c[2].1.reverse, vec![true, true], "{out}");
    }

    #[test]
    fn outside_training_on_the_library_the_rhs_is_not_peeled() {
        let out = routed_text(TRAINING, WeightGradRoute::OneDnnGradients);
        let c = calls(&out);
        // The gradients on the host kernel; the reversal stays XLA's.
        assert_eq!(c.len(), 2, "{out}");
        assert!(out.contains("stablehlo.reverse"), "{out}");
        assert_eq!(c[1].1.reverse, vec![false, false], "{out}");
        // The weight gradient's transpose still folds.
        assert_eq!(c[0].1.out, vec![1, 0, 2, 3], "{out}");
    }
}
