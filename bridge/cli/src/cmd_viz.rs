//! `hlobridge viz PLAN|MODULE -o graph.svg|graph.html|graph.dot`: a picture
//! of a stitch plan (segments coloured by producer, typed handle edges,
//! program inputs and outputs, donated and sharded handles marked) or of a
//! single module (its functions and call graph).
//!
//! `.html` is always self-contained (inline SVG laid out by hlobridge).
//! `.svg` uses Graphviz (`dot -Tsvg`) when `--layout auto` finds `dot` on
//! `PATH`, else the built-in layout; `.dot` writes the DOT text.

use crate::error::{CliError, Result};
use clap::{Args, ValueEnum};
use hlobridge::stitch::Program;
use hlobridge::viz::Graph;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How `.svg` output is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Layout {
    /// Graphviz when `dot` is on PATH, else built in.
    Auto,
    /// hlobridge's own layered layout (no external tools).
    Builtin,
    /// Graphviz `dot -Tsvg` (fails if `dot` is missing).
    Graphviz,
}

/// Arguments of `hlobridge viz`.
#[derive(Args)]
pub struct VizArgs {
    /// A stitch plan (`.toml`/`.json`) or a module (`.mlir` or anything else).
    pub input: PathBuf,
    /// Output file: `.svg`, `.html` or `.dot` (default: DOT on standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Layout for `.svg` output.
    #[arg(long, value_enum, default_value_t = Layout::Auto)]
    pub layout: Layout,
}

/// Build the graph of a plan or module file.
pub fn graph_of(path: &Path) -> Result<Graph> {
    let title = path.display().to_string();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if matches!(ext, "toml" | "json") {
        let program = Program::from_plan_file(path).map_err(|e| CliError::Parse(e.to_string()))?;
        Graph::from_program(&program, &title).map_err(|e| CliError::Stitch(format!("{title}: {e}")))
    } else {
        let text = std::fs::read_to_string(path).map_err(|e| CliError::io(&title, e))?;
        let m = hlobridge::parse_module_named(&title, &text)
            .map_err(|e| CliError::Parse(e.to_string()))?;
        Graph::from_module(&m, &title).map_err(|e| CliError::Render(e.to_string()))
    }
}

fn has_dot() -> bool {
    Command::new("dot")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn graphviz_svg(dot: &str) -> Result<String> {
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::Render(format!("cannot run Graphviz `dot`: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(dot.as_bytes())
            .map_err(|e| CliError::Render(format!("writing to `dot`: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CliError::Render(format!("`dot` failed: {e}")))?;
    if !out.status.success() {
        return Err(CliError::Render(format!(
            "`dot -Tsvg` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    String::from_utf8(out.stdout)
        .map_err(|e| CliError::Render(format!("`dot` wrote invalid UTF-8: {e}")))
}

/// Render `g` for an output file named `path` (by its extension).
pub fn render_for(g: &Graph, path: &Path, layout: Layout) -> Result<String> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    match ext {
        "html" | "htm" => Ok(g.to_html()),
        "dot" | "gv" => Ok(g.to_dot()),
        "svg" => match layout {
            Layout::Builtin => Ok(g.to_svg()),
            Layout::Graphviz => graphviz_svg(&g.to_dot()),
            Layout::Auto if has_dot() => graphviz_svg(&g.to_dot()),
            Layout::Auto => Ok(g.to_svg()),
        },
        _ => Err(CliError::Input(format!(
            "{}: unknown output format (use .svg, .html or .dot)",
            path.display()
        ))),
    }
}

/// Run `viz`.
pub fn run(a: VizArgs) -> Result<()> {
    let g = graph_of(&a.input)?;
    match &a.output {
        None => {
            print!("{}", g.to_dot());
            Ok(())
        }
        Some(path) => {
            let text = render_for(&g, path, a.layout)?;
            std::fs::write(path, text).map_err(|e| CliError::io(path.display(), e))?;
            eprintln!(
                "wrote {} ({} nodes, {} edges)",
                path.display(),
                g.nodes.len(),
                g.edges.len()
            );
            Ok(())
        }
    }
}
