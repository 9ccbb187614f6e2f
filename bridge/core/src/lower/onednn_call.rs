//! What every oneDNN custom call the host lowering writes shares: the
//! targets of the CPU plugin's oneDNN thunk, and the call's properties
//! (`api_version = 1`, the JSON `backend_config` the thunk reads its config
//! from, and pinned `operand_layouts` / `result_layouts`).
//!
//! The official XLA CPU plugin links oneDNN and a thunk that runs
//! `__onednn$convolution`, `__onednn$matmul` and `__onednn$softmax` custom
//! calls, but not the XLA passes that would write them; the convolution
//! rewrite (`host_conv::onednn`) and the product rewrite (`host_gemm`)
//! write them instead. The plugin cannot serialize a program holding one
//! (`pjrt-client`'s `Executable::serialize` refuses on [`PREFIX`]).

use crate::ir::{Attribute, NamedAttr, Type};
use crate::Module;
use smallvec::SmallVec;

/// The prefix every oneDNN thunk target shares.
pub const PREFIX: &str = "__onednn$";
/// oneDNN's forward convolution (`OneDnnConvolutionConfig`).
pub const CONVOLUTION: &str = "__onednn$convolution";
/// oneDNN's matrix product (`OneDnnMatMulConfig`).
pub const MATMUL: &str = "__onednn$matmul";

/// `[dense<[...]> : tensor<Nxindex>, ...]`: minor-to-major dimension lists.
pub fn layout_list(m: &mut Module, layouts: &[Vec<i64>]) -> Attribute {
    let index = m.intern_type(Type::Index);
    let items = layouts
        .iter()
        .map(|l| {
            let ty = m.intern_type(Type::Tensor {
                dims: SmallVec::from_slice(&[l.len() as i64]),
                elem: index,
                encoding: None,
            });
            let items: Vec<String> = l.iter().map(|x| x.to_string()).collect();
            m.add_attr(Attribute::Dense {
                body: format!("[{}]", items.join(", ")).into(),
                ty,
            })
        })
        .collect();
    Attribute::Array(items)
}

/// The row-major layout (minor-to-major) of a rank-`rank` array.
pub fn row_major(rank: usize) -> Vec<i64> {
    (0..rank as i64).rev().collect()
}

/// Pinned layouts of one call: one per operand, one per result.
pub struct PinnedLayouts<'a> {
    pub operands: &'a [Vec<i64>],
    pub results: &'a [Vec<i64>],
}

/// The properties of a oneDNN call to `target` with backend config `json`
/// (no backslashes in it; its quotes are escaped here) and, if given,
/// pinned layouts; in MLIR's (alphabetical) property order.
pub fn call_props(
    m: &mut Module,
    target: &str,
    json: &str,
    layouts: Option<PinnedLayouts<'_>>,
) -> SmallVec<[NamedAttr; 6]> {
    debug_assert!(target.starts_with(PREFIX) && !json.contains('\\'));
    let i32t = m.int_type(32);
    let mut props = vec![
        (
            "api_version",
            Attribute::Integer {
                text: "1".into(),
                ty: Some(i32t),
            },
        ),
        (
            "backend_config",
            Attribute::String {
                escaped: json.replace('"', "\\\"").into(),
                ty: None,
            },
        ),
        (
            "call_target_name",
            Attribute::String {
                escaped: target.into(),
                ty: None,
            },
        ),
    ];
    if let Some(l) = layouts {
        let operands = layout_list(m, l.operands);
        let results = layout_list(m, l.results);
        props.push(("operand_layouts", operands));
        props.push(("result_layouts", results));
    }
    props
        .into_iter()
        .map(|(name, value)| NamedAttr {
            name: m.sym(name),
            value: m.add_attr(value),
        })
        .collect()
}
