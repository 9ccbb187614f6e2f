//! Dynamic artifacts (format [`FORMAT_DYNAMIC`]): ONE module whose `@main`
//! has `?` dimensions, refined per concrete shape by every consumer
//! (Python's `Artifact.run`, `hlobridge-deploy`, so `hlobridge serve` and
//! `hlobridge run`) through the core's refinement pass, then compiled and
//! cached per shape.
//!
//! The manifest says which dimensions are dynamic and what they may be:
//!
//! - `dynamic.symbols`: each symbolic dimension by name (`batch`, `seq`)
//!   with its range (`min`, and `max` when bounded), the range the capture
//!   proved the program valid for (Dynamo's value range; JAX's `>= 1`);
//! - `params[i].dims` / `outputs[i].dims`: per dimension, a number (fixed)
//!   or a symbol's name (an output may name an expression of symbols,
//!   informational only). Inputs that name the same symbol must agree.
//!
//! [`Manifest::check_shapes`] checks a request's shapes against these
//! before anything runs, and says which input, which dimension and which
//! constraint a violation breaks ([`ShapeViolation`]); the module's own
//! shape assertions are checked again by the refinement. The batch
//! dimension (with `batch_dim`) is one symbol: a batch below its `min` is
//! padded up to it when the rows are independent
//! ([`Manifest::bucket_for`]), never above its `max`.

use crate::error::{ArtifactError, Result};
use crate::manifest::Manifest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The format a dynamic artifact is written with (static ones keep
/// [`crate::FORMAT`], so older runtimes still read them).
pub const FORMAT_DYNAMIC: &str = "hlobridge-artifact/2";

/// Largest number of symbols a manifest may declare.
pub const MAX_SYMBOLS: usize = 64;

/// One dimension of a parameter or output in a dynamic artifact.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Dim {
    /// A fixed size.
    Fixed(i64),
    /// A symbol's name (for outputs, possibly an expression of symbols).
    Symbol(String),
}

/// A symbolic dimension and its range.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Symbol {
    /// Its name, as the exporter was told (`batch`, `seq`).
    pub name: String,
    /// The smallest value the program is valid for.
    pub min: i64,
    /// The largest, when bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
}

impl Symbol {
    /// The range as text: `batch >= 2`, `2 <= seq <= 512`.
    pub fn constraint(&self) -> String {
        match self.max {
            Some(hi) => format!("{} <= {} <= {hi}", self.min, self.name),
            None => format!("{} >= {}", self.name, self.min),
        }
    }
}

/// The dynamic section of a manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dynamic {
    /// The symbolic dimensions.
    pub symbols: Vec<Symbol>,
}

/// A request shape that breaks the manifest's constraints: which input,
/// which dimension, which constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeViolation {
    /// The input's name.
    pub input: String,
    /// The dimension (axis) of that input, when one is at fault.
    pub dim: Option<usize>,
    /// The constraint broken (`batch >= 2`, `seq == 16 (as input mask)`,
    /// `rank 3`).
    pub constraint: String,
    /// What the request has there.
    pub got: String,
}

impl std::fmt::Display for ShapeViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.dim {
            Some(d) => write!(
                f,
                "input {} dim {d} is {}: violates {}",
                self.input, self.got, self.constraint
            ),
            None => write!(
                f,
                "input {} has {}: violates {}",
                self.input, self.got, self.constraint
            ),
        }
    }
}

impl Manifest {
    /// Whether this is a dynamic artifact (one module, refined per shape).
    pub fn is_dynamic(&self) -> bool {
        self.dynamic.is_some()
    }

    /// The symbol named `name`.
    pub fn symbol(&self, name: &str) -> Option<&Symbol> {
        self.dynamic
            .as_ref()
            .and_then(|d| d.symbols.iter().find(|s| s.name == name))
    }

    /// The batch dimension's symbol (a dynamic artifact with `batch_dim`).
    pub fn batch_symbol(&self) -> Option<&Symbol> {
        let bd = self.batch_dim?;
        let p = self.params.iter().find(|p| !p.weight)?;
        match p.dims.as_ref()?.get(bd)? {
            Dim::Symbol(s) => self.symbol(s),
            Dim::Fixed(_) => None,
        }
    }

    /// Checks a request's input shapes (`(name, dims)`, any order; names
    /// and presence are the caller's check) against the manifest: ranks,
    /// fixed sizes, each symbol's range and agreement between the inputs
    /// that share it. The batch symbol's lower bound is left to
    /// [`Manifest::bucket_for`] (which pads up to it when it may). Returns
    /// each symbol's value. A static artifact: only ranks and fixed sizes
    /// off the batch dim.
    pub fn check_shapes(
        &self,
        shapes: &[(&str, &[i64])],
    ) -> std::result::Result<BTreeMap<String, i64>, ShapeViolation> {
        let mut values: BTreeMap<String, (i64, String, usize)> = BTreeMap::new();
        let batch = self.batch_symbol().map(|s| s.name.clone());
        for (name, shape) in shapes {
            let Some(p) = self.params.iter().find(|p| !p.weight && p.name == *name) else {
                continue;
            };
            let fixed: Vec<Dim> = p.shape.iter().map(|&d| Dim::Fixed(d)).collect();
            let dims = p.dims.as_ref().unwrap_or(&fixed);
            if shape.len() != dims.len() {
                return Err(ShapeViolation {
                    input: p.name.clone(),
                    dim: None,
                    constraint: format!("rank {}", dims.len()),
                    got: format!("rank {} ({shape:?})", shape.len()),
                });
            }
            for (d, (want, &got)) in dims.iter().zip(shape.iter()).enumerate() {
                match want {
                    // A static artifact's batch goes through bucket_for.
                    Dim::Fixed(_) if Some(d) == self.batch_dim && self.dynamic.is_none() => {}
                    Dim::Fixed(n) => {
                        if got != *n {
                            return Err(ShapeViolation {
                                input: p.name.clone(),
                                dim: Some(d),
                                constraint: format!("size == {n} (a fixed dimension)"),
                                got: got.to_string(),
                            });
                        }
                    }
                    Dim::Symbol(s) => {
                        let sym = self.symbol(s).ok_or_else(|| ShapeViolation {
                            input: p.name.clone(),
                            dim: Some(d),
                            constraint: format!("the undeclared symbol {s:?}"),
                            got: got.to_string(),
                        })?;
                        let is_batch = batch.as_deref() == Some(s.as_str());
                        if (got < sym.min && !is_batch)
                            || got < 1
                            || sym.max.is_some_and(|m| got > m)
                        {
                            return Err(ShapeViolation {
                                input: p.name.clone(),
                                dim: Some(d),
                                constraint: if got < 1 {
                                    format!("{} >= 1", sym.name)
                                } else {
                                    sym.constraint()
                                },
                                got: got.to_string(),
                            });
                        }
                        if let Some((v, other, od)) = values.get(s) {
                            if *v != got {
                                return Err(ShapeViolation {
                                    input: p.name.clone(),
                                    dim: Some(d),
                                    constraint: format!(
                                        "{s} == {v} (as input {other} dim {od}: inputs that share a symbol agree)"
                                    ),
                                    got: got.to_string(),
                                });
                            }
                        } else {
                            values.insert(s.clone(), (got, p.name.clone(), d));
                        }
                    }
                }
            }
        }
        Ok(values.into_iter().map(|(k, (v, _, _))| (k, v)).collect())
    }

    /// Checks the dynamic section (called by [`Manifest::parse`]).
    pub(crate) fn check_dynamic(&self) -> Result<()> {
        let bad = |m: String| Err(ArtifactError::Manifest(m));
        let Some(dy) = &self.dynamic else {
            if self.params.iter().any(|p| p.dims.is_some())
                || self.outputs.iter().any(|o| o.dims.is_some())
            {
                return bad("dims are given but the manifest has no dynamic section".into());
            }
            return Ok(());
        };
        if self.format != FORMAT_DYNAMIC {
            return Err(ArtifactError::Version(format!(
                "a dynamic artifact needs format {FORMAT_DYNAMIC:?}, the manifest says {:?}",
                self.format
            )));
        }
        if dy.symbols.is_empty() || dy.symbols.len() > MAX_SYMBOLS {
            return bad(format!(
                "dynamic.symbols: 1 to {MAX_SYMBOLS} symbols, not {}",
                dy.symbols.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for s in &dy.symbols {
            if s.name.is_empty() || s.name.len() > 128 || !seen.insert(s.name.as_str()) {
                return bad(format!(
                    "dynamic.symbols: bad or repeated name {:?}",
                    s.name
                ));
            }
            if s.min < 1 || s.max.is_some_and(|m| m < s.min) {
                return bad(format!(
                    "dynamic.symbols: {:?} has the empty or non-positive range min {} max {:?}",
                    s.name, s.min, s.max
                ));
            }
        }
        if self.modules.len() != 1 || self.modules[0].batch.is_some() {
            return bad("a dynamic artifact has exactly one module, without a batch size".into());
        }
        for p in &self.params {
            match &p.dims {
                None if p.weight => {}
                None => return bad(format!("input {:?} has no dims", p.name)),
                Some(dims) => {
                    if dims.len() != p.shape.len() {
                        return bad(format!("{:?}: dims and shape differ in rank", p.name));
                    }
                    for (d, (dim, &ex)) in dims.iter().zip(&p.shape).enumerate() {
                        match dim {
                            Dim::Fixed(n) if *n != ex || *n < 0 => {
                                return bad(format!(
                                    "{:?} dim {d}: fixed size {n}, the example shape has {ex}",
                                    p.name
                                ))
                            }
                            Dim::Symbol(s) if p.weight || self.symbol(s).is_none() => {
                                return bad(format!(
                                    "{:?} dim {d}: {s:?} is no declared symbol{}",
                                    p.name,
                                    if p.weight {
                                        " (weights are static)"
                                    } else {
                                        ""
                                    }
                                ))
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        for o in &self.outputs {
            if o.dims.as_ref().is_some_and(|d| d.len() != o.shape.len()) {
                return bad(format!(
                    "output {:?}: dims and shape differ in rank",
                    o.name
                ));
            }
        }
        if let Some(bd) = self.batch_dim {
            let names: std::collections::HashSet<Option<&str>> = self
                .params
                .iter()
                .filter(|p| !p.weight)
                .map(|p| match p.dims.as_ref().and_then(|d| d.get(bd)) {
                    Some(Dim::Symbol(s)) => Some(s.as_str()),
                    _ => None,
                })
                .collect();
            if names.len() != 1 || names.contains(&None) {
                return bad(format!(
                    "batch_dim {bd}: every input must name one and the same symbol there"
                ));
            }
        }
        Ok(())
    }
}

/// The batch size a dynamic artifact runs `rows` at (see
/// [`Manifest::bucket_for`]).
pub(crate) fn dynamic_bucket(
    m: &Manifest,
    sym: &Symbol,
    rows: i64,
) -> std::result::Result<i64, String> {
    if rows < 1 || sym.max.is_some_and(|hi| rows > hi) {
        return Err(format!(
            "batch size {rows} violates {} (the batch dim's symbol)",
            if rows < 1 {
                format!("{} >= 1", sym.name)
            } else {
                sym.constraint()
            }
        ));
    }
    if rows >= sym.min {
        return Ok(rows);
    }
    if !m.batchable() {
        return Err(format!(
            "batch size {rows} violates {} (the exporter found that this model's rows are \
             not independent, so inputs are not padded)",
            sym.constraint()
        ));
    }
    Ok(sym.min)
}
