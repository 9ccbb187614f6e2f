//! A self-contained SVG (and HTML page) for a [`Graph`], laid out here:
//! nodes in columns by layer, left to right, each column centred; edges
//! as cubic curves labelled with the handle name and type, spread over
//! the sides of the boxes.

use super::dot::colors;
use super::{producer_class, Graph, NodeKind};
use std::collections::HashMap;
use std::fmt::Write;

const CHAR_W: f64 = 6.6;
const NODE_H: f64 = 46.0;
const ROW_GAP: f64 = 34.0;
const MARGIN: f64 = 30.0;
const TOP: f64 = 50.0;

/// XML-escape text for element content and attribute values.
pub(super) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * CHAR_W
}

struct Rect {
    x: f64,
    y: f64,
    w: f64,
}

fn layout(g: &Graph) -> (Vec<Rect>, f64, f64, f64) {
    let layers = g.nodes.iter().map(|n| n.layer).max().map_or(0, |l| l + 1);
    let mut cols: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for (i, n) in g.nodes.iter().enumerate() {
        cols[n.layer].push(i);
    }
    let node_w: Vec<f64> = g
        .nodes
        .iter()
        .map(|n| (text_w(&n.label).max(text_w(&n.detail)) + 24.0).max(90.0))
        .collect();
    // Horizontal gap: room for the widest edge label.
    let label_w = g
        .edges
        .iter()
        .map(|e| text_w(&e.label) * 0.92 + text_w(&e.ty) * 0.92 + 90.0)
        .fold(60.0, f64::max);
    let gap = label_w + 30.0;
    let col_h: Vec<f64> = cols
        .iter()
        .map(|c| c.len() as f64 * (NODE_H + ROW_GAP) - ROW_GAP)
        .collect();
    let height = col_h.iter().copied().fold(0.0, f64::max);
    let mut rects: Vec<Rect> = g
        .nodes
        .iter()
        .map(|_| Rect {
            x: 0.0,
            y: 0.0,
            w: 0.0,
        })
        .collect();
    let mut x = MARGIN;
    for (c, col) in cols.iter().enumerate() {
        let w = col.iter().map(|&i| node_w[i]).fold(0.0, f64::max);
        let y0 = TOP + (height - col_h[c]) / 2.0;
        for (k, &i) in col.iter().enumerate() {
            rects[i] = Rect {
                x: x + (w - node_w[i]) / 2.0,
                y: y0 + k as f64 * (NODE_H + ROW_GAP),
                w: node_w[i],
            };
        }
        if !col.is_empty() {
            x += w + gap;
        }
    }
    (rects, x - gap + MARGIN, TOP + height + 20.0, gap)
}

/// The y of the cubic curve (x1,y1) (cx1,y1) (cx2,y2) (x2,y2) where it
/// crosses `x` (bisection on the parameter; x is monotonic when x1 < x2).
fn curve_y_at(x1: f64, y1: f64, cx1: f64, cx2: f64, x2: f64, y2: f64, x: f64) -> f64 {
    let at = |t: f64, a: f64, b: f64, c: f64, d: f64| {
        let u = 1.0 - t;
        u * u * u * a + 3.0 * u * u * t * b + 3.0 * u * t * t * c + t * t * t * d
    };
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..40 {
        let mid = (lo + hi) / 2.0;
        if at(mid, x1, cx1, cx2, x2) < x {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    at(lo, y1, y1, y2, y2)
}

pub(super) fn render(g: &Graph) -> String {
    let (rects, width, graph_h, gap) = layout(g);
    let legend_h = 70.0;
    let width = width.max(560.0);
    let height = graph_h + legend_h;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    );
    s.push_str(
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>
<marker id="arrow-donated" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#c0392b"/></marker></defs>
<rect width="100%" height="100%" fill="white"/>
"##,
    );
    let _ = writeln!(
        s,
        r#"<text x="{MARGIN}" y="26" font-size="15" font-weight="bold">{}</text>"#,
        esc(&g.title)
    );
    // Spread edge endpoints over the sides of the boxes.
    let mut outs: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut ins: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, e) in g.edges.iter().enumerate() {
        outs.entry(e.from).or_default().push(i);
        ins.entry(e.to).or_default().push(i);
    }
    let slot = |list: &Vec<usize>, e: usize, r: &Rect| {
        let k = list.iter().position(|&x| x == e).unwrap_or(0);
        r.y + NODE_H * (k as f64 + 1.0) / (list.len() as f64 + 1.0)
    };
    s.push_str("<g class=\"edges\">\n");
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for (i, e) in g.edges.iter().enumerate() {
        let (a, b) = (&rects[e.from], &rects[e.to]);
        let x1 = a.x + a.w;
        let y1 = slot(&outs[&e.from], i, a);
        let x2 = b.x;
        let y2 = slot(&ins[&e.to], i, b);
        let dx = ((x2 - x1).abs() / 2.0).max(40.0);
        let (stroke, width, marker) = if e.donated {
            ("#c0392b", 3.0, "arrow-donated")
        } else if g.nodes[e.to].kind == NodeKind::Unused {
            ("#aaaaaa", 1.3, "arrow")
        } else {
            ("#555555", 1.3, "arrow")
        };
        let dash = if e.sharded {
            r#" stroke-dasharray="7 4""#
        } else {
            ""
        };
        let mut tip = format!("{}: {}", e.label, e.ty);
        if e.donated {
            tip.push_str(" (donated)");
        }
        if e.sharded {
            tip.push_str(" (sharded)");
        }
        let _ = writeln!(
            s,
            r#"<path d="M{x1:.1},{y1:.1} C{:.1},{y1:.1} {:.1},{y2:.1} {x2:.1},{y2:.1}" fill="none" stroke="{stroke}" stroke-width="{width}"{dash} marker-end="url(#{marker})"><title>{}</title></path>"#,
            x1 + dx,
            x2 - dx,
            esc(&tip)
        );
        // The label sits in the gap just before the target column, on the
        // curve, so long edges do not label over boxes they pass.
        let lx = (x2 - gap / 2.0).max((x1 + x2) / 2.0);
        let mut ly = curve_y_at(x1, y1, x1 + dx, x2 - dx, x2, y2, lx);
        // Nudge down past labels already placed at the same spot.
        while placed
            .iter()
            .any(|&(px, py): &(f64, f64)| (px - lx).abs() < 120.0 && (py - ly).abs() < 13.0)
        {
            ly += 13.0;
        }
        placed.push((lx, ly));
        let mut flags = Vec::new();
        if e.donated {
            flags.push("donated");
        }
        if e.sharded {
            flags.push("sharded");
        }
        let mut label = e.label.clone();
        if !e.ty.is_empty() {
            label = format!("{label}: {}", e.ty);
        }
        if !flags.is_empty() {
            label = format!("{label} [{}]", flags.join(", "));
        }
        let _ = writeln!(
            s,
            r#"<text x="{lx:.1}" y="{:.1}" font-size="10" text-anchor="middle" stroke="white" stroke-width="3" paint-order="stroke" fill="{}">{}</text>"#,
            ly - 3.0,
            if e.donated { "#c0392b" } else { "#222" },
            esc(&label)
        );
    }
    s.push_str("</g>\n<g class=\"nodes\">\n");
    for (n, r) in g.nodes.iter().zip(&rects) {
        let (fill, line, rx, dash) = match n.kind {
            NodeKind::Block => {
                let (f, l) = colors(producer_class(&n.producer));
                (f, l, 8.0, "")
            }
            NodeKind::Input => ("#fff6d5", "#b08d00", 23.0, ""),
            NodeKind::Output => ("#e6e0fa", "#5a46a8", 23.0, ""),
            NodeKind::Unused => ("#ffffff", "#999999", 2.0, r#" stroke-dasharray="4 3""#),
        };
        let _ = writeln!(
            s,
            r#"<g class="node {}"><title>{}</title><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{NODE_H}" rx="{rx}" fill="{fill}" stroke="{line}" stroke-width="1.6"{dash}/>"#,
            match n.kind {
                NodeKind::Block => "block",
                NodeKind::Input => "input",
                NodeKind::Output => "output",
                NodeKind::Unused => "unused",
            },
            esc(&n.id),
            r.x,
            r.y,
            r.w
        );
        let cx = r.x + r.w / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" font-size="12" font-weight="bold" text-anchor="middle">{}</text><text x="{cx:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="{line}">{}</text></g>"#,
            r.y + 19.0,
            esc(&n.label),
            r.y + 35.0,
            esc(&n.detail)
        );
    }
    s.push_str("</g>\n");
    legend(&mut s, graph_h);
    s.push_str("</svg>\n");
    s
}

fn legend(s: &mut String, y: f64) {
    let _ = writeln!(s, r#"<g class="legend" font-size="11">"#);
    let mut x = MARGIN;
    for (name, class) in [
        ("torch", "torch"),
        ("jax", "jax"),
        ("pallas", "pallas"),
        ("other", "other"),
        ("unknown", "unknown"),
    ] {
        let (f, l) = colors(class);
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{:.1}" width="58" height="20" rx="5" fill="{f}" stroke="{l}"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{name}</text>"#,
            y + 10.0,
            x + 29.0,
            y + 24.0
        );
        x += 66.0;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{0:.1}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#c0392b" stroke-width="3"/><text x="{3:.1}" y="{4:.1}">donated</text>
<line x1="{5:.1}" y1="{1:.1}" x2="{6:.1}" y2="{1:.1}" stroke="#555" stroke-width="1.3" stroke-dasharray="7 4"/><text x="{7:.1}" y="{4:.1}">sharded</text>"##,
        x + 6.0,
        y + 20.0,
        x + 46.0,
        x + 52.0,
        y + 24.0,
        x + 112.0,
        x + 152.0,
        x + 158.0,
    );
    s.push_str("</g>\n");
}

pub(super) fn html(g: &Graph) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n\
<style>body{{font-family:Helvetica,Arial,sans-serif;margin:16px}}table{{border-collapse:collapse;font-size:12px;margin-top:16px}}\
td,th{{border:1px solid #ddd;padding:3px 8px;text-align:left}}th{{background:#f4f4f4}}code{{font-size:11px}}\
.svg{{overflow:auto;border:1px solid #eee}}</style>\n</head>\n<body>\n<div class=\"svg\">\n",
        esc(&g.title)
    );
    s.push_str(&render(g));
    s.push_str("</div>\n<table>\n<tr><th>handle</th><th>from</th><th>to</th><th>type</th><th>flags</th></tr>\n");
    for e in &g.edges {
        let mut flags = Vec::new();
        if e.donated {
            flags.push("donated");
        }
        if e.sharded {
            flags.push("sharded");
        }
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&e.label),
            esc(&g.nodes[e.from].label),
            esc(&g.nodes[e.to].label),
            esc(&e.ty),
            flags.join(", ")
        );
    }
    s.push_str("</table>\n</body>\n</html>\n");
    s
}
