//! `hlobridge inspect FILE`.

use crate::error::{CliError, Result};
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `hlobridge inspect`.
#[derive(Args)]
pub struct InspectArgs {
    /// The module to inspect (`-` for standard input).
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Read a file (or stdin for `-`), returning its display name and text.
pub fn read_input(path: &Path) -> Result<(String, String)> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| CliError::io("<stdin>", e))?;
        return Ok(("<stdin>".into(), s));
    }
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| CliError::io(&name, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        CliError::Input(format!(
            "{name}: not UTF-8 text (byte {}); is this MLIR bytecode? hlobridge reads the text form",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok((name, text))
}

/// Run `inspect`.
pub fn run(a: InspectArgs) -> Result<()> {
    let (name, text) = read_input(&a.file)?;
    let m =
        hlobridge::parse_module_named(&name, &text).map_err(|e| CliError::Parse(e.to_string()))?;
    let report = hlobridge::inspect::inspect(&m, text.len());
    let text = if a.json {
        serde_json::to_string_pretty(&report).map_err(|e| CliError::Render(e.to_string()))? + "\n"
    } else {
        report.to_string()
    };
    crate::stdout::write(&text)
}
