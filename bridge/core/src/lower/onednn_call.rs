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

use crate::dialects::common::i64_array;
use crate::ir::{Attribute, BlockId, NamedAttr, OpId, Type, TypeId, ValueDef, ValueId};
use crate::Module;
use smallvec::SmallVec;

/// The prefix every oneDNN thunk target shares.
pub const PREFIX: &str = "__onednn$";
/// oneDNN's forward convolution (`OneDnnConvolutionConfig`).
pub const CONVOLUTION: &str = "__onednn$convolution";
/// oneDNN's matrix product (`OneDnnMatMulConfig`).
pub const MATMUL: &str = "__onednn$matmul";
/// oneDNN's softmax (`OneDnnSoftmaxConfig`).
pub const SOFTMAX: &str = "__onednn$softmax";
/// The most dimensions a oneDNN memory descriptor has (`DNNL_MAX_NDIMS`).
/// The thunk creates its primitive when it runs, and a descriptor oneDNN
/// refuses there ends the process, so the rewrites never emit one beyond.
pub const MAX_RANK: usize = 12;

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

// IR helpers the oneDNN rewrites share.

/// For each value, the placed ops that use it.
pub fn use_lists(m: &Module) -> Vec<SmallVec<[OpId; 2]>> {
    let mut uses = vec![SmallVec::new(); m.values.len()];
    for (i, o) in m.ops.iter().enumerate() {
        if o.parent.is_none() {
            continue;
        }
        for &v in &o.operands {
            uses[v.index()].push(OpId(i as u32));
        }
    }
    uses
}

/// Dims and element type of a ranked static tensor value.
pub fn static_tensor(m: &Module, v: ValueId) -> Option<(SmallVec<[i64; 4]>, TypeId)> {
    match m.ty(m.value_type(v)) {
        Type::Tensor {
            dims,
            elem,
            encoding: None,
        } if dims.iter().all(|&d| d >= 0) => Some((dims.iter().copied().collect(), *elem)),
        _ => None,
    }
}

/// The static tensor type of `dims` and element type `elem`.
pub fn tensor_type(m: &mut Module, dims: &[i64], elem: TypeId) -> TypeId {
    m.intern_type(Type::Tensor {
        dims: dims.iter().copied().collect(),
        elem,
        encoding: None,
    })
}

/// The op defining `v`, if an op does.
pub fn def_op(m: &Module, v: ValueId) -> Option<OpId> {
    match m.value(v).def {
        ValueDef::OpResult { op, .. } => Some(op),
        _ => None,
    }
}

/// The value of a splat literal body (`0.000000e+00`, `0x00000000`).
pub fn splat_value(body: &str) -> Option<f64> {
    let b = body.trim();
    if let Some(hex) = b.strip_prefix("0x") {
        return (hex.len() == 8)
            .then(|| u32::from_str_radix(hex, 16).ok())
            .flatten()
            .map(|bits| f32::from_bits(bits) as f64);
    }
    b.parse::<f64>().ok()
}

/// Emits ops before `at` in its block.
pub struct Emitter {
    /// The block to insert into.
    pub block: BlockId,
    /// The op the new ops go before.
    pub at: OpId,
    /// Their location.
    pub loc: Option<crate::ir::LocId>,
}

impl Emitter {
    /// Inserts `name(operands)` of result type `ty` with `props`; its result.
    pub fn push(
        &self,
        m: &mut Module,
        name: &str,
        operands: &[ValueId],
        ty: TypeId,
        props: Vec<(&str, Attribute)>,
    ) -> ValueId {
        let op = m.add_op_named(name);
        let mut named: Vec<NamedAttr> = props
            .into_iter()
            .map(|(n, a)| NamedAttr {
                name: m.sym(n),
                value: m.add_attr(a),
            })
            .collect();
        named.sort_by(|a, b| m.str(a.name).cmp(m.str(b.name)));
        self.insert(m, op, operands, named, ty)
    }

    /// Places `op` (fresh from `add_op_named`) with `operands` and the
    /// already sorted `props`; its one result, of type `ty`.
    pub fn insert(
        &self,
        m: &mut Module,
        op: OpId,
        operands: &[ValueId],
        props: impl IntoIterator<Item = NamedAttr>,
        ty: TypeId,
    ) -> ValueId {
        m.op_mut(op).operands = SmallVec::from_slice(operands);
        m.op_mut(op).props = props.into_iter().collect();
        m.op_mut(op).loc = self.loc;
        let v = m.add_result(op, ty, None);
        self.place(m, op);
        v
    }

    /// Places the unplaced `op` (results and all) before `at`.
    pub fn place(&self, m: &mut Module, op: OpId) {
        m.op_mut(op).parent = Some(self.block);
        let ops = &mut m.blocks[self.block.index()].ops;
        let pos = ops
            .iter()
            .position(|&x| x == self.at)
            .expect("op in its block");
        ops.insert(pos, op);
    }

    /// A `stablehlo.constant` of literal `body` and type `ty`.
    pub fn constant(&self, m: &mut Module, body: String, ty: TypeId) -> ValueId {
        let value = Attribute::Dense {
            body: body.into(),
            ty,
        };
        self.push(m, "stablehlo.constant", &[], ty, vec![("value", value)])
    }

    /// `broadcast_in_dim` of the 0-d `c` to type `ty`.
    pub fn broadcast_scalar(&self, m: &mut Module, c: ValueId, ty: TypeId) -> ValueId {
        let dims = i64_array(m, vec![]);
        self.push(
            m,
            "stablehlo.broadcast_in_dim",
            &[c],
            ty,
            vec![("broadcast_dimensions", dims)],
        )
    }

    /// `stablehlo.slice` of `v` from `start` to `limit` (unit strides),
    /// of result type `ty`.
    pub fn slice(
        &self,
        m: &mut Module,
        v: ValueId,
        start: Vec<i64>,
        limit: Vec<i64>,
        ty: TypeId,
    ) -> ValueId {
        let strides = vec![1; start.len()];
        let props = vec![
            ("limit_indices", i64_array(m, limit)),
            ("start_indices", i64_array(m, start)),
            ("strides", i64_array(m, strides)),
        ];
        self.push(m, "stablehlo.slice", &[v], ty, props)
    }

    /// `name(a, b)` of result type `ty`.
    pub fn binary(
        &self,
        m: &mut Module,
        name: &str,
        a: ValueId,
        b: ValueId,
        ty: TypeId,
    ) -> ValueId {
        self.push(m, name, &[a, b], ty, vec![])
    }
}

/// The backend config's JSON (unescaped).
pub fn config_json(m: &Module, op: OpId) -> Option<serde_json::Value> {
    let a = m.op_attr(op, "backend_config")?;
    let Attribute::String { escaped, .. } = m.attr(a) else {
        return None;
    };
    serde_json::from_str(&escaped.replace("\\\"", "\"")).ok()
}

/// Whether `op` is a `stablehlo.custom_call` to `target`.
pub fn is_call_to(m: &Module, op: OpId, target: &str) -> bool {
    m.op_name(op) == "stablehlo.custom_call"
        && m.op_attr(op, "call_target_name").is_some_and(
            |a| matches!(m.attr(a), Attribute::String { escaped, .. } if escaped.as_str() == target),
        )
}
