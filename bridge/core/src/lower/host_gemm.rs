//! Rewrites matrix products for the runtime's host GEMM kernels.
//!
//! On the CPU plugin, hlobridge registers `hlobridge_gemm_{n,t}{n,t}` as
//! XLA FFI custom calls (see `pjrt-client`'s `host_kernels`). This pass turns
//! every `stablehlo.dot_general` / `stablehlo.dot` that such a kernel can run
//! into `stablehlo.custom_call @hlobridge_gemm_xy(%lhs, %rhs) {api_version = 4}`:
//!
//! - f32, f64, bf16 or f16 operands and result of one element type, static
//!   shapes (bf16 and f16 are widened to f32 and the result rounded once,
//!   as XLA:CPU computes them);
//! - leading batch dimensions `[0, nb)` on both sides (in order); after
//!   them, each operand's contracting dims form one run of consecutive dims
//!   and its free dims the other, so that row-major storage makes it a
//!   matrix (`[B..., S, D] · [D, E]`, a torch `Linear` on a 3-D input, is
//!   `[B·S, D] · [D, E]`; grouped dims are merged with `stablehlo.reshape`,
//!   a bitcast for XLA). The letter `t` marks an operand whose contracting
//!   dims come first (the left one) or last (the right one), i.e. one
//!   stored transposed;
//! - no `algorithm` attribute (precision settings are met: the kernel
//!   computes in the operands' full precision);
//! - work `batch·m·n·k` inside [`HostGemmPolicy`]'s bounds: tiny and
//!   vector products stay with XLA's inline code, and large ones with XLA's
//!   multi-threaded dot, which wins once the product pays for waking its
//!   thread pool.
//!
//! A skinny product `x · Wᵀ` (a decode step's LM head: `x` of fewer than
//! `min_side` rows, `W` stored `[N, K]` with at least
//! [`HostGemmPolicy::skinny_from_weights`] elements; plain 2-D operands)
//! runs swapped, as `(W · xᵀ)ᵀ`: `hlobridge_gemm_nt(W, x)` then a
//! `stablehlo.transpose` of the small `[N, M]` result. XLA:CPU's dot runs
//! such a product at a fraction of memory speed (4–6× eager torch at
//! `[4, 768] · [50257, 768]ᵀ`), the kernel with `W` as its row operand at
//! eager's speed (README, "Real sizes").
//!
//! A `stablehlo.transpose` that only swaps an operand's two matrix
//! dimensions is folded into the call (the kernel reads the source with
//! swapped strides), as XLA folds it into its own dot; the transpose stays
//! for its other users, and XLA drops it when none are left.
//!
//! **oneDNN** ([`HostGemmPolicy::onednn_from_work`]): f32 products of at
//! least that work run in the CPU plugin's oneDNN matrix product instead
//! (`__onednn$matmul`, [`crate::lower::onednn_call`]), inside the host
//! kernel's window and above it: the same batch of row-major matrices,
//! with `transpose_a` / `transpose_b` in the call's config for operands
//! stored transposed, and row-major layouts pinned on its operands and
//! result (the thunk reads strides from the layouts, so this only keeps XLA
//! from choosing others). oneDNN's kernels use AVX-512 where the CPU has
//! it; XLA's dot and the host kernel reached 0.6–0.8× of eager torch's
//! MKL/oneDNN throughput on an Intel Xeon (docs/host_gemm.md).
//!
//! oneDNN runs a product whose right operand is stored `[K, N]` with `N`
//! of 2560–3072 at about half its speed on the same product with that
//! operand stored `[N, K]` (docs/host_gemm.md, "Orientation"), so such a
//! product is re-oriented ([`HostGemmPolicy::onednn_reorient_from_n`]):
//! swapped, as `(Bᵀ · Aᵀ)ᵀ` with a transpose of its result, when its left
//! operand is stored transposed (a weight gradient), else, with enough rows
//! to pay for slicing the operand, split into one call per block of 1024
//! of its columns, whose results are concatenated (oneDNN runs a block at
//! full speed).
//!
//! A bias add after such a call is folded into it afterwards
//! (`lower::onednn_bias`).
//!
//! The op keeps its location and discardable attributes, and its result
//! value (directly, or through the reshape after the call).

use crate::dialects::stablehlo_dot_conv::read_dot_dims;
use crate::ir::{Attribute, DenseArrayData, FloatKind, NamedAttr, OpId, Type, ValueDef, ValueId};
use crate::lower::onednn_call::{self, row_major, tensor_type, PinnedLayouts};
use crate::Module;
use smallvec::SmallVec;

/// Bump whenever the rewrite's output for a given input changes: it is part
/// of compile-cache keys (see `HostLowering::cache_tag`), so executables
/// compiled by an older rewrite are not served from a persistent cache.
pub const REWRITE_VERSION: u32 = 11;

/// Which products the rewrite takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostGemmPolicy {
    /// Smallest `batch·m·n·k` to rewrite.
    pub min_work: u64,
    /// Largest `batch·m·n·k` to rewrite.
    pub max_work: u64,
    /// Smallest `m` and `n` (a matrix-vector product stays with XLA).
    pub min_side: u64,
    /// Smallest `N·K` of a skinny `x · Wᵀ` (fewer than `min_side` rows)
    /// run swapped (see the module docs), whatever its work.
    pub skinny_from_weights: u64,
    /// Smallest `batch·m·n·k` of an f32 product (both sides at least
    /// `min_side`) sent to the plugin's oneDNN matrix product, inside the
    /// host kernel's window or above it; `None` sends none.
    pub onednn_from_work: Option<u64>,
    /// oneDNN products whose right operand is stored `[K, N]` (not
    /// transposed) with `N` at least this are re-oriented so that oneDNN
    /// reads a transposed right operand (see the module docs); `None`
    /// leaves every orientation as the program has it.
    pub onednn_reorient_from_n: Option<u64>,
}

impl Default for HostGemmPolicy {
    /// Measured on the xla-cpu-pjrt plugin (2-core VM; README "Performance",
    /// docs/bench.md):
    /// the kernel is 3–4× faster than the plugin's dot from 96³ to 128³,
    /// and with its row split over the cores it matches or beats the
    /// plugin's threaded dot up to 512³; beyond that XLA keeps the product.
    fn default() -> Self {
        HostGemmPolicy {
            min_work: 32 * 32 * 32,
            max_work: 512 * 512 * 512,
            min_side: 8,
            // GPT-2's and Llama's LM heads (38.6M and 24.6M elements);
            // smaller skinny products stay with XLA until measured.
            skinny_from_weights: 1 << 24,
            onednn_from_work: None,
            onednn_reorient_from_n: Some(ONEDNN_REORIENT_FROM_N),
        }
    }
}

impl HostGemmPolicy {
    /// Every eligible product, whatever its size.
    pub fn all() -> Self {
        HostGemmPolicy {
            min_work: 0,
            max_work: u64::MAX,
            min_side: 0,
            skinny_from_weights: 0,
            onednn_from_work: None,
            onednn_reorient_from_n: Some(ONEDNN_REORIENT_FROM_N),
        }
    }

    /// The same policy with the oneDNN route from `from_work` (`None`: off).
    pub fn with_onednn(self, from_work: Option<u64>) -> Self {
        HostGemmPolicy {
            onednn_from_work: from_work,
            ..self
        }
    }

    /// The same policy re-orienting oneDNN products from `from_n` (`None`:
    /// never).
    pub fn with_onednn_reorient(self, from_n: Option<u64>) -> Self {
        HostGemmPolicy {
            onednn_reorient_from_n: from_n,
            ..self
        }
    }
}

/// Default [`HostGemmPolicy::onednn_reorient_from_n`]: 2560. Measured on a
/// 2-core Intel Xeon (AVX-512; docs/host_gemm.md, "Orientation"): with the
/// right operand stored `[K, N]`, oneDNN's matrix product ran at 0.45–0.75×
/// of its speed on the same product with that operand stored `[N, K]` for
/// `N` of 2560 and 3072 (the MLP width of BERT-base, GPT-2 and ViT-B), and
/// within noise of it from 768 to 2304 and at 4096.
pub const ONEDNN_REORIENT_FROM_N: u64 = 2560;

/// What [`rewrite_host_gemm`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostGemmReport {
    /// Products turned into host GEMM calls.
    pub rewritten: usize,
    /// Products seen (`dot_general` and `dot`).
    pub products: usize,
    /// Of the rewritten, those sent to oneDNN's matrix product.
    pub onednn: usize,
    /// Of those, the ones whose bias add was folded into the call
    /// (`lower::onednn_bias`, run after this rewrite).
    pub bias_fused: usize,
}

pub use hlobridge_host_abi::gemm::target_name;

/// Rewrites every product `policy` admits (see module docs); returns counts.
pub fn rewrite_host_gemm(m: &mut Module, policy: &HostGemmPolicy) -> HostGemmReport {
    let mut report = HostGemmReport::default();
    let mut plan: Vec<(OpId, Gemm)> = Vec::new();
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        let name = m.op_name(op);
        if name != "stablehlo.dot_general" && name != "stablehlo.dot" {
            continue;
        }
        if m.op(op).parent.is_none() {
            continue; // not placed in any block (dead arena entry)
        }
        report.products += 1;
        if let Some(g) = classify(m, op, policy) {
            plan.push((op, g));
        }
    }
    if plan.is_empty() {
        return report;
    }
    let i32t = m.int_type(32);
    let i64t = m.int_type(64);
    let names = CallNames {
        transpose: m.sym("stablehlo.transpose"),
        concatenate: m.sym("stablehlo.concatenate"),
        permutation: m.sym("permutation"),
        swap: m.add_attr(Attribute::DenseArray {
            elem: i64t,
            data: DenseArrayData::Int(vec![1, 0]),
        }),
        custom_call: m.sym("stablehlo.custom_call"),
        reshape: m.sym("stablehlo.reshape"),
        api_version: m.sym("api_version"),
        call_target_name: m.sym("call_target_name"),
        api_value: m.add_attr(Attribute::Integer {
            text: "4".into(),
            ty: Some(i32t),
        }),
    };
    for (op, g) in plan {
        report.onednn += usize::from(g.onednn);
        apply(m, op, g, &names);
        report.rewritten += 1;
    }
    tracing::debug!(?report, "host GEMM rewrite");
    report
}

/// Static dims and float kind of a ranked tensor value without encoding.
fn tensor_of(m: &Module, v: ValueId) -> Option<(&[i64], FloatKind)> {
    match m.ty(m.value_type(v)) {
        Type::Tensor {
            dims,
            elem,
            encoding: None,
        } if dims.iter().all(|&d| d >= 0) => match m.ty(*elem) {
            Type::Float(
                k @ (FloatKind::F32 | FloatKind::F64 | FloatKind::BF16 | FloatKind::F16),
            ) => Some((dims.as_slice(), *k)),
            _ => None,
        },
        _ => None,
    }
}

/// One admitted product, as a batch of row-major matrix products: the
/// operands the call takes, whether each is stored transposed, and the
/// matrix shapes each side must be reshaped to (when its free or
/// contracting dims are groups of several dims, which row-major storage
/// lets us merge for free).
struct Gemm {
    operands: [ValueId; 2],
    lhs_t: bool,
    rhs_t: bool,
    /// `[B..., rows, cols]` of each operand, when it is not already that.
    reshape: [Option<Vec<i64>>; 2],
    /// `[B..., M, N]`, when the result has more than one free dim per side.
    result: Option<Vec<i64>>,
    /// The operands are swapped (`(W · xᵀ)ᵀ`, `(Bᵀ · Aᵀ)ᵀ`): the call
    /// yields `[B..., N, M]` and a transpose of its two matrix dims after it
    /// the result.
    swapped: bool,
    /// The product runs as one call per block of the right operand's
    /// columns (`[start, end)` of `N`), each on a `stablehlo.slice` of it,
    /// and a `stablehlo.concatenate` of their results; empty: one call.
    split_n: Vec<(i64, i64)>,
    /// The call is oneDNN's matrix product, not the host kernel.
    onednn: bool,
    elem: crate::ir::TypeId,
}

/// `v`'s source when `v` is a `stablehlo.transpose` swapping its last two
/// dims and keeping the leading ones in place.
fn swapped_matrix_source(m: &Module, v: ValueId) -> Option<ValueId> {
    let ValueDef::OpResult { op, .. } = m.value(v).def else {
        return None;
    };
    if m.op_name(op) != "stablehlo.transpose" || m.op(op).operands.len() != 1 {
        return None;
    }
    let Attribute::DenseArray {
        data: DenseArrayData::Int(perm),
        ..
    } = m.attr(m.op_attr(op, "permutation")?)
    else {
        return None;
    };
    let r = perm.len();
    let swap = r >= 2
        && perm[..r - 2]
            .iter()
            .enumerate()
            .all(|(i, &p)| p == i as i64)
        && perm[r - 2] == r as i64 - 1
        && perm[r - 1] == r as i64 - 2;
    swap.then(|| m.op(op).operands[0])
}

/// One operand's non-batch dims as a matrix: its free dims and its
/// contracting dims must each be a run of consecutive dims (in order), so
/// that row-major storage is a `[free, contracting]` or (transposed)
/// `[contracting, free]` matrix. Returns `(free size, transposed)`.
fn as_matrix(dims: &[i64], nb: usize, contracting: &[i64]) -> Option<(i64, bool)> {
    let r = dims.len();
    let c: Vec<usize> = contracting
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    if c.is_empty() || c.iter().any(|&d| d < nb || d >= r) || c.windows(2).any(|w| w[1] != w[0] + 1)
    {
        return None;
    }
    let (c0, c1) = (c[0], c[c.len() - 1] + 1);
    // Free dims are what is left of nb..r: all before or all after the run.
    let transposed = if c1 == r {
        false
    } else if c0 == nb {
        true
    } else {
        return None;
    };
    let free: i64 = (nb..r)
        .filter(|d| !c.contains(d))
        .map(|d| dims[d])
        .product();
    Some((free, transposed))
}

/// The call for `op` if the policy admits it.
fn classify(m: &Module, op: OpId, policy: &HostGemmPolicy) -> Option<Gemm> {
    let o = m.op(op);
    if o.operands.len() != 2 || o.results.len() != 1 || !o.regions.is_empty() {
        return None;
    }
    if m.op_attr(op, "algorithm").is_some() {
        return None;
    }
    let (ld, lk) = tensor_of(m, o.operands[0])?;
    let (rd, rk) = tensor_of(m, o.operands[1])?;
    let (od, ok) = tensor_of(m, o.results[0])?;
    if lk != rk || lk != ok {
        return None;
    }
    let (lb, rb, lc, rc) = if m.op_name(op) == "stablehlo.dot" {
        if ld.len() != 2 || rd.len() != 2 {
            return None;
        }
        (vec![], vec![], vec![1], vec![0])
    } else {
        let attr = m.op_attr(op, "dot_dimension_numbers")?;
        let Attribute::Opaque(text) = m.attr(attr) else {
            return None;
        };
        let [lb, rb, lc, rc] = read_dot_dims(text)?;
        (lb, rb, lc, rc)
    };
    let nb = lb.len();
    let batch: Vec<i64> = (0..nb as i64).collect();
    if lb != batch || rb != batch || lc.len() != rc.len() || ld.len() < nb + 2 || rd.len() < nb + 2
    {
        return None;
    }
    if ld[..nb] != rd[..nb] || od.len() < nb || od[..nb] != ld[..nb] {
        return None;
    }
    // Contracting dims pair up in order and agree in size.
    if lc
        .iter()
        .zip(&rc)
        .any(|(&a, &b)| ld.get(a as usize) != rd.get(b as usize))
    {
        return None;
    }
    let (mm, lt) = as_matrix(ld, nb, &lc)?;
    let (n, rt_plain) = as_matrix(rd, nb, &rc)?;
    // The right operand is "not transposed" when stored [K, N]: contracting first.
    let rt = !rt_plain;
    let k: i64 = lc.iter().map(|&d| ld[d as usize]).product();
    // The result is [batch, lhs free dims, rhs free dims], row-major [B, M, N].
    let out_free: i64 = od[nb..].iter().product();
    if out_free != mm * n {
        return None;
    }
    let mut dims = ld[..nb]
        .iter()
        .map(|&d| d as u64)
        .chain([mm as u64, n as u64, k as u64]);
    let work = dims.try_fold(1u64, |a, d| a.checked_mul(d))?;
    let elem = match m.ty(m.value_type(o.operands[0])) {
        Type::Tensor { elem, .. } => *elem,
        _ => return None,
    };
    // `W` stored [N, K] directly, or as `transpose(W)` stored [K, N] (how
    // torch_xla lowers `x @ w.t()`).
    let stored_nk = if rt {
        Some(o.operands[1])
    } else {
        swapped_matrix_source(m, o.operands[1]).filter(|&s| tensor_of(m, s).is_some())
    };
    if let Some(w) = stored_nk.filter(|_| {
        nb == 0
            && (mm as u64) < policy.min_side
            && (n as u64) >= policy.min_side
            && !lt
            && [ld.len(), rd.len(), od.len()] == [2, 2, 2]
            && (n as u64).saturating_mul(k as u64) >= policy.skinny_from_weights
    }) {
        return Some(Gemm {
            operands: [w, o.operands[0]],
            lhs_t: false,
            rhs_t: true,
            reshape: [None, None],
            result: None,
            swapped: true,
            split_n: Vec::new(),
            onednn: false,
            elem,
        });
    }
    let sides = (mm as u64) >= policy.min_side && (n as u64) >= policy.min_side;
    // oneDNN only with every dim non-empty (its descriptors need no
    // zero-size special case then).
    let onednn = sides
        && work > 0
        && nb + 2 <= onednn_call::MAX_RANK
        && lk == FloatKind::F32
        && policy.onednn_from_work.is_some_and(|from| work >= from);
    if !onednn && (!sides || work < policy.min_work || work > policy.max_work) {
        return None;
    }
    let matrix =
        |b: &[i64], x: i64, y: i64| -> Vec<i64> { b.iter().copied().chain([x, y]).collect() };
    let lshape = if lt {
        matrix(&ld[..nb], k, mm)
    } else {
        matrix(&ld[..nb], mm, k)
    };
    let rshape = if rt {
        matrix(&ld[..nb], n, k)
    } else {
        matrix(&ld[..nb], k, n)
    };
    let oshape = matrix(&ld[..nb], mm, n);
    let mut g = Gemm {
        operands: [o.operands[0], o.operands[1]],
        lhs_t: lt,
        rhs_t: rt,
        reshape: [
            (lshape[..] != *ld).then_some(lshape),
            (rshape[..] != *rd).then_some(rshape),
        ],
        result: (oshape[..] != *od).then_some(oshape),
        swapped: false,
        split_n: Vec::new(),
        onednn,
        elem,
    };
    // Reading a transposed operand through strides is free; materialising
    // the transpose (which XLA would fold into its own dot) is not.
    for (i, flag) in [(0, &mut g.lhs_t), (1, &mut g.rhs_t)] {
        if g.reshape[i].is_some() {
            continue;
        }
        if let Some(src) = swapped_matrix_source(m, g.operands[i]) {
            if tensor_of(m, src).is_some() {
                g.operands[i] = src;
                *flag = !*flag;
            }
        }
    }
    if let Some(from_n) = policy
        .onednn_reorient_from_n
        .filter(|_| g.onednn && !g.rhs_t)
    {
        if n as u64 >= from_n {
            reorient(&mut g, mm as u64, n as u64, from_n);
        }
    }
    Some(g)
}

/// Keeps oneDNN off a right operand stored `[K, N]` with a wide `N` (see
/// [`ONEDNN_REORIENT_FROM_N`]), where that pays:
///
/// - the left operand stored transposed (`Aᵀ` is `[K, M]`, a weight
///   gradient `Xᵀ · dY`) and `M` narrow: the product runs swapped, as
///   `(Bᵀ · Aᵀ)ᵀ`, whose right operand `Aᵀ` is now the `[K, M]`-stored one
///   with narrow `M`, and whose `[N, M]` result XLA transposes back (or
///   folds the transpose into what reads it, as a weight update reading
///   `dWᵀ`);
/// - otherwise, with at least [`ONEDNN_SPLIT_FROM_M`] rows, the product
///   runs as one call per block of [`ONEDNN_SPLIT_WIDTH`] columns of the
///   right operand, each on a slice of it (a copy of `K·N` elements in
///   all, at about memory speed), and their results are concatenated
///   (which XLA fuses into what reads the product). oneDNN runs each
///   block, `N` of 1024, at full speed; a copy of the operand transposed
///   (the earlier route) cost XLA:CPU about 4–7 ms at `[768, 3072]`, four
///   times the slices.
fn reorient(g: &mut Gemm, m: u64, n: u64, from_n: u64) {
    if g.lhs_t && m < from_n && g.result.is_none() {
        g.operands.swap(0, 1);
        g.reshape.swap(0, 1);
        (g.lhs_t, g.rhs_t) = (!g.rhs_t, !g.lhs_t);
        g.swapped = true;
    } else if m >= ONEDNN_SPLIT_FROM_M {
        let w = ONEDNN_SPLIT_WIDTH;
        g.split_n = (0..n.div_ceil(w))
            .map(|i| ((i * w) as i64, ((i + 1) * w).min(n) as i64))
            .collect();
    }
}

/// Fewest rows `M` (per batch entry) for which a product with a wide
/// `[K, N]`-stored right operand is split into column blocks. Measured at
/// `K = 768, N = 3072` with a bias and GELU after it (docs/host_gemm.md,
/// "Orientation"): 0.90× the unsplit product's time at 128 rows, 0.71× at
/// 256, 0.65× at 512, 0.89× at 1024 and 0.95× at 1576 (where it replaced a
/// transposed copy of the operand).
pub const ONEDNN_SPLIT_FROM_M: u64 = 128;

/// Columns per block of a split product: 1024. Blocks of 768, 1024 and
/// 1536 columns ran within 7% of each other, 1024 the fastest.
pub const ONEDNN_SPLIT_WIDTH: u64 = 1024;

/// Rewrites `op` into the host GEMM call `g`, with reshapes around it
/// where an operand or the result has grouped dims.
fn apply(m: &mut Module, op: OpId, g: Gemm, names: &CallNames) {
    let block = m.op(op).parent.expect("classified ops are placed");
    let loc = m.op(op).loc;
    let mut pos = m.blocks[block.index()]
        .ops
        .iter()
        .position(|&x| x == op)
        .expect("op in its block");
    let mut operands = g.operands;
    for (i, shape) in g.reshape.iter().enumerate() {
        if let Some(shape) = shape {
            let ty = m.intern_type(Type::Tensor {
                dims: shape.iter().copied().collect(),
                elem: g.elem,
                encoding: None,
            });
            let r = m.add_op(names.reshape);
            m.op_mut(r).operands.push(operands[i]);
            m.op_mut(r).loc = loc;
            operands[i] = m.add_result(r, ty, None);
            m.blocks[block.index()].ops.insert(pos, r);
            m.op_mut(r).parent = Some(block);
            pos += 1;
        }
    }
    let props: SmallVec<[NamedAttr; 6]> = if g.onednn {
        let json = format!(
            r#"{{"onednn_matmul_config": {{"transpose_a": {}, "transpose_b": {}}}}}"#,
            g.lhs_t, g.rhs_t
        );
        let rank = |v: ValueId| match m.ty(m.value_type(v)) {
            Type::Tensor { dims, .. } => dims.len(),
            _ => unreachable!("classified operands are tensors"),
        };
        let ins = [row_major(rank(operands[0])), row_major(rank(operands[1]))];
        let out_rank = g
            .result
            .as_ref()
            .map_or_else(|| rank(m.op(op).results[0]), Vec::len);
        let outs = [row_major(out_rank)];
        onednn_call::call_props(
            m,
            onednn_call::MATMUL,
            &json,
            Some(PinnedLayouts {
                operands: &ins,
                results: &outs,
            }),
        )
    } else {
        let t = m.add_attr(Attribute::String {
            escaped: target_name(g.lhs_t, g.rhs_t).into(),
            ty: None,
        });
        SmallVec::from_slice(&[
            NamedAttr {
                name: names.api_version,
                value: names.api_value,
            },
            NamedAttr {
                name: names.call_target_name,
                value: t,
            },
        ])
    };
    if g.split_n.is_empty() {
        let o = m.op_mut(op);
        o.name = names.custom_call;
        o.operands = SmallVec::from_slice(&operands);
        o.props = props.into_iter().collect();
    } else {
        // One call per column block of the right operand (stored
        // [B..., K, N]) before `op`, which becomes their concatenation
        // ([B..., M, N], the result or what the reshape below reads).
        let Type::Tensor { dims: rd, .. } = m.ty(m.value_type(operands[1])).clone() else {
            unreachable!("classified operands are tensors")
        };
        let out: Vec<i64> = match &g.result {
            Some(shape) => shape.clone(),
            None => match m.ty(m.value_type(m.op(op).results[0])) {
                Type::Tensor { dims, .. } => dims.to_vec(),
                _ => unreachable!("classified results are tensors"),
            },
        };
        let e = onednn_call::Emitter { block, at: op, loc };
        let mut parts = SmallVec::<[ValueId; 3]>::new();
        for &(c0, c1) in &g.split_n {
            let with_last = |d: &[i64], v: i64| -> Vec<i64> {
                let mut d = d.to_vec();
                if let Some(last) = d.last_mut() {
                    *last = v;
                }
                d
            };
            let slice_ty = tensor_type(m, &with_last(&rd, c1 - c0), g.elem);
            let start = with_last(&vec![0; rd.len()], c0);
            let cols = e.slice(m, operands[1], start, with_last(&rd, c1), slice_ty);
            let part_ty = tensor_type(m, &with_last(&out, c1 - c0), g.elem);
            let call = m.add_op(names.custom_call);
            parts.push(e.insert(m, call, &[operands[0], cols], props.clone(), part_ty));
        }
        let i64t = m.int_type(64);
        let dim = m.add_attr(Attribute::Integer {
            text: (out.len() - 1).to_string().into(),
            ty: Some(i64t),
        });
        let dimension = m.sym("dimension");
        let o = m.op_mut(op);
        o.name = names.concatenate;
        o.operands = parts;
        o.props = SmallVec::from_slice(&[NamedAttr {
            name: dimension,
            value: dim,
        }]);
        pos = m.blocks[block.index()]
            .ops
            .iter()
            .position(|&x| x == op)
            .expect("op in its block");
    }
    if g.swapped {
        // The call yields [B..., N, M]; a transpose of its two matrix dims
        // after it takes over the original [B..., M, N] result value.
        let orig = m.op(op).results[0];
        let Type::Tensor { dims, .. } = m.ty(m.value_type(orig)).clone() else {
            unreachable!("classified results are tensors")
        };
        let ty = m.intern_type(Type::Tensor {
            dims: swap_last_two(&dims).into_iter().collect(),
            elem: g.elem,
            encoding: None,
        });
        let flat = m.add_value(ty, ValueDef::OpResult { op, index: 0 }, None);
        m.op_mut(op).results = SmallVec::from_slice(&[flat]);
        let r = transpose_op(m, flat, dims.len(), names);
        m.op_mut(r).results.push(orig);
        m.op_mut(r).loc = loc;
        m.values[orig.index()].def = ValueDef::OpResult { op: r, index: 0 };
        m.blocks[block.index()].ops.insert(pos + 1, r);
        m.op_mut(r).parent = Some(block);
    } else if let Some(shape) = g.result {
        // The call yields [B, M, N]; a reshape after it takes over the
        // original result value, so every user stays as it was.
        let orig = m.op(op).results[0];
        let ty = m.intern_type(Type::Tensor {
            dims: shape.iter().copied().collect(),
            elem: g.elem,
            encoding: None,
        });
        let flat = m.add_value(ty, ValueDef::OpResult { op, index: 0 }, None);
        m.op_mut(op).results = SmallVec::from_slice(&[flat]);
        let r = m.add_op(names.reshape);
        m.op_mut(r).operands.push(flat);
        m.op_mut(r).results.push(orig);
        m.op_mut(r).loc = loc;
        m.values[orig.index()].def = ValueDef::OpResult { op: r, index: 0 };
        m.blocks[block.index()].ops.insert(pos + 1, r);
        m.op_mut(r).parent = Some(block);
    }
}

/// `dims` with its last two entries swapped.
fn swap_last_two(dims: &[i64]) -> Vec<i64> {
    let mut d = dims.to_vec();
    let r = d.len();
    d.swap(r - 2, r - 1);
    d
}

/// A new `stablehlo.transpose` of `v` (rank `rank`) swapping its last two
/// dims, not yet placed and without its result.
fn transpose_op(m: &mut Module, v: ValueId, rank: usize, names: &CallNames) -> OpId {
    let perm = if rank == 2 {
        names.swap
    } else {
        let i64t = m.int_type(64);
        let data = swap_last_two(&(0..rank as i64).collect::<Vec<_>>());
        m.add_attr(Attribute::DenseArray {
            elem: i64t,
            data: DenseArrayData::Int(data),
        })
    };
    let r = m.add_op(names.transpose);
    m.op_mut(r).operands.push(v);
    m.op_mut(r).props = SmallVec::from_slice(&[NamedAttr {
        name: names.permutation,
        value: perm,
    }]);
    r
}

/// Interned names and attributes shared by every rewritten op.
struct CallNames {
    custom_call: crate::intern::Sym,
    reshape: crate::intern::Sym,
    api_version: crate::intern::Sym,
    call_target_name: crate::intern::Sym,
    api_value: crate::ir::AttrId,
    transpose: crate::intern::Sym,
    concatenate: crate::intern::Sym,
    permutation: crate::intern::Sym,
    /// `array<i64: 1, 0>`.
    swap: crate::ir::AttrId,
}

#[cfg(test)]
mod tests;
