//! The stitch plan: program inputs, segments (modules with an entry
//! function whose parameters and results bind to named buffer handles) and
//! program outputs. Read from TOML or JSON with serde; the same model is
//! available as a builder.
//!
//! ```toml
//! [[input]]
//! name = "x"
//! type = "tensor<8x16xf32>"
//! donate = false
//! [[segment]]
//! name = "torch_pre"
//! module = "pre.mlir"     # relative to the plan file
//! entry = "main"          # optional
//! inputs = ["x", "w"]
//! outputs = ["h", "_"]    # "_" drops a result
//! [[output]]
//! handle = "y"
//! [[alias]]               # optional: input 0 updated in place as output 0
//! input = 0
//! output = 0
//! ```

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A program input (an external buffer).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanInput {
    /// Handle name.
    pub name: String,
    /// Its type, e.g. `tensor<8x16xf32>`.
    #[serde(rename = "type")]
    pub ty: String,
    /// Donate the buffer to the program (`jax.buffer_donor`).
    #[serde(default)]
    pub donate: bool,
}

/// One segment: a module and how its entry function binds to handles.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanSegment {
    /// Segment name (unique in the plan).
    pub name: String,
    /// Path of the module, relative to the plan file.
    pub module: PathBuf,
    /// Entry function (default `main`).
    #[serde(default)]
    pub entry: Option<String>,
    /// Handles bound to the entry's parameters, in order.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Handle names for the entry's results, in order; `_` drops one.
    /// When empty, results are named `<segment>.<port>` where the port is
    /// the result's `jax.result_info` or `outN`.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Who produced the module: `torch`, `jax`, `pallas` (informational).
    #[serde(default)]
    pub producer: Option<String>,
    /// Handles this segment may receive with a different element type; a
    /// `stablehlo.convert` is inserted for them. Nothing is cast unless
    /// listed here.
    #[serde(default)]
    pub casts: Vec<String>,
}

/// A program output.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanOutput {
    /// The handle returned.
    pub handle: String,
    /// Result name (`jax.result_info`); defaults to the handle name.
    #[serde(default)]
    pub name: Option<String>,
}

/// A whole plan.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Program inputs, in order.
    #[serde(default, rename = "input")]
    pub inputs: Vec<PlanInput>,
    /// Segments (any order; they are sorted by their data dependencies).
    #[serde(default, rename = "segment")]
    pub segments: Vec<PlanSegment>,
    /// Program outputs, in order.
    #[serde(default, rename = "output")]
    pub outputs: Vec<PlanOutput>,
    /// Program inputs updated in place as program outputs.
    #[serde(default, rename = "alias", skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<super::InputAlias>,
    /// Inline segment bodies into `@main` (default true).
    #[serde(default)]
    pub inline: Option<bool>,
}

impl Plan {
    /// Read a plan from a `.toml` or `.json` file.
    pub fn from_file(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        let is_json = path.extension().is_some_and(|e| e == "json");
        Self::from_str_as(&text, is_json).map_err(|e| match e {
            Error::Plan(msg) => Error::Plan(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// Parse plan text as JSON or TOML.
    pub fn from_str_as(text: &str, json: bool) -> Result<Plan> {
        if json {
            serde_json::from_str(text).map_err(|e| Error::Plan(e.to_string()))
        } else {
            toml::from_str(text).map_err(|e| Error::Plan(e.to_string()))
        }
    }

    /// Serialize as TOML.
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::Plan(e.to_string()))
    }
}
