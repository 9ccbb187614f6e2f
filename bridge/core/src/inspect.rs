//! `hlobridge inspect`: a summary of a module — functions with their
//! argument and result types, an op histogram by dialect, custom_call
//! targets, sharding and donation attributes, meshes and size.

use crate::ir::{Attribute, Module, OpId, Type};
use crate::print::type_to_string;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// One function argument or result.
#[derive(Debug, Serialize)]
pub struct Port {
    /// The printed type.
    pub ty: String,
    /// Attributes on it (sharding, donation, result names, ...), printed.
    pub attrs: BTreeMap<String, String>,
}

/// One function.
#[derive(Debug, Serialize)]
pub struct FunctionInfo {
    /// Symbol name.
    pub name: String,
    /// `public`, `private` or `nested` (public when unset).
    pub visibility: String,
    /// Arguments.
    pub args: Vec<Port>,
    /// Results.
    pub results: Vec<Port>,
    /// Ops in its body (nested ops included).
    pub ops: usize,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Size of the source text in bytes.
    pub bytes: usize,
    /// Total number of ops (modules and functions included).
    pub ops: usize,
    /// Module-level attributes, printed.
    pub module_attrs: BTreeMap<String, String>,
    /// Functions in order.
    pub functions: Vec<FunctionInfo>,
    /// Op count by dialect.
    pub dialects: BTreeMap<String, usize>,
    /// Op count by op name.
    pub op_histogram: BTreeMap<String, usize>,
    /// custom_call targets with their counts.
    pub custom_calls: BTreeMap<String, usize>,
    /// `sdy.mesh` definitions (name → printed mesh).
    pub meshes: BTreeMap<String, String>,
    /// Arguments marked donated (`tf.aliasing_output` / `jax.buffer_donor`),
    /// as `function:arg_index`.
    pub donated: Vec<String>,
    /// Number of ports carrying sharding annotations.
    pub sharded_ports: usize,
}

/// Build the report for `m`; `bytes` is the source size.
pub fn inspect(m: &Module, bytes: usize) -> Report {
    let mut r = Report {
        bytes,
        ops: 0,
        module_attrs: BTreeMap::new(),
        functions: Vec::new(),
        dialects: BTreeMap::new(),
        op_histogram: BTreeMap::new(),
        custom_calls: BTreeMap::new(),
        meshes: BTreeMap::new(),
        donated: Vec::new(),
        sharded_ports: 0,
    };
    for top in m.top_ops() {
        if m.op_name(top) == "builtin.module" {
            for a in &m.op(top).attrs {
                r.module_attrs
                    .insert(m.str(a.name).to_string(), attr_text(m, a.value));
            }
        }
        m.walk(top, &mut |op| {
            r.ops += 1;
            let name = m.op_name(op);
            let dialect = name.split('.').next().unwrap_or(name);
            *r.dialects.entry(dialect.to_string()).or_default() += 1;
            *r.op_histogram.entry(name.to_string()).or_default() += 1;
            match name {
                "stablehlo.custom_call" => {
                    if let Some(t) = m.op_attr(op, "call_target_name") {
                        let t = match m.attr(t) {
                            Attribute::String { escaped, .. } => escaped.to_string(),
                            _ => attr_text(m, t),
                        };
                        *r.custom_calls.entry(t).or_default() += 1;
                    }
                }
                "sdy.mesh" => {
                    let n = m.op_attr(op, "sym_name").map(|a| attr_text(m, a));
                    let v = m.op_attr(op, "mesh").map(|a| attr_text(m, a));
                    if let (Some(n), Some(v)) = (n, v) {
                        r.meshes.insert(n.trim_matches('"').to_string(), v);
                    }
                }
                "func.func" => {
                    r.functions
                        .push(function_info(m, op, &mut r.donated, &mut r.sharded_ports))
                }
                _ => {}
            }
        });
    }
    r
}

fn attr_text(m: &Module, a: crate::ir::AttrId) -> String {
    let mut p = crate::print::Printer::new(m, crate::print::PrintOptions::default());
    p.attr(a);
    p.out
}

fn ports(m: &Module, types: &[crate::ir::TypeId], attrs: Option<crate::ir::AttrId>) -> Vec<Port> {
    let dicts: Vec<crate::ir::AttrId> = match attrs.map(|a| m.attr(a)) {
        Some(Attribute::Array(v)) => v.clone(),
        _ => Vec::new(),
    };
    types
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let mut attrs = BTreeMap::new();
            if let Some(Attribute::Dict(entries)) = dicts.get(i).map(|&d| m.attr(d)) {
                for e in entries {
                    attrs.insert(m.str(e.name).to_string(), attr_text(m, e.value));
                }
            }
            Port {
                ty: type_to_string(m, t),
                attrs,
            }
        })
        .collect()
}

fn function_info(
    m: &Module,
    op: OpId,
    donated: &mut Vec<String>,
    sharded: &mut usize,
) -> FunctionInfo {
    let name = match m.op_attr(op, "sym_name").map(|a| m.attr(a)) {
        Some(Attribute::String { escaped, .. }) => escaped.to_string(),
        _ => "?".into(),
    };
    let visibility = match m.op_attr(op, "sym_visibility").map(|a| m.attr(a)) {
        Some(Attribute::String { escaped, .. }) => escaped.to_string(),
        _ => "public".into(),
    };
    let (inputs, results) = match m.op_attr(op, "function_type").map(|a| m.attr(a)) {
        Some(Attribute::Type(t)) => match m.ty(*t) {
            Type::Function { inputs, results } => (inputs.clone(), results.clone()),
            _ => (Vec::new(), Vec::new()),
        },
        _ => (Vec::new(), Vec::new()),
    };
    let args = ports(m, &inputs, m.op_attr(op, "arg_attrs"));
    let results = ports(m, &results, m.op_attr(op, "res_attrs"));
    for (i, a) in args.iter().enumerate() {
        if a.attrs.contains_key("tf.aliasing_output") || a.attrs.contains_key("jax.buffer_donor") {
            donated.push(format!("{name}:{i}"));
        }
    }
    *sharded += args
        .iter()
        .chain(results.iter())
        .filter(|p| {
            p.attrs
                .keys()
                .any(|k| k == "mhlo.sharding" || k == "sdy.sharding")
        })
        .count();
    let mut ops = 0;
    m.walk(op, &mut |_| ops += 1);
    FunctionInfo {
        name,
        visibility,
        args,
        results,
        ops: ops - 1,
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "size: {} bytes, {} ops", self.bytes, self.ops)?;
        for (k, v) in &self.module_attrs {
            writeln!(f, "module attribute {k} = {v}")?;
        }
        for func in &self.functions {
            writeln!(
                f,
                "func {} @{} ({} ops)",
                func.visibility, func.name, func.ops
            )?;
            for (i, a) in func.args.iter().enumerate() {
                write!(f, "  arg {i}: {}", a.ty)?;
                for (k, v) in &a.attrs {
                    write!(f, " {k}={v}")?;
                }
                writeln!(f)?;
            }
            for (i, a) in func.results.iter().enumerate() {
                write!(f, "  result {i}: {}", a.ty)?;
                for (k, v) in &a.attrs {
                    write!(f, " {k}={v}")?;
                }
                writeln!(f)?;
            }
        }
        writeln!(f, "ops by dialect:")?;
        for (k, v) in &self.dialects {
            writeln!(f, "  {k}: {v}")?;
        }
        writeln!(f, "ops:")?;
        let mut hist: Vec<_> = self.op_histogram.iter().collect();
        hist.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (k, v) in hist {
            writeln!(f, "  {k}: {v}")?;
        }
        if !self.custom_calls.is_empty() {
            writeln!(f, "custom_call targets:")?;
            for (k, v) in &self.custom_calls {
                writeln!(f, "  {k}: {v}")?;
            }
        }
        for (k, v) in &self.meshes {
            writeln!(f, "mesh @{k} = {v}")?;
        }
        writeln!(f, "sharded ports: {}", self.sharded_ports)?;
        if self.donated.is_empty() {
            writeln!(f, "donated arguments: none")?;
        } else {
            writeln!(f, "donated arguments: {}", self.donated.join(", "))?;
        }
        Ok(())
    }
}
