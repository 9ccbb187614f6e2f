//! `hlobridge._native.stitch`: merge StableHLO segments into one module
//! with the Rust stitcher (GIL released), returning the fused text and the
//! stitch report as JSON. `aliases` are `(input, output)` positions of
//! program inputs updated in place (`tf.aliasing_output` on `@main`).

use pyo3::prelude::*;

/// One segment as passed from Python:
/// `(name, producer, module_text, entry, input_handles, output_handles)`.
pub(crate) type SegmentSpec = (String, String, String, String, Vec<String>, Vec<String>);

/// The stitch plan the Python side describes: `inputs` are `(name, type,
/// donate)`, `outputs` handle names. The one place these tuples become a
/// [`hlobridge::stitch::Program`] (`stitch` and `viz_programs` both call it).
pub(crate) fn program_from_spec(
    inputs: Vec<(String, String, bool)>,
    segments: Vec<SegmentSpec>,
    outputs: Vec<String>,
) -> hlobridge::Result<hlobridge::stitch::Program> {
    use hlobridge::stitch::{PlanInput, PlanOutput, Program, Segment};
    let mut program = Program::new();
    program.inputs = inputs
        .into_iter()
        .map(|(name, ty, donate)| PlanInput { name, ty, donate })
        .collect();
    for (name, producer, text, entry, ins, outs) in segments {
        let seg = Segment::from_text(&name, &format!("<segment {name}>"), &text)?
            .entry(&entry)
            .inputs(&ins)
            .outputs(&outs)
            .producer(&producer);
        program.segments.push(seg);
    }
    program.outputs = outputs
        .into_iter()
        .map(|handle| PlanOutput { handle, name: None })
        .collect();
    Ok(program)
}

/// Stitch `segments` into one module. `inputs` are `(name, type, donate)`;
/// `outputs` are handle names; `aliases` are `(input, output)` positions.
#[pyfunction]
#[pyo3(signature = (inputs, segments, outputs, inline = true, aliases = Vec::new()))]
pub fn stitch(
    py: Python<'_>,
    inputs: Vec<(String, String, bool)>,
    segments: Vec<SegmentSpec>,
    outputs: Vec<String>,
    inline: bool,
    aliases: Vec<(usize, usize)>,
) -> PyResult<(String, String)> {
    let result = py.allow_threads(move || -> Result<(String, String), hlobridge::Error> {
        use hlobridge::stitch::stitch;
        let program = aliases.into_iter().fold(
            program_from_spec(inputs, segments, outputs)?.inline(inline),
            |p, (input, output)| p.alias(input, output),
        );
        let t0 = std::time::Instant::now();
        let fused = stitch(&program)?;
        tracing::info!(
            segments = program.segments.len(),
            elapsed = ?t0.elapsed(),
            "stitched program"
        );
        let text = hlobridge::print_module(&fused.module, &hlobridge::PrintOptions::default());
        let report = serde_json::to_string(&fused.report).unwrap_or_default();
        Ok((text, report))
    });
    result.map_err(crate::errors::to_py)
}
