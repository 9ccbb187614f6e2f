//! `hlobridge._native.rewrite_collectives`: the stitcher pass that puts the
//! collectives of torch segments into the global-device-id form, for
//! running a stitched program SPMD over several processes
//! (`hlobridge.spmd`). GIL released.

use pyo3::prelude::*;

/// Rewrite the collectives of module `text` for a program that runs on
/// `num_devices` global devices. The rewritten all-reduces take `groups`
/// (global device ids; default: one group of every device); `first_channel`
/// is the first channel id to hand out (default: one above the largest in
/// the module). Returns the new
/// text and the report as JSON (`rewritten`, `tokens_dropped`, `kept`,
/// `channels`).
#[pyfunction]
#[pyo3(signature = (text, num_devices, groups = None, first_channel = None))]
pub fn rewrite_collectives(
    py: Python<'_>,
    text: &str,
    num_devices: u32,
    groups: Option<Vec<Vec<i64>>>,
    first_channel: Option<i64>,
) -> PyResult<(String, String)> {
    let text = text.to_owned();
    let out = py.allow_threads(move || {
        let target = hlobridge::lower::CollectiveTarget {
            num_devices,
            groups,
            first_channel,
        };
        let (text, report) = hlobridge::lower::rewrite_collectives_text(&text, &target)?;
        let report = serde_json::to_string(&report).unwrap_or_default();
        Ok::<_, hlobridge::Error>((text, report))
    });
    out.map_err(crate::errors::to_py)
}
