//! Conformance rewrite: turn the checks of a StableHLO test module into
//! outputs of its entry function, so any runtime can run the module and the
//! comparison happens on the host.
//!
//! The StableHLO test suite (and the interpreter's own tests) assert results
//! in-graph, with ops that only the reference interpreter understands:
//!
//! * `stablehlo.custom_call @check.expect_eq(%actual, %expected)`,
//!   `@check.expect_close` (ULP-based; `min_ulp_difference` /
//!   `max_ulp_difference` attributes, default 0 and 3) and
//!   `@check.expect_almost_eq` (`tolerance` attribute, default 1e-3);
//! * `%r = stablehlo.custom_call @check.eq(%expected, %actual) -> tensor<i1>`
//!   (users of the verdict `%r` get a constant `true`: the comparison itself
//!   moves to the host);
//! * the `check` dialect ops `"check.expect_eq"`, `"check.expect_close"`,
//!   `"check.expect_almost_eq"` (two operands) and `"check.expect_eq_const"`,
//!   `"check.expect_almost_eq_const"` (one operand and a `value` attribute,
//!   which becomes a new `stablehlo.constant`).
//!
//! [`rewrite_checks`] removes every such op and appends its two values
//! (actual, expected) to the results of the entry function (`@main`, or the
//! single public function, which is then renamed `main`), updating
//! `function_type` and `res_attrs`. Checks in other functions are threaded
//! out through every `func.call` chain that reaches them (each call path
//! becomes its own [`Check`]); checks inside nested regions (loop bodies,
//! branches) or in functions that are never called are reported as
//! [`ConformError::Unsupported`].
//!
//! [`raw::rewrite_checks_text`] does the same by editing the module text
//! (no parse, no print), for running the file's own text on a plugin as the
//! reference of differential conformance.

pub mod raw;

use crate::ir::{AttrId, Attribute, BlockId, Location, Module, OpId, Type, TypeId, ValueId};
use rustc_hash::FxHashMap;

/// Default `max_ulp_difference` of `check.expect_close` (as the StableHLO
/// interpreter uses).
pub const DEFAULT_MAX_ULP: u64 = 3;
/// Default `min_ulp_difference` of `check.expect_close`.
pub const DEFAULT_MIN_ULP: u64 = 0;
/// Default `tolerance` of `check.expect_almost_eq` (as the StableHLO
/// interpreter uses for the custom call).
pub const DEFAULT_TOLERANCE: f64 = 1e-3;

/// How two outputs must compare.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CheckKind {
    /// Exactly equal (for floats: equal as numbers, or both NaN).
    Eq,
    /// ULP distance within `[min_ulp_difference, max_ulp_difference]`.
    Close {
        /// Smallest allowed ULP distance (normally 0).
        min_ulp_difference: u64,
        /// Largest allowed ULP distance.
        max_ulp_difference: u64,
    },
    /// Approximately equal with the given tolerance.
    AlmostEq {
        /// The tolerance.
        tolerance: f64,
    },
}

impl std::fmt::Display for CheckKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckKind::Eq => f.write_str("eq"),
            CheckKind::Close {
                min_ulp_difference,
                max_ulp_difference,
            } => write!(f, "close (ULP {min_ulp_difference}..={max_ulp_difference})"),
            CheckKind::AlmostEq { tolerance } => write!(f, "almost_eq (tolerance {tolerance})"),
        }
    }
}

/// One check, now a pair of entry-function outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// The comparison.
    pub kind: CheckKind,
    /// The check's name as written, e.g. `check.expect_close`.
    pub target: String,
    /// Output index of the computed value.
    pub actual_output: usize,
    /// Output index of the expected value.
    pub expected_output: usize,
    /// The function the check op was in.
    pub function: String,
    /// 0-based position of the check op among all check ops of the module,
    /// in source order.
    pub ordinal: usize,
    /// 1-based source line of the check op, once [`attach_source_lines`]
    /// has run (or from a `loc("file":line:col)` on the op).
    pub line: Option<u32>,
}

impl Check {
    /// `check.expect_close #0 (line 11)`-style label for reports.
    pub fn label(&self) -> String {
        let mut s = format!("{} #{}", self.target, self.ordinal);
        if self.function != "main" {
            s.push_str(&format!(" in @{}", self.function));
        }
        if let Some(l) = self.line {
            s.push_str(&format!(" (line {l})"));
        }
        s
    }
}

/// The result of [`rewrite_checks`].
#[derive(Clone, Debug, PartialEq)]
pub struct Rewrite {
    /// Every check, in source order (a check reached through several call
    /// paths appears once per path).
    pub checks: Vec<Check>,
    /// Name of the entry function before any rename (usually `main`).
    pub entry: String,
    /// Number of entry results before the rewrite.
    pub original_outputs: usize,
    /// Number of entry results after the rewrite.
    pub total_outputs: usize,
}

/// Why a module cannot be rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConformError {
    /// No `@main` and no single public function.
    #[error("no entry function: {0}")]
    NoEntry(String),
    /// A check the rewrite cannot turn into outputs.
    #[error("unsupported {target} #{ordinal} in @{function}: {reason}")]
    Unsupported {
        /// The check's name.
        target: String,
        /// Its position among the module's checks.
        ordinal: usize,
        /// The function holding it.
        function: String,
        /// What is wrong.
        reason: String,
    },
}

/// Find the entry function, remove every check op and turn its operands
/// into extra entry results. See the module docs.
pub fn rewrite_checks(m: &mut Module) -> Result<Rewrite, ConformError> {
    let funcs = collect_funcs(m);
    let entry = pick_entry(m, &funcs)?;
    let entry_name = func_name(m, entry).unwrap_or_default();
    let original_outputs = func_type(m, entry).map_or(0, |(_, r)| r.len());

    // Check ops in source order, with their function.
    let mut found: Vec<(OpId, OpId)> = Vec::new();
    for &f in &funcs {
        m.walk(f, &mut |o| {
            if o != f && check_target(m, o).is_some() {
                found.push((o, f));
            }
        });
    }

    let mut rw = Rewriter {
        funcs: funcs
            .iter()
            .filter_map(|&f| Some((func_name(m, f)?, f)))
            .collect(),
        entry,
        m,
    };
    let mut checks = Vec::new();
    for (ordinal, &(op, func)) in found.iter().enumerate() {
        let target = check_target(rw.m, op).unwrap_or_default();
        let function = func_name(rw.m, func).unwrap_or_default();
        let unsupported = |reason: String| ConformError::Unsupported {
            target: target.clone(),
            ordinal,
            function: function.clone(),
            reason,
        };
        let kind = check_kind(rw.m, op, &target).map_err(&unsupported)?;
        let (actual, expected) = rw.check_values(op, func, &target).map_err(&unsupported)?;
        let line = op_line(rw.m, op);
        let paths = rw
            .export(func, vec![actual, expected], &mut Vec::new())
            .map_err(&unsupported)?;
        for outs in paths {
            checks.push(Check {
                kind,
                target: target.clone(),
                actual_output: outs[0],
                expected_output: outs[1],
                function: function.clone(),
                ordinal,
                line,
            });
        }
    }
    if entry_name != "main" && !rw.funcs.contains_key("main") {
        let a = rw.m.add_attr(Attribute::String {
            escaped: "main".into(),
            ty: None,
        });
        rw.m.set_op_attr(entry, "sym_name", a);
    }
    let total_outputs = func_type(rw.m, entry).map_or(0, |(_, r)| r.len());
    Ok(Rewrite {
        checks,
        entry: entry_name,
        original_outputs,
        total_outputs,
    })
}

/// Fill [`Check::line`] from the source text: the n-th check op in source
/// order is the n-th line naming a check target (`@check.` or `"check.`).
/// `first_line` is the 1-based line number of `src`'s first line (for
/// files split into several modules).
pub fn attach_source_lines(checks: &mut [Check], src: &str, first_line: u32) {
    let lines: Vec<u32> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            !t.starts_with("//") && (l.contains("@check.") || l.contains("\"check."))
        })
        .map(|(i, _)| first_line + i as u32)
        .collect();
    for c in checks {
        if c.line.is_none() {
            c.line = lines.get(c.ordinal).copied();
        }
    }
}

/// The entry function's parameter types and names, for binding inputs:
/// for parameter `i`, the names `argI`, the SSA name it was written with,
/// and any `jax.arg_info` / `mhlo.name` string attribute.
pub fn entry_params(m: &Module) -> Result<Vec<(TypeId, Vec<String>)>, ConformError> {
    let funcs = collect_funcs(m);
    let entry = pick_entry(m, &funcs)?;
    let (inputs, _) = func_type(m, entry).unwrap_or_default();
    let block = entry_block(m, entry);
    let arg_attrs = m.op_attr(entry, "arg_attrs").map(|a| m.attr(a).clone());
    let mut out = Vec::with_capacity(inputs.len());
    for (i, &t) in inputs.iter().enumerate() {
        let mut names = vec![format!("arg{i}")];
        if let Some(v) = block.and_then(|b| m.block(b).args.get(i)) {
            if let Some(n) = m.value(*v).name {
                names.push(m.str(n).to_string());
            }
        }
        if let Some(Attribute::Array(dicts)) = &arg_attrs {
            if let Some(Attribute::Dict(d)) = dicts.get(i).map(|&d| m.attr(d)) {
                for na in d {
                    let key = m.str(na.name);
                    if matches!(key, "jax.arg_info" | "mhlo.name") {
                        if let Attribute::String { escaped, .. } = m.attr(na.value) {
                            names.push(escaped.to_string());
                        }
                    }
                }
            }
        }
        names.dedup();
        out.push((t, names));
    }
    Ok(out)
}

/// The entry function's result types (before or after [`rewrite_checks`]).
pub fn entry_results(m: &Module) -> Result<Vec<TypeId>, ConformError> {
    let funcs = collect_funcs(m);
    let entry = pick_entry(m, &funcs)?;
    Ok(func_type(m, entry).map(|(_, r)| r).unwrap_or_default())
}

// ----- helpers -----

struct Rewriter<'m> {
    m: &'m mut Module,
    funcs: FxHashMap<String, OpId>,
    entry: OpId,
}

impl Rewriter<'_> {
    /// The (actual, expected) values of a check op; removes the op (and
    /// materializes a constant for the `*_const` forms).
    fn check_values(
        &mut self,
        op: OpId,
        func: OpId,
        target: &str,
    ) -> Result<(ValueId, ValueId), String> {
        let m = &mut *self.m;
        let o = m.op(op).clone();
        if o.parent.is_none() || o.parent != entry_block(m, func) {
            return Err("it sits inside a nested region (loop, branch, ...)".into());
        }
        // `check.eq` returns its verdict as `tensor<i1>`; the host compares
        // now, so users of the verdict see `true`.
        let verdict = match o.results.as_slice() {
            [r] if target == "check.eq" && has_uses(m, *r) => {
                let ty = m.value_type(*r);
                let is_i1 = matches!(m.ty(ty), Type::Tensor { dims, elem, .. }
                    if dims.is_empty() && matches!(m.ty(*elem), Type::Integer { width: 1, .. }));
                if !is_i1 {
                    return Err("its result is used and is not a tensor<i1>".into());
                }
                Some((*r, ty))
            }
            rs if rs.iter().any(|&r| has_uses(m, r)) => {
                return Err("its result is used".into());
            }
            _ => None,
        };
        let block = o.parent.ok_or("op is not in a block")?;
        let pos = m
            .block(block)
            .ops
            .iter()
            .position(|&x| x == op)
            .ok_or("op not found in its block")?;
        let vals = if target.ends_with("_const") {
            if o.operands.len() != 1 {
                return Err(format!("expected 1 operand, found {}", o.operands.len()));
            }
            let value = m.op_attr(op, "value").ok_or("missing `value` attribute")?;
            let ty = match m.attr(value) {
                Attribute::Dense { ty, .. } | Attribute::DenseResource { ty, .. } => *ty,
                _ => m.value_type(o.operands[0]),
            };
            let v = new_constant(m, value, ty, block, pos);
            (o.operands[0], v)
        } else {
            if o.operands.len() != 2 {
                return Err(format!("expected 2 operands, found {}", o.operands.len()));
            }
            match verdict {
                Some((r, ty)) => {
                    let value = m.add_attr(Attribute::Dense {
                        body: "true".into(),
                        ty,
                    });
                    let c = new_constant(m, value, ty, block, pos);
                    for other in m.ops.iter_mut().filter(|x| x.parent.is_some()) {
                        for v in other.operands.iter_mut().filter(|v| **v == r) {
                            *v = c;
                        }
                    }
                }
                None => {
                    m.blocks[block.index()].ops.remove(pos);
                }
            }
            if target == "check.eq" {
                // `check.eq(expected, actual)`.
                (o.operands[1], o.operands[0])
            } else {
                (o.operands[0], o.operands[1])
            }
        };
        m.op_mut(op).parent = None;
        Ok(vals)
    }

    /// Append `vals` to the results of `func` and thread them up to the
    /// entry; returns the entry output indices, one list per call path.
    fn export(
        &mut self,
        func: OpId,
        vals: Vec<ValueId>,
        stack: &mut Vec<OpId>,
    ) -> Result<Vec<Vec<usize>>, String> {
        let first = append_results(self.m, func, &vals)?;
        if func == self.entry {
            return Ok(vec![(first..first + vals.len()).collect()]);
        }
        let name = func_name(self.m, func).unwrap_or_default();
        if stack.contains(&func) {
            return Err(format!("@{name} is called recursively"));
        }
        let calls = call_sites(self.m, &name, &self.funcs);
        if calls.is_empty() {
            return Err(format!("@{name} is never called (from the entry function)"));
        }
        stack.push(func);
        let mut paths = Vec::new();
        for (call, caller) in calls {
            let Some(b) = self.m.op(call).parent else {
                continue;
            };
            if Some(b) != entry_block(self.m, caller) {
                let cn = func_name(self.m, caller).unwrap_or_default();
                return Err(format!("@{name} is called inside a nested region of @{cn}"));
            }
            let new: Vec<ValueId> = vals
                .iter()
                .map(|&v| {
                    let t = self.m.value_type(v);
                    self.m.add_result(call, t, None)
                })
                .collect();
            pad_res_attrs(self.m, call);
            paths.extend(self.export(caller, new, stack)?);
        }
        stack.pop();
        Ok(paths)
    }
}

/// `func.func` ops at the top level and in top-level `builtin.module`s.
fn collect_funcs(m: &Module) -> Vec<OpId> {
    let mut out = Vec::new();
    for top in m.top_ops() {
        match m.op_name(top) {
            "func.func" => out.push(top),
            "builtin.module" => {
                for &r in &m.op(top).regions {
                    for &b in &m.region(r).blocks {
                        for &o in &m.block(b).ops {
                            if m.op_name(o) == "func.func" {
                                out.push(o);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn pick_entry(m: &Module, funcs: &[OpId]) -> Result<OpId, ConformError> {
    if let Some(&f) = funcs
        .iter()
        .find(|&&f| func_name(m, f).as_deref() == Some("main"))
    {
        return Ok(f);
    }
    let public: Vec<OpId> = funcs
        .iter()
        .copied()
        .filter(|&f| {
            let vis = m.op_attr(f, "sym_visibility").and_then(|a| attr_str(m, a));
            matches!(vis.as_deref(), None | Some("public")) && entry_block(m, f).is_some()
        })
        .collect();
    match public.as_slice() {
        [f] => Ok(*f),
        [] => Err(ConformError::NoEntry(
            "no @main and no public function with a body".into(),
        )),
        many => Err(ConformError::NoEntry(format!(
            "no @main and {} public functions",
            many.len()
        ))),
    }
}

fn attr_str(m: &Module, a: AttrId) -> Option<String> {
    match m.attr(a) {
        Attribute::String { escaped, .. } => Some(escaped.to_string()),
        Attribute::SymbolRef(parts) if parts.len() == 1 => {
            Some(m.str(parts[0]).trim_matches('"').to_string())
        }
        _ => None,
    }
}

fn func_name(m: &Module, f: OpId) -> Option<String> {
    m.op_attr(f, "sym_name").and_then(|a| attr_str(m, a))
}

fn func_type(m: &Module, f: OpId) -> Option<(Vec<TypeId>, Vec<TypeId>)> {
    let a = m.op_attr(f, "function_type")?;
    let Attribute::Type(t) = m.attr(a) else {
        return None;
    };
    match m.ty(*t) {
        Type::Function { inputs, results } => Some((inputs.clone(), results.clone())),
        _ => None,
    }
}

fn entry_block(m: &Module, f: OpId) -> Option<BlockId> {
    let r = *m.op(f).regions.first()?;
    m.region(r).blocks.first().copied()
}

/// The check target of `op` (`check.expect_eq`, ...), if it is a check.
fn check_target(m: &Module, op: OpId) -> Option<String> {
    let name = m.op_name(op);
    if name.starts_with("check.") {
        return Some(name.to_string());
    }
    if matches!(name, "stablehlo.custom_call" | "mhlo.custom_call") {
        let t = attr_str(m, m.op_attr(op, "call_target_name")?)?;
        if t.starts_with("check.") {
            return Some(t);
        }
    }
    None
}

fn int_attr(m: &Module, op: OpId, name: &str) -> Result<Option<u64>, String> {
    let Some(a) = m.op_attr(op, name) else {
        return Ok(None);
    };
    match m.attr(a) {
        Attribute::Integer { text, .. } => crate::parse::parse_int_text(text)
            .and_then(|v| u64::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| format!("bad `{name}` value {text}")),
        _ => Err(format!("`{name}` is not an integer")),
    }
}

fn check_kind(m: &Module, op: OpId, target: &str) -> Result<CheckKind, String> {
    let tolerance = match m.op_attr(op, "tolerance").map(|a| m.attr(a)) {
        None => None,
        Some(Attribute::Float { text, .. }) => {
            Some(parse_float(text).ok_or_else(|| format!("bad `tolerance` value {text}"))?)
        }
        Some(Attribute::Integer { text, .. }) => Some(
            crate::parse::parse_int_text(text)
                .map(|v| v as f64)
                .ok_or_else(|| format!("bad `tolerance` value {text}"))?,
        ),
        Some(_) => return Err("`tolerance` is not a number".into()),
    };
    check_kind_from(
        target,
        int_attr(m, op, "min_ulp_difference")?,
        int_attr(m, op, "max_ulp_difference")?,
        tolerance,
    )
}

/// The comparison of check `target` from its (optional) attributes, with
/// the interpreter's defaults; shared by the parsed and the raw rewrite.
pub(crate) fn check_kind_from(
    target: &str,
    min_ulp: Option<u64>,
    max_ulp: Option<u64>,
    tolerance: Option<f64>,
) -> Result<CheckKind, String> {
    match target {
        "check.expect_eq" | "check.eq" | "check.expect_eq_const" => Ok(CheckKind::Eq),
        "check.expect_close" => Ok(CheckKind::Close {
            min_ulp_difference: min_ulp.unwrap_or(DEFAULT_MIN_ULP),
            max_ulp_difference: max_ulp.unwrap_or(DEFAULT_MAX_ULP),
        }),
        "check.expect_almost_eq" | "check.expect_almost_eq_const" => Ok(CheckKind::AlmostEq {
            tolerance: tolerance.unwrap_or(DEFAULT_TOLERANCE),
        }),
        other => Err(format!("unknown check `{other}`")),
    }
}

/// A float literal: decimal/exponent, or a hex bit pattern (f64 or f32).
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    if let Some(h) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        let bits = u64::from_str_radix(h, 16).ok()?;
        return Some(if h.len() <= 8 {
            f32::from_bits(bits as u32) as f64
        } else {
            f64::from_bits(bits)
        });
    }
    text.parse().ok()
}

fn op_line(m: &Module, op: OpId) -> Option<u32> {
    let mut loc = m.op(op).loc?;
    for _ in 0..16 {
        match m.loc(loc) {
            Location::FileLineCol { pos, .. } => {
                return pos.trim_start_matches(':').split(':').next()?.parse().ok();
            }
            Location::Name { child: Some(c), .. } => loc = *c,
            Location::CallSite { callee, .. } => loc = *callee,
            Location::Fused { locs, .. } => loc = *locs.first()?,
            _ => return None,
        }
    }
    None
}

fn has_uses(m: &Module, v: ValueId) -> bool {
    m.ops
        .iter()
        .any(|o| o.parent.is_some() && o.operands.contains(&v))
}

/// A `stablehlo.constant` of `value` that takes the place of the op at
/// `block[pos]`; returns its result.
fn new_constant(m: &mut Module, value: AttrId, ty: TypeId, block: BlockId, pos: usize) -> ValueId {
    let old = m.block(block).ops[pos];
    let loc = m.op(old).loc;
    let name = m.sym("stablehlo.constant");
    let c = m.add_op(name);
    m.set_op_attr(c, "value", value);
    let v = m.add_result(c, ty, None);
    m.op_mut(c).loc = loc;
    m.blocks[block.index()].ops[pos] = c;
    m.op_mut(c).parent = Some(block);
    v
}

/// Pad an existing `res_attrs` array of `op` (a function or a call) with
/// empty dicts so it covers every result.
fn pad_res_attrs(m: &mut Module, op: OpId) {
    let Some(old) = m.op_attr(op, "res_attrs") else {
        return;
    };
    let Attribute::Array(elems) = m.attr(old) else {
        return;
    };
    let mut elems = elems.clone();
    let want = match func_type(m, op) {
        Some((_, results)) => results.len(),
        None => m.op(op).results.len(),
    };
    if elems.len() >= want {
        return;
    }
    while elems.len() < want {
        elems.push(m.add_attr(Attribute::Dict(Vec::new())));
    }
    let a = m.add_attr(Attribute::Array(elems));
    m.set_op_attr(op, "res_attrs", a);
}

/// Append `vals` to the results of function `f` (its return op, its
/// `function_type` and `res_attrs`); returns the index of the first.
fn append_results(m: &mut Module, f: OpId, vals: &[ValueId]) -> Result<usize, String> {
    let name = func_name(m, f).unwrap_or_default();
    let r = *m.op(f).regions.first().ok_or("function without a body")?;
    if m.region(r).blocks.len() != 1 {
        return Err(format!("@{name} has several blocks"));
    }
    let b = entry_block(m, f).ok_or_else(|| format!("@{name} has no body"))?;
    let ret = *m
        .block(b)
        .ops
        .last()
        .ok_or_else(|| format!("@{name} is empty"))?;
    if !matches!(m.op_name(ret), "func.return" | "return") {
        return Err(format!("@{name} does not end in func.return"));
    }
    let (inputs, mut results) =
        func_type(m, f).ok_or_else(|| format!("@{name} has no function_type"))?;
    let first = results.len();
    for &v in vals {
        results.push(m.value_type(v));
        m.op_mut(ret).operands.push(v);
    }
    let fty = m.intern_type(Type::Function { inputs, results });
    let a = m.add_attr(Attribute::Type(fty));
    m.set_op_attr(f, "function_type", a);
    pad_res_attrs(m, f);
    Ok(first)
}

/// Every `func.call` to `callee`, with the function containing it.
fn call_sites(m: &Module, callee: &str, funcs: &FxHashMap<String, OpId>) -> Vec<(OpId, OpId)> {
    let mut out = Vec::new();
    let mut sorted: Vec<(&String, &OpId)> = funcs.iter().collect();
    sorted.sort_by_key(|(_, &f)| f);
    for (_, &f) in sorted {
        m.walk(f, &mut |o| {
            if m.op_name(o) == "func.call" {
                if let Some(a) = m.op_attr(o, "callee") {
                    if attr_str(m, a).as_deref() == Some(callee) {
                        out.push((o, f));
                    }
                }
            }
        });
    }
    out
}

#[cfg(test)]
mod tests;
