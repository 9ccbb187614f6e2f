//! The process's memory mappings against the kernel's limit.
//!
//! Every loaded program holds mappings of its generated code, and Linux
//! caps a process at `vm.max_map_count` (65,530 by default). At the cap the
//! plugin's JIT cannot map new code, and its compile error ("Failed to
//! materialize symbols") does not say why; [`near_limit`] lets the service
//! say so.

/// `(mappings in use, vm.max_map_count)` when the process uses at least 90%
/// of the limit; `None` below it, or where it cannot be read (not Linux).
pub(crate) fn near_limit() -> Option<(usize, usize)> {
    let limit: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let maps = std::fs::read("/proc/self/maps").ok()?;
    let used = maps.iter().filter(|&&b| b == b'\n').count();
    (used.saturating_mul(10) >= limit.saturating_mul(9)).then_some((used, limit))
}
