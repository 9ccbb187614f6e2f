//! The stitcher: merge modules from different producers (torch_xla
//! exports and lazy traces, `jax.jit` lowerings, Pallas kernels) into ONE
//! StableHLO module with a single public `@main`, so XLA compiles one graph
//! and fuses across the seams.
//!
//! A program is a list of segments. Each segment is a module with an entry
//! function; its parameters bind to buffer handles and its results define
//! new handles. Handles are program inputs or segment outputs, may feed any
//! number of segments, and program outputs are handles. A program input
//! may be updated in place as a program output ([`InputAlias`]).

mod alias;
mod dce;
mod emit;
pub(crate) mod graph;
mod merge;
mod plan;
mod report;
pub(crate) mod sharding;

pub use alias::InputAlias;
pub use merge::stitch;
pub use plan::{Plan, PlanInput, PlanOutput, PlanSegment};
pub use report::{HandleReport, SegmentReport, StitchReport};

use crate::error::{Error, Result};
use crate::ir::Module;
use std::path::Path;

/// A segment ready to stitch: its parsed module plus its bindings.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Segment name.
    pub name: String,
    /// Producer (`torch`, `jax`, `pallas`, or anything descriptive).
    pub producer: String,
    /// The parsed module.
    pub module: Module,
    /// Hash of the module text and entry, used to emit identical segments once.
    pub content_hash: u64,
    /// Entry function name.
    pub entry: String,
    /// Handles bound to the entry's parameters.
    pub inputs: Vec<String>,
    /// Handle names for the entry's results (`_` drops one; empty = default names).
    pub outputs: Vec<String>,
    /// Handles that may be converted to the parameter's element type.
    pub casts: Vec<String>,
}

impl Segment {
    /// Parse `text` (named `file` in errors) as a segment.
    pub fn from_text(name: &str, file: &str, text: &str) -> Result<Segment> {
        let module = crate::parse_module_named(file, text)?;
        Ok(Segment {
            name: name.to_string(),
            producer: "unknown".into(),
            module,
            content_hash: fx_hash(text),
            entry: "main".into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            casts: Vec::new(),
        })
    }

    /// Set the entry function.
    pub fn entry(mut self, entry: &str) -> Self {
        self.entry = entry.to_string();
        self
    }

    /// Bind the entry's parameters to handles.
    pub fn inputs<S: AsRef<str>>(mut self, handles: &[S]) -> Self {
        self.inputs = handles.iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// Name the entry's results (`_` drops one).
    pub fn outputs<S: AsRef<str>>(mut self, handles: &[S]) -> Self {
        self.outputs = handles.iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// Set the producer label.
    pub fn producer(mut self, producer: &str) -> Self {
        self.producer = producer.to_string();
        self
    }
}

/// The builder form of a plan: program inputs, segments, outputs.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// Program inputs: name, type text, donate.
    pub inputs: Vec<PlanInput>,
    /// Segments.
    pub segments: Vec<Segment>,
    /// Program outputs.
    pub outputs: Vec<PlanOutput>,
    /// Inputs updated in place as outputs (`tf.aliasing_output` on `@main`).
    pub aliases: Vec<InputAlias>,
    /// Inline segment bodies into `@main` (default true).
    pub inline: bool,
}

impl Program {
    /// An empty program (inlining on).
    pub fn new() -> Self {
        Program {
            inline: true,
            ..Default::default()
        }
    }

    /// Add a program input.
    pub fn input(mut self, name: &str, ty: &str) -> Self {
        self.inputs.push(PlanInput {
            name: name.into(),
            ty: ty.into(),
            donate: false,
        });
        self
    }

    /// Add a donated program input.
    pub fn donated_input(mut self, name: &str, ty: &str) -> Self {
        self.inputs.push(PlanInput {
            name: name.into(),
            ty: ty.into(),
            donate: true,
        });
        self
    }

    /// Add a segment.
    pub fn segment(mut self, s: Segment) -> Self {
        self.segments.push(s);
        self
    }

    /// Add a program output.
    pub fn output(mut self, handle: &str) -> Self {
        self.outputs.push(PlanOutput {
            handle: handle.into(),
            name: None,
        });
        self
    }

    /// Update program input `input` in place as program output `output`
    /// (checked when stitching: [`crate::Error::Alias`]).
    pub fn alias(mut self, input: usize, output: usize) -> Self {
        self.aliases.push(InputAlias { input, output });
        self
    }

    /// Turn inlining on or off.
    pub fn inline(mut self, on: bool) -> Self {
        self.inline = on;
        self
    }

    /// Load a plan file and the modules it names (paths relative to it).
    pub fn from_plan_file(path: &Path) -> Result<Program> {
        let plan = Plan::from_file(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_plan(&plan, base)
    }

    /// Build from a parsed plan; module paths are relative to `base`.
    pub fn from_plan(plan: &Plan, base: &Path) -> Result<Program> {
        let mut segments = Vec::with_capacity(plan.segments.len());
        for s in &plan.segments {
            let path = base.join(&s.module);
            let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
            let mut seg = Segment::from_text(&s.name, &path.display().to_string(), &text)?;
            seg.content_hash = fx_hash(&format!("{text}\u{0}{:?}", s.entry));
            seg.entry = s.entry.clone().unwrap_or_else(|| "main".into());
            seg.inputs = s.inputs.clone();
            seg.outputs = s.outputs.clone();
            seg.casts = s.casts.clone();
            seg.producer = s
                .producer
                .clone()
                .unwrap_or_else(|| guess_producer(&seg.module));
            segments.push(seg);
        }
        Ok(Program {
            inputs: plan.inputs.clone(),
            segments,
            outputs: plan.outputs.clone(),
            aliases: plan.aliases.clone(),
            inline: plan.inline.unwrap_or(true),
        })
    }
}

/// Guess who produced a module from its name and contents.
pub fn guess_producer(m: &Module) -> String {
    let mut name = String::new();
    for op in m.top_ops() {
        if let Some(a) = m.op_attr(op, "sym_name") {
            if let crate::ir::Attribute::String { escaped, .. } = m.attr(a) {
                name = escaped.to_string();
            }
        }
    }
    let mut pallas = false;
    for op in m.top_ops() {
        m.walk(op, &mut |o| {
            if m.op_name(o) == "stablehlo.custom_call" {
                if let Some(t) = m.op_attr(o, "call_target_name") {
                    if let crate::ir::Attribute::String { escaped, .. } = m.attr(t) {
                        if matches!(
                            &**escaped,
                            "tpu_custom_call" | "mosaic_gpu_v2" | "__gpu$xla.gpu.triton"
                        ) {
                            pallas = true;
                        }
                    }
                }
            }
        });
    }
    if pallas {
        "pallas".into()
    } else if name.starts_with("IrToHlo") || name.contains("torch") {
        "torch".into()
    } else if name.starts_with("jit_") {
        "jax".into()
    } else {
        "unknown".into()
    }
}

/// The result of stitching.
#[derive(Debug)]
pub struct Stitched {
    /// The fused module.
    pub module: Module,
    /// What went where.
    pub report: StitchReport,
}

fn fx_hash(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    s.hash(&mut h);
    h.finish()
}
