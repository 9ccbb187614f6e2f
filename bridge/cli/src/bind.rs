//! Binding `--input NAME_OR_INDEX=FILE.npy` arguments to the parameters of a
//! module's entry function: by 0-based index, `argN`, the SSA name, or a
//! `jax.arg_info` / `mhlo.name` attribute; each file is checked against the
//! parameter's element type and shape.

use crate::error::{CliError, Result};
use crate::npy::{read_npy, Npy};
use crate::runtime::tensor_info;
use hlobridge::ir::{Module, TypeId, DYNAMIC};
use std::path::Path;

/// Reads and checks one `.npy` per entry parameter of `m` from `specs`
/// (`KEY=FILE`); every parameter must be bound exactly once.
pub(crate) fn bind_inputs(m: &Module, specs: &[String]) -> Result<Vec<Npy>> {
    let params = hlobridge::conform::entry_params(m).map_err(|e| CliError::Input(e.to_string()))?;
    let mut bound: Vec<Option<Npy>> = (0..params.len()).map(|_| None).collect();
    for spec in specs {
        let (key, path) = spec.split_once('=').ok_or_else(|| {
            CliError::Input(format!("--input {spec:?}: expected NAME_OR_INDEX=FILE.npy"))
        })?;
        let idx = resolve_param(&params, key)?;
        if bound[idx].is_some() {
            return Err(CliError::Input(format!(
                "--input {key}: parameter {idx} is bound twice"
            )));
        }
        let (ty, dims) = tensor_info(m, params[idx].0)
            .map_err(|e| CliError::Input(format!("parameter {idx} ({}): {e}", params[idx].1[0])))?;
        let npy = read_npy(Path::new(path), Some(ty))
            .map_err(|e| CliError::Input(format!("--input {key}: {path}: {e}")))?;
        check_shape(&dims, &npy.shape).map_err(|e| {
            CliError::Input(format!(
                "--input {key}: {path}: shape {:?} does not match parameter {idx} ({}: {}): {e}",
                npy.shape,
                params[idx].1[0],
                hlobridge::print::type_to_string(m, params[idx].0)
            ))
        })?;
        bound[idx] = Some(npy);
    }
    if let Some(i) = bound.iter().position(|b| b.is_none()) {
        return Err(CliError::Input(format!(
            "missing input for parameter {i} ({}: {}); pass --input {i}=FILE.npy or --input {}=FILE.npy",
            params[i].1.join(" / "),
            hlobridge::print::type_to_string(m, params[i].0),
            params[i].1[0],
        )));
    }
    Ok(bound.into_iter().flatten().collect())
}

fn resolve_param(params: &[(TypeId, Vec<String>)], key: &str) -> Result<usize> {
    if let Ok(i) = key.parse::<usize>() {
        return if i < params.len() {
            Ok(i)
        } else {
            Err(CliError::Input(format!(
                "--input {key}: parameter index out of range (the entry function takes {} parameter(s))",
                params.len()
            )))
        };
    }
    let hits: Vec<usize> = (0..params.len())
        .filter(|&i| params[i].1.iter().any(|n| n == key))
        .collect();
    match hits.as_slice() {
        [i] => Ok(*i),
        [] => {
            let known: Vec<String> = params.iter().map(|p| p.1.join("/")).collect();
            Err(CliError::Input(format!(
                "--input {key}: unknown input name; parameters are: {}",
                if known.is_empty() {
                    "(none)".to_string()
                } else {
                    known.join(", ")
                }
            )))
        }
        many => Err(CliError::Input(format!(
            "--input {key}: ambiguous name (parameters {many:?}); bind by index"
        ))),
    }
}

/// `Err(detail)` when `got` does not fit `want` (dynamic dims fit any size).
fn check_shape(want: &[i64], got: &[i64]) -> Result<(), ShapeMismatch> {
    if want.len() != got.len() {
        return Err(ShapeMismatch(format!(
            "rank {} vs {}",
            got.len(),
            want.len()
        )));
    }
    for (i, (&w, &g)) in want.iter().zip(got).enumerate() {
        if w != DYNAMIC && w != g {
            return Err(ShapeMismatch(format!("dimension {i} is {g}, expected {w}")));
        }
    }
    Ok(())
}

/// How an input's shape differs from its parameter's (wrapped into the
/// `--input` error by [`bind_inputs`]).
#[derive(Debug)]
struct ShapeMismatch(String);

impl std::fmt::Display for ShapeMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
