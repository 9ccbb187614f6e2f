//! The weight gradient of a 1×1 convolution (stride 1, no padding) as
//! batched matrix products.
//!
//! In StableHLO that gradient is a convolution whose window is the output
//! gradient's whole map and whose result is 1×1 (`[f, b, 0, 1]x[i, o, 0,
//! 1]->[0, 1, b, f]`: the input's batch dimension is the convolution's
//! feature dimension). XLA runs it slowly at large maps (it transposes
//! both operands to contract batch and positions together). With `N` the
//! images, `C` the input and `O` the output channels, this rewrite emits
//!
//! ```text
//! %p = stablehlo.dot_general %x, %dy, batching_dims = [N] x [N],
//!        contracting_dims = [spatial] x [spatial]      // [N, C, O]
//! %s = stablehlo.dot_general %ones, %p, contracting_dims = [0] x [0]   // [C, O]
//! %r = stablehlo.reshape %s                           // the result's shape
//! ```
//!
//! (per image a product over the contiguous positions, then the sum over
//! images as a product with ones: exact products, the same additions).
//! Taken from [`MIN_POSITIONS`] positions per image (28² maps and up): same
//! process against XLA's convolution, batch 8 at load ≈ 10, 2.5–3.7× faster
//! at 56² and 28² maps, 3.5× slower at 7² (the `[N, C, O]` partial products
//! cost as much as the work there). docs/host_conv.md.

use crate::ir::{Attribute, NamedAttr, OpId, Type, ValueId};
use crate::Module;
use smallvec::SmallVec;

/// Fewest positions per image for the rewrite.
pub(super) const MIN_POSITIONS: i64 = 784;

/// What [`apply`] needs: operand dimension indices and sizes.
pub(super) struct WeightGradDot {
    /// Lhs (input) dimension holding the images (the convolution's feature).
    lhs_images: usize,
    /// Rhs (output gradient) dimension holding the images.
    rhs_images: usize,
    lhs_spatial: Vec<usize>,
    rhs_spatial: Vec<usize>,
    images: i64,
    /// Lhs batch size (input channels) and rhs output features.
    c: i64,
    o: i64,
}

/// The rewrite if the convolution is a 1×1 weight gradient it takes
/// (dimension indices as in `read_conv_dims`).
#[allow(clippy::too_many_arguments)]
pub(super) fn take(
    l: &[usize],
    r: &[usize],
    y: &[usize],
    ld: &[i64],
    rd: &[i64],
    od: &[i64],
    plain: bool,
) -> Option<WeightGradDot> {
    let nsp = l.len() - 2;
    // The result's batch before its feature: a reshape keeps the order.
    if !plain || y[0] > y[1] || (0..nsp).any(|i| od[y[2 + i]] != 1) {
        return None;
    }
    if (0..nsp).any(|i| rd[r[2 + i]] != ld[l[2 + i]]) {
        return None;
    }
    let positions: i64 = (0..nsp).map(|i| ld[l[2 + i]]).product();
    if positions < MIN_POSITIONS || ld[l[1]] != rd[r[0]] {
        return None;
    }
    Some(WeightGradDot {
        lhs_images: l[1],
        rhs_images: r[0],
        lhs_spatial: l[2..].to_vec(),
        rhs_spatial: r[2..].to_vec(),
        images: ld[l[1]],
        c: ld[l[0]],
        o: rd[r[1]],
    })
}

fn list(v: &[usize]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

/// A `stablehlo.dot_general` of `a` and `b` with these dimension numbers
/// and result type, placed at `pos` in `op`'s block.
fn dot(
    m: &mut Module,
    at: OpId,
    pos: usize,
    a: ValueId,
    b: ValueId,
    dims: String,
    ty: crate::ir::TypeId,
) -> ValueId {
    let block = m.op(at).parent.expect("classified ops are placed");
    let d = m.add_op_named("stablehlo.dot_general");
    let name = m.sym("dot_dimension_numbers");
    let value = m.add_attr(Attribute::Opaque(dims.into()));
    let loc = m.op(at).loc;
    let o = m.op_mut(d);
    o.operands = SmallVec::from_slice(&[a, b]);
    o.props = SmallVec::from_slice(&[NamedAttr { name, value }]);
    o.loc = loc;
    o.parent = Some(block);
    let v = m.add_result(d, ty, None);
    m.blocks[block.index()].ops.insert(pos, d);
    v
}

/// Rewrites convolution `op` (module docs).
pub(super) fn apply(m: &mut Module, op: OpId, w: &WeightGradDot) {
    let block = m.op(op).parent.expect("classified ops are placed");
    let loc = m.op(op).loc;
    let Type::Tensor { elem, .. } = m.ty(m.value_type(m.op(op).results[0])).clone() else {
        unreachable!("classified convolutions have ranked tensor results")
    };
    let tensor = |m: &mut Module, dims: &[i64]| {
        m.intern_type(Type::Tensor {
            dims: SmallVec::from_slice(dims),
            elem,
            encoding: None,
        })
    };
    let partial_ty = tensor(m, &[w.images, w.c, w.o]);
    let sum_ty = tensor(m, &[w.c, w.o]);
    let ones_ty = tensor(m, &[w.images]);
    let (x, dy) = (m.op(op).operands[0], m.op(op).operands[1]);
    let pos = m.blocks[block.index()]
        .ops
        .iter()
        .position(|&x| x == op)
        .expect("op in its block");
    let partial = dot(
        m,
        op,
        pos,
        x,
        dy,
        format!(
            "stablehlo.dot<lhs_batching_dimensions = [{}], rhs_batching_dimensions = [{}], lhs_contracting_dimensions = {}, rhs_contracting_dimensions = {}>",
            w.lhs_images,
            w.rhs_images,
            list(&w.lhs_spatial),
            list(&w.rhs_spatial)
        ),
        partial_ty,
    );
    let ones_value = m.add_attr(Attribute::Dense {
        body: "1.000000e+00".into(),
        ty: ones_ty,
    });
    let ones = m.add_op_named("stablehlo.constant");
    let value = m.sym("value");
    m.op_mut(ones).props = SmallVec::from_slice(&[NamedAttr {
        name: value,
        value: ones_value,
    }]);
    m.op_mut(ones).loc = loc;
    m.op_mut(ones).parent = Some(block);
    let ones_v = m.add_result(ones, ones_ty, None);
    m.blocks[block.index()].ops.insert(pos + 1, ones);
    let sum = dot(
        m,
        op,
        pos + 2,
        ones_v,
        partial,
        "stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>".into(),
        sum_ty,
    );
    let reshape = m.sym("stablehlo.reshape");
    let o = m.op_mut(op);
    o.name = reshape;
    o.operands = SmallVec::from_slice(&[sum]);
    o.props = SmallVec::new();
    o.attrs.clear();
}
