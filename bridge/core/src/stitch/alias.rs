//! Input-output aliasing the caller asks for: program input `k` is updated
//! in place as program output `j`, written as `tf.aliasing_output = j` on
//! `@main`'s argument `k` (a mutated input such as a static KV cache, so
//! XLA writes the new value into the input's own buffer).
//!
//! A request is checked twice: its indices against the plan before anything
//! is built ([`check_plan`]), then the two types against the fused
//! signature ([`alias_attrs`]). A pair that does not fit is
//! [`Error::Alias`], never a panic.

use super::Program;
use crate::error::{Error, Result};
use crate::ir::{Module, NamedAttr, TypeId};
use crate::print::type_to_string;
use serde::{Deserialize, Serialize};

/// Program input `input` is written in place as program output `output`.
///
/// ```toml
/// [[alias]]
/// input = 0
/// output = 1
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputAlias {
    /// Program input position.
    pub input: usize,
    /// Program output position.
    pub output: usize,
}

/// The requests' indices: in range, each input and each output aliased at
/// most once, no donated input (donation has its own aliasing).
pub(super) fn check_plan(p: &Program) -> Result<()> {
    for (n, a) in p.aliases.iter().enumerate() {
        let pair = pair(a);
        if a.input >= p.inputs.len() {
            return Err(Error::Alias(format!(
                "{pair}: the program has {} inputs",
                p.inputs.len()
            )));
        }
        if a.output >= p.outputs.len() {
            return Err(Error::Alias(format!(
                "{pair}: the program has {} outputs",
                p.outputs.len()
            )));
        }
        let name = &p.inputs[a.input].name;
        if p.inputs[a.input].donate {
            return Err(Error::Alias(format!(
                "{pair}: input '{name}' is already donated"
            )));
        }
        if let Some(b) = p.aliases[..n].iter().find(|b| b.input == a.input) {
            return Err(Error::Alias(format!(
                "{pair}: input '{name}' is already aliased ({})",
                self::pair(b)
            )));
        }
        if let Some(b) = p.aliases[..n].iter().find(|b| b.output == a.output) {
            return Err(Error::Alias(format!(
                "{pair}: output {} is already aliased ({})",
                a.output,
                self::pair(b)
            )));
        }
    }
    Ok(())
}

/// The `tf.aliasing_output` attribute of each request, by input position,
/// once `@main`'s types are known. `donated` are the outputs that donated
/// inputs already alias (a segment's own `tf.aliasing_output`).
pub(super) fn alias_attrs(
    dst: &mut Module,
    p: &Program,
    input_types: &[TypeId],
    result_types: &[TypeId],
    donated: &[usize],
) -> Result<Vec<(usize, NamedAttr)>> {
    let mut attrs = Vec::with_capacity(p.aliases.len());
    for a in &p.aliases {
        let (have, want) = (input_types[a.input], result_types[a.output]);
        if have != want {
            return Err(Error::Alias(format!(
                "{}: input '{}' is {} but output {} is {}",
                pair(a),
                p.inputs[a.input].name,
                type_to_string(dst, have),
                a.output,
                type_to_string(dst, want)
            )));
        }
        if donated.contains(&a.output) {
            return Err(Error::Alias(format!(
                "{}: output {} is already aliased by a donated input",
                pair(a),
                a.output
            )));
        }
        let value = crate::dialects::common::int_attr(dst, a.output as i64, 32);
        let value = dst.add_attr(value);
        let name = dst.sym("tf.aliasing_output");
        attrs.push((a.input, NamedAttr { name, value }));
    }
    Ok(attrs)
}

fn pair(a: &InputAlias) -> String {
    format!("input {} -> output {}", a.input, a.output)
}
