//! What the stitcher did: segments with their op counts and handles with
//! their producers, consumers and types.

use serde::Serialize;
use std::fmt;

/// One segment in the fused program.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentReport {
    /// Segment name.
    pub name: String,
    /// Producer label.
    pub producer: String,
    /// Ops of its entry body (nested included).
    pub ops: usize,
    /// True if the body was inlined into `@main`, false if called.
    pub inlined: bool,
    /// The function it was emitted as (when called).
    pub function: Option<String>,
}

/// One buffer handle.
#[derive(Clone, Debug, Serialize)]
pub struct HandleReport {
    /// Handle name.
    pub name: String,
    /// Its type.
    pub ty: String,
    /// `input` or the producing segment.
    pub producer: String,
    /// Consuming segments (and `output` when returned).
    pub consumers: Vec<String>,
    /// Donated program input.
    pub donated: bool,
}

/// The stitch report.
#[derive(Clone, Debug, Serialize, Default)]
pub struct StitchReport {
    /// Segments in execution order.
    pub segments: Vec<SegmentReport>,
    /// Handles in definition order.
    pub handles: Vec<HandleReport>,
    /// Ops removed as dead code from `@main`.
    pub dead_ops_removed: usize,
}

impl fmt::Display for StitchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "segments:")?;
        for s in &self.segments {
            writeln!(
                f,
                "  {} [{}]: {} ops, {}",
                s.name,
                s.producer,
                s.ops,
                if s.inlined {
                    "inlined".to_string()
                } else {
                    format!("called as @{}", s.function.as_deref().unwrap_or("?"))
                }
            )?;
        }
        writeln!(f, "handles:")?;
        for h in &self.handles {
            writeln!(
                f,
                "  {}: {} from {}{} -> {}",
                h.name,
                h.ty,
                h.producer,
                if h.donated { " (donated)" } else { "" },
                if h.consumers.is_empty() {
                    "(unused)".to_string()
                } else {
                    h.consumers.join(", ")
                }
            )?;
        }
        writeln!(f, "dead ops removed: {}", self.dead_ops_removed)
    }
}
