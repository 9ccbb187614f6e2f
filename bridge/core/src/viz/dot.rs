//! Graphviz DOT output for a [`Graph`].

use super::{producer_class, Graph, NodeKind};
use std::fmt::Write;

/// Fill and border colour of a producer family.
pub(super) fn colors(class: &str) -> (&'static str, &'static str) {
    match class {
        "torch" => ("#fde0d9", "#ee4c2c"),
        "jax" => ("#dbe8ff", "#3b6fd8"),
        "pallas" => ("#dcf3dc", "#2e9b45"),
        "other" => ("#efe3f7", "#8a4fb5"),
        _ => ("#eeeeee", "#777777"),
    }
}

/// A DOT double-quoted string.
fn q(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

pub(super) fn render(g: &Graph) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph hlobridge {{");
    let _ = writeln!(s, "  label={};", q(&g.title));
    s.push_str("  labelloc=t;\n  rankdir=LR;\n  fontname=\"Helvetica\";\n");
    s.push_str("  node [fontname=\"Helvetica\", fontsize=11];\n");
    s.push_str("  edge [fontname=\"Helvetica\", fontsize=9];\n");
    for n in &g.nodes {
        let label = format!("{}\n{}", n.label, n.detail);
        let attrs = match n.kind {
            NodeKind::Block => {
                let (fill, line) = colors(producer_class(&n.producer));
                format!(
                    "shape=box, style=\"rounded,filled\", fillcolor={}, color={}, penwidth=1.5",
                    q(fill),
                    q(line)
                )
            }
            NodeKind::Input => {
                "shape=ellipse, style=filled, fillcolor=\"#fff6d5\", color=\"#b08d00\"".into()
            }
            NodeKind::Output => {
                "shape=ellipse, style=filled, fillcolor=\"#e6e0fa\", color=\"#5a46a8\"".into()
            }
            NodeKind::Unused => {
                "shape=note, style=\"dashed\", color=\"#999999\", fontcolor=\"#777777\"".into()
            }
        };
        let _ = writeln!(s, "  {} [label={}, {attrs}];", q(&n.id), q(&label));
    }
    for e in &g.edges {
        let mut label = e.label.clone();
        if !e.ty.is_empty() {
            label.push('\n');
            label.push_str(&e.ty);
        }
        let mut tags = Vec::new();
        if e.donated {
            tags.push("donated");
        }
        if e.sharded {
            tags.push("sharded");
        }
        if !tags.is_empty() {
            let _ = write!(label, "\n[{}]", tags.join(", "));
        }
        let mut attrs = vec![format!("label={}", q(&label))];
        let mut style = Vec::new();
        if e.donated {
            style.push("bold");
            attrs.push("color=\"#c0392b\"".into());
            attrs.push("penwidth=2.5".into());
        }
        if e.sharded {
            style.push("dashed");
        }
        if !style.is_empty() {
            attrs.push(format!("style={}", q(&style.join(","))));
        }
        if g.nodes[e.to].kind == NodeKind::Unused {
            attrs.push("color=\"#999999\"".into());
        }
        let _ = writeln!(
            s,
            "  {} -> {} [{}];",
            q(&g.nodes[e.from].id),
            q(&g.nodes[e.to].id),
            attrs.join(", ")
        );
    }
    s.push_str(LEGEND);
    s.push_str("}\n");
    s
}

const LEGEND: &str = r##"  subgraph cluster_legend {
    label="legend"; fontsize=10; color="#cccccc";
    node [shape=box, style="rounded,filled", fontsize=9, penwidth=1.5];
    "legend:torch" [label="torch", fillcolor="#fde0d9", color="#ee4c2c"];
    "legend:jax" [label="jax", fillcolor="#dbe8ff", color="#3b6fd8"];
    "legend:pallas" [label="pallas", fillcolor="#dcf3dc", color="#2e9b45"];
    "legend:other" [label="other / unknown", fillcolor="#eeeeee", color="#777777"];
    "legend:a" [shape=point, width=0.05]; "legend:b" [shape=point, width=0.05];
    "legend:c" [shape=point, width=0.05]; "legend:d" [shape=point, width=0.05];
    "legend:a" -> "legend:b" [label="donated", style=bold, color="#c0392b", penwidth=2.5];
    "legend:c" -> "legend:d" [label="sharded", style=dashed];
  }
"##;
