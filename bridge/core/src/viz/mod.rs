//! Pictures of programs: a stitched [`Program`] (segments as boxes coloured
//! by producer, buffer handles as typed edges, program inputs and outputs,
//! donated and sharded handles marked) or a single module (its functions
//! and `func.call` edges, plus the public entry's inputs and outputs).
//!
//! The [`Graph`] model is rendered as Graphviz DOT ([`Graph::to_dot`]) or
//! as a self-contained SVG laid out here ([`Graph::to_svg`], wrapped in
//! HTML by [`Graph::to_html`]), so nothing external is needed.

mod dot;
mod svg;

use crate::error::{Error, Result};
use crate::ir::{AliasValue, Attribute, LocId, Location, Module, NamedAttr, OpId, TopItem};
use crate::print::type_to_string;
use crate::stitch::graph::{self, Def};
use crate::stitch::sharding::port_sharding;
use crate::stitch::{guess_producer, Program};
use std::collections::BTreeMap;

/// What a node stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A program input (or a parameter of a module's entry).
    Input,
    /// A program output (or a result of a module's entry).
    Output,
    /// A segment of a plan, or a function of a module.
    Block,
    /// Where handles nobody reads end up.
    Unused,
}

/// One node of the picture.
#[derive(Clone, Debug)]
pub struct Node {
    /// Unique id (used in DOT).
    pub id: String,
    /// Main label (segment, handle or function name).
    pub label: String,
    /// Second line: producer and entry, or the type of an input/output.
    pub detail: String,
    /// Producer (`torch`, `jax`, `pallas`, anything else) for blocks.
    pub producer: String,
    /// What it is.
    pub kind: NodeKind,
    /// Column in a left-to-right layered layout.
    pub layer: usize,
}

/// One edge: a buffer handle (or a call) flowing between nodes.
#[derive(Clone, Debug)]
pub struct Edge {
    /// Source node index.
    pub from: usize,
    /// Target node index.
    pub to: usize,
    /// Handle name (or `call` for a call edge).
    pub label: String,
    /// Its type (empty when unknown).
    pub ty: String,
    /// The handle is a donated buffer.
    pub donated: bool,
    /// A port at either end carries a sharding.
    pub sharded: bool,
}

/// A picture: nodes, edges and a title.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Title (the plan or module file).
    pub title: String,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Edges.
    pub edges: Vec<Edge>,
}

/// The colour family of a producer: `torch`, `jax`, `pallas` or `other`.
pub fn producer_class(producer: &str) -> &'static str {
    match producer {
        "torch" | "torch_xla" | "pytorch" => "torch",
        "jax" => "jax",
        "pallas" => "pallas",
        "unknown" | "" => "unknown",
        _ => "other",
    }
}

impl Graph {
    fn add_node(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// The picture of a stitch program: checks the plan the way `stitch`
    /// does (entries, port counts, handles, cycles) and fails with the same
    /// errors.
    pub fn from_program(p: &Program, title: &str) -> Result<Graph> {
        graph::check_unique_names(p)?;
        let entries = p
            .segments
            .iter()
            .map(graph::find_entry)
            .collect::<Result<Vec<_>>>()?;
        let out_names = graph::output_handle_names(p, &entries)?;
        let defs = graph::define_handles(p, &out_names)?;
        let order = graph::topo_order(p, &defs)?;
        let mut g = Graph {
            title: title.to_string(),
            ..Default::default()
        };
        let inputs: Vec<usize> = p
            .inputs
            .iter()
            .map(|i| {
                g.add_node(Node {
                    id: format!("in:{}", i.name),
                    label: i.name.clone(),
                    detail: i.ty.clone(),
                    producer: String::new(),
                    kind: NodeKind::Input,
                    layer: 0,
                })
            })
            .collect();
        // Layers: one past the deepest producer of any input handle.
        let mut seg_layer = vec![1usize; p.segments.len()];
        for &si in &order {
            let l = p.segments[si]
                .inputs
                .iter()
                .filter_map(|h| match defs.get(h.as_str()) {
                    Some(Def::Segment(src, _)) => Some(seg_layer[*src] + 1),
                    _ => None,
                })
                .max()
                .unwrap_or(1);
            seg_layer[si] = l;
        }
        let last = seg_layer.iter().copied().max().unwrap_or(0) + 1;
        let mut seg_node = vec![0usize; p.segments.len()];
        for &si in &order {
            let s = &p.segments[si];
            seg_node[si] = g.add_node(Node {
                id: format!("seg:{}", s.name),
                label: s.name.clone(),
                detail: format!("{} @{}", s.producer, s.entry),
                producer: s.producer.clone(),
                kind: NodeKind::Block,
                layer: seg_layer[si],
            });
        }
        // The type and sharding of a handle where it is defined.
        let def_port = |h: &str| -> (String, bool) {
            match defs.get(h) {
                Some(Def::Input(i)) => (p.inputs[*i].ty.clone(), false),
                Some(Def::Segment(si, k)) => {
                    let e = &entries[*si];
                    let m = &p.segments[*si].module;
                    (
                        type_to_string(m, e.results[*k]),
                        port_sharding(m, &e.res_attrs[*k]).is_some(),
                    )
                }
                None => (String::new(), false),
            }
        };
        let donated = |h: &str| matches!(defs.get(h), Some(Def::Input(i)) if p.inputs[*i].donate);
        let node_of = |h: &str| match defs.get(h) {
            Some(Def::Input(i)) => Some(inputs[*i]),
            Some(Def::Segment(si, _)) => Some(seg_node[*si]),
            None => None,
        };
        let mut used = std::collections::HashSet::new();
        for &si in &order {
            let s = &p.segments[si];
            let e = &entries[si];
            let m = &s.module;
            for (i, h) in s.inputs.iter().enumerate() {
                used.insert(h.clone());
                let Some(from) = node_of(h) else { continue };
                let (_, def_sharded) = def_port(h);
                g.edges.push(Edge {
                    from,
                    to: seg_node[si],
                    label: h.clone(),
                    ty: type_to_string(m, e.params[i]),
                    donated: donated(h),
                    sharded: def_sharded || port_sharding(m, &e.arg_attrs[i]).is_some(),
                });
            }
        }
        for o in &p.outputs {
            used.insert(o.handle.clone());
            let from = node_of(&o.handle).ok_or_else(|| {
                Error::Plan(format!(
                    "program output binds unknown handle '{}'",
                    o.handle
                ))
            })?;
            let (ty, sharded) = def_port(&o.handle);
            let name = o.name.clone().unwrap_or_else(|| o.handle.clone());
            let to = g.add_node(Node {
                id: format!("out:{name}"),
                label: name,
                detail: ty.clone(),
                producer: String::new(),
                kind: NodeKind::Output,
                layer: last,
            });
            g.edges.push(Edge {
                from,
                to,
                label: o.handle.clone(),
                ty,
                donated: donated(&o.handle),
                sharded,
            });
        }
        // Handles defined but never read: edges into one "unused" node.
        let mut sink = None;
        for (si, names) in out_names.iter().enumerate() {
            for n in names {
                if n == "_" || used.contains(n) {
                    continue;
                }
                let to = *sink.get_or_insert_with(|| {
                    g.add_node(Node {
                        id: "unused".into(),
                        label: "unused".into(),
                        detail: "dropped by stitch".into(),
                        producer: String::new(),
                        kind: NodeKind::Unused,
                        layer: last,
                    })
                });
                let (ty, sharded) = def_port(n);
                g.edges.push(Edge {
                    from: seg_node[si],
                    to,
                    label: n.clone(),
                    ty,
                    donated: false,
                    sharded,
                });
            }
        }
        Ok(g)
    }

    /// The picture of one module: every function as a box (coloured by the
    /// module's guessed producer), `func.call` edges between them, and the
    /// public entry's (`main`, else the first public function) parameters
    /// and results as inputs and outputs (a parameter named by its
    /// `loc("name")` where the module gives one, else `%argN`).
    pub fn from_module(m: &Module, title: &str) -> Result<Graph> {
        let funcs = functions(m);
        if funcs.is_empty() {
            return Err(Error::Invalid(format!("{title}: no func.func in module")));
        }
        let producer = guess_producer(m);
        let mut g = Graph {
            title: title.to_string(),
            ..Default::default()
        };
        let entry = funcs
            .iter()
            .position(|f| f.name == "main")
            .or_else(|| funcs.iter().position(|f| f.public))
            .unwrap_or(0);
        // Layers: call depth from the entry (unreached functions after it).
        let index: BTreeMap<&str, usize> = funcs
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.as_str(), i))
            .collect();
        let mut depth = vec![usize::MAX; funcs.len()];
        depth[entry] = 1;
        let mut stack = vec![entry];
        while let Some(f) = stack.pop() {
            for callee in funcs[f].calls.keys() {
                if let Some(&c) = index.get(callee.as_str()) {
                    // Longest call depth, bounded so recursion terminates.
                    let d = depth[f] + 1;
                    if d <= funcs.len() && (depth[c] == usize::MAX || depth[c] < d) {
                        depth[c] = d;
                        stack.push(c);
                    }
                }
            }
        }
        let deepest = depth
            .iter()
            .copied()
            .filter(|&d| d != usize::MAX)
            .max()
            .unwrap_or(1);
        let e = &funcs[entry];
        let (params, results) = (&e.params, &e.results);
        let arg_label = |i: usize| match e.arg_names.get(i) {
            Some(Some(name)) => name.clone(),
            _ => format!("%arg{i}"),
        };
        let ins: Vec<usize> = params
            .iter()
            .enumerate()
            .map(|(i, (ty, _, _))| {
                g.add_node(Node {
                    id: format!("in:arg{i}"),
                    label: arg_label(i),
                    detail: ty.clone(),
                    producer: String::new(),
                    kind: NodeKind::Input,
                    layer: 0,
                })
            })
            .collect();
        let fnode: Vec<usize> = funcs
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let layer = if depth[i] == usize::MAX {
                    deepest + 1
                } else {
                    depth[i]
                };
                g.add_node(Node {
                    id: format!("fn:{}", f.name),
                    label: format!("@{}", f.name),
                    detail: format!(
                        "{producer} · {} ops{}",
                        f.ops,
                        if f.public { "" } else { " · private" }
                    ),
                    producer: producer.clone(),
                    kind: NodeKind::Block,
                    layer,
                })
            })
            .collect();
        // Outputs right after the entry, beside its callees.
        let out_layer = g.nodes[fnode[entry]].layer + 1;
        for (i, (ty, donated, sharded)) in params.iter().enumerate() {
            g.edges.push(Edge {
                from: ins[i],
                to: fnode[entry],
                label: arg_label(i),
                ty: ty.clone(),
                donated: *donated,
                sharded: *sharded,
            });
        }
        for (i, (name, ty, sharded)) in results.iter().enumerate() {
            let to = g.add_node(Node {
                id: format!("out:{i}"),
                label: name.clone(),
                detail: ty.clone(),
                producer: String::new(),
                kind: NodeKind::Output,
                layer: out_layer,
            });
            g.edges.push(Edge {
                from: fnode[entry],
                to,
                label: name.clone(),
                ty: ty.clone(),
                donated: false,
                sharded: *sharded,
            });
        }
        for (i, f) in funcs.iter().enumerate() {
            for (callee, n) in &f.calls {
                if let Some(&c) = index.get(callee.as_str()) {
                    g.edges.push(Edge {
                        from: fnode[i],
                        to: fnode[c],
                        label: if *n == 1 {
                            "call".into()
                        } else {
                            format!("call ×{n}")
                        },
                        ty: String::new(),
                        donated: false,
                        sharded: false,
                    });
                }
            }
        }
        Ok(g)
    }

    /// Graphviz DOT text.
    pub fn to_dot(&self) -> String {
        dot::render(self)
    }

    /// A standalone SVG document, laid out left to right by layer.
    pub fn to_svg(&self) -> String {
        svg::render(self)
    }

    /// A self-contained HTML page holding the SVG inline.
    pub fn to_html(&self) -> String {
        svg::html(self)
    }
}

/// What the module view needs of one function.
struct FuncInfo {
    name: String,
    public: bool,
    ops: usize,
    /// Callee name → number of call sites.
    calls: BTreeMap<String, usize>,
    /// Parameters: type, donated, sharded.
    params: Vec<(String, bool, bool)>,
    /// Results: name, type, sharded.
    results: Vec<(String, String, bool)>,
    /// Each parameter's `loc("name")`, where the module names it.
    arg_names: Vec<Option<String>>,
}

/// The name a location gives (`loc("x")`, through `#loc` aliases and the
/// first named member of a fused location); `None` for other locations.
fn loc_name(m: &Module, l: LocId, depth: usize) -> Option<String> {
    if depth > 8 {
        return None;
    }
    match m.loc(l) {
        Location::Name { name, .. } => Some(name.to_string()),
        Location::Alias(a) => m.top.iter().find_map(|t| match t {
            TopItem::Alias {
                name,
                value: AliasValue::Loc(target),
            } if name == a => loc_name(m, *target, depth + 1),
            _ => None,
        }),
        Location::Fused { locs, .. } => locs.iter().find_map(|&c| loc_name(m, c, depth + 1)),
        _ => None,
    }
}

/// The `loc("name")` of each argument of `f`'s entry block.
fn arg_names(m: &Module, f: OpId) -> Vec<Option<String>> {
    let Some(&region) = m.op(f).regions.first() else {
        return Vec::new();
    };
    let Some(&block) = m.region(region).blocks.first() else {
        return Vec::new();
    };
    m.block(block)
        .args
        .iter()
        .map(|&v| m.value(v).loc.and_then(|l| loc_name(m, l, 0)))
        .collect()
}

fn str_attr(m: &Module, op: OpId, name: &str) -> Option<String> {
    match m.op_attr(op, name).map(|a| m.attr(a)) {
        Some(Attribute::String { escaped, .. }) => Some(escaped.to_string()),
        _ => None,
    }
}

fn functions(m: &Module) -> Vec<FuncInfo> {
    let mut out = Vec::new();
    for f in m.top_level_funcs() {
        let Some(name) = str_attr(m, f, "sym_name") else {
            continue;
        };
        let public = str_attr(m, f, "sym_visibility").is_none_or(|v| v == "public");
        let mut calls = BTreeMap::new();
        let mut n = 0usize;
        m.walk(f, &mut |o| {
            n += 1;
            if m.op_name(o) == "func.call" {
                if let Some(a) = m.op_attr(o, "callee") {
                    if let Attribute::SymbolRef(parts) = m.attr(a) {
                        if let Some(&last) = parts.last() {
                            let callee = m.str(last).trim_matches('"').to_string();
                            *calls.entry(callee).or_insert(0) += 1;
                        }
                    }
                }
            }
        });
        let (params, results) = match graph::entry_info(m, f, &name) {
            Ok(e) => {
                let has =
                    |attrs: &[NamedAttr], key: &str| attrs.iter().any(|a| m.str(a.name) == key);
                let params = e
                    .params
                    .iter()
                    .zip(&e.arg_attrs)
                    .map(|(&t, a)| {
                        (
                            type_to_string(m, t),
                            has(a, "jax.buffer_donor") || has(a, "tf.aliasing_output"),
                            port_sharding(m, a).is_some(),
                        )
                    })
                    .collect();
                let results = e
                    .results
                    .iter()
                    .zip(&e.res_attrs)
                    .zip(&e.port_names)
                    .map(|((&t, a), n)| {
                        (
                            n.clone(),
                            type_to_string(m, t),
                            port_sharding(m, a).is_some(),
                        )
                    })
                    .collect();
                (params, results)
            }
            Err(_) => (Vec::new(), Vec::new()),
        };
        out.push(FuncInfo {
            name,
            public,
            ops: n.saturating_sub(1),
            calls,
            params,
            results,
            arg_names: arg_names(m, f),
        });
    }
    out
}
