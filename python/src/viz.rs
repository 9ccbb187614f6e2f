//! `hlobridge._native.viz_programs`: draw stitched programs (the plans a
//! `torch.compile` graph or a train step stitched) with the core's
//! renderer, [`hlobridge::viz::Graph`] — the same one `hlobridge viz` uses.
//!
//! The output format follows the path's suffix like the CLI: `.html`
//! (self-contained page, one section per program), `.svg` (the built-in
//! layout; the extension never runs Graphviz) or `.dot`. Several programs
//! in one `.svg`/`.dot` are drawn side by side in one picture, their nodes
//! prefixed by the program's label. The GIL is released while drawing.

use hlobridge::viz::{Graph, NodeKind};
use pyo3::prelude::*;

use crate::stitch::{program_from_spec, SegmentSpec};

/// One program: `(label, inputs (name, type, donate), segments, output handles)`.
type ProgramSpec = (
    String,
    Vec<(String, String, bool)>,
    Vec<SegmentSpec>,
    Vec<String>,
);

fn graph_of(spec: ProgramSpec) -> hlobridge::Result<Graph> {
    let (label, inputs, segments, outputs) = spec;
    let program = program_from_spec(inputs, segments, outputs)?;
    Graph::from_program(&program, &label)
}

/// Several graphs as one picture: node ids prefixed by the graph's index,
/// segment labels by the graph's label, layers kept (so each column holds
/// every graph's nodes of that depth).
fn merge(graphs: Vec<Graph>, title: &str) -> Graph {
    let mut out = Graph {
        title: title.to_string(),
        ..Default::default()
    };
    for (k, g) in graphs.into_iter().enumerate() {
        let base = out.nodes.len();
        for mut n in g.nodes {
            n.id = format!("g{k}/{}", n.id);
            if n.kind == NodeKind::Block || n.kind == NodeKind::Unused {
                n.label = format!("{}: {}", g.title, n.label);
            }
            out.nodes.push(n);
        }
        for mut e in g.edges {
            e.from += base;
            e.to += base;
            out.edges.push(e);
        }
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One HTML page with one section (heading, picture, handle table) per graph.
fn html(graphs: &[Graph], title: &str) -> String {
    if graphs.len() == 1 {
        return graphs[0].to_html();
    }
    let mut page = String::new();
    for (k, g) in graphs.iter().enumerate() {
        let doc = g.to_html();
        let (Some(b), Some(e)) = (doc.find("<body>\n"), doc.rfind("</body>")) else {
            continue;
        };
        if k == 0 {
            // The first page's head (title, style) serves them all.
            let head = &doc[..b + "<body>\n".len()];
            let t0 = head.find("<title>").map_or(0, |i| i + "<title>".len());
            let t1 = head.find("</title>").unwrap_or(t0);
            page.push_str(&head[..t0]);
            page.push_str(&esc(title));
            page.push_str(&head[t1..]);
            page.push_str(&format!("<h1>{}</h1>\n", esc(title)));
        }
        page.push_str(&format!("<h2>{}</h2>\n", esc(&g.title)));
        page.push_str(&doc[b + "<body>\n".len()..e]);
    }
    page.push_str("</body>\n</html>\n");
    page
}

/// Draw `programs` into `path` (format by suffix: `.html`/`.htm`, `.svg`,
/// `.dot`/`.gv`); returns `(nodes, edges)` drawn.
#[pyfunction]
#[pyo3(signature = (programs, path, title))]
pub fn viz_programs(
    py: Python<'_>,
    programs: Vec<ProgramSpec>,
    path: String,
    title: String,
) -> PyResult<(usize, usize)> {
    let result = py.allow_threads(move || -> hlobridge::Result<(usize, usize)> {
        let graphs = programs
            .into_iter()
            .map(graph_of)
            .collect::<hlobridge::Result<Vec<_>>>()?;
        if graphs.is_empty() {
            return Err(hlobridge::Error::Invalid("no program to draw".into()));
        }
        let ext = std::path::Path::new(&path)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let one = |gs: Vec<Graph>| {
            if gs.len() == 1 {
                gs.into_iter().next().unwrap_or_default()
            } else {
                merge(gs, &title)
            }
        };
        let (nodes, edges) = (
            graphs.iter().map(|g| g.nodes.len()).sum(),
            graphs.iter().map(|g| g.edges.len()).sum(),
        );
        let text = match ext.as_str() {
            "html" | "htm" => html(&graphs, &title),
            "svg" => one(graphs).to_svg(),
            "dot" | "gv" => one(graphs).to_dot(),
            _ => {
                return Err(hlobridge::Error::Invalid(format!(
                    "{path}: unknown output format (use .svg, .html or .dot)"
                )))
            }
        };
        std::fs::write(&path, text).map_err(|source| hlobridge::Error::Io {
            path: path.clone(),
            source,
        })?;
        Ok((nodes, edges))
    });
    result.map_err(crate::errors::to_py)
}
