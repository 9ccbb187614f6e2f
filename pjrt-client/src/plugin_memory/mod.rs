//! Large host allocations of the plugin, kept for reuse
//! (`HLOBRIDGE_PLUGIN_MEMORY_POOL`).
//!
//! The CPU plugin allocates a program's temporary buffer (hundreds of MiB
//! for a real model's training step) and its results with
//! `posix_memalign`, on its own worker threads, and frees them when the
//! execution ends. glibc serves such sizes with a fresh `mmap` each time
//! (a thread arena cannot hold them, and no tunable a library can set
//! changes that), so every execution takes one page fault per 4 KiB page
//! and the kernel zeroes every page again: 220,000 faults and about 16% of
//! a BERT-base training step on a 2-core Xeon.
//!
//! [`install`] points the plugin's own imports of `malloc`,
//! `posix_memalign`, `aligned_alloc`, `realloc` and `free` at the cache in
//! [`pool`] (through the plugin's GOT, [`got`]); the rest of the process
//! keeps glibc. Requests of 8 MiB and more come from 2 MiB-aligned
//! huge-page blocks that stay mapped after they are freed (up to a byte cap,
//! `HLOBRIDGE_PLUGIN_MEMORY_CACHE_MB`) and serve the next request of their
//! size class; anything else, and any pointer the cache did not hand out,
//! is glibc's as before. It is installed before the plugin's entry point
//! runs, so no memory the plugin holds predates it.

mod got;
mod pool;

pub use pool::PoolStats;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static ATTEMPTED: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Whether the cache applies to the plugin at `path`
/// (`HLOBRIDGE_PLUGIN_MEMORY_POOL`).
pub fn wanted(path: &Path) -> bool {
    use hlobridge_config::Var;
    let value = hlobridge_config::get(Var::PluginMemoryPool);
    let auto = || {
        path.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains("cpu"))
    };
    match value.as_deref().map(str::trim) {
        None | Some("") | Some("auto") => auto(),
        Some(v) if hlobridge_config::is_off_word(v) => false,
        Some(v) if hlobridge_config::is_on_word(v) => true,
        Some(v) => {
            tracing::warn!(
                value = v,
                "HLOBRIDGE_PLUGIN_MEMORY_POOL: not auto, 1 or 0; using auto"
            );
            auto()
        }
    }
}

fn cache_cap() -> usize {
    use hlobridge_config::Var;
    match hlobridge_config::parse::<usize>(Var::PluginMemoryCacheMb) {
        Ok(Some(mb)) => mb.saturating_mul(1 << 20),
        other => {
            if let Err(e) = other {
                tracing::warn!(error = %e, "HLOBRIDGE_PLUGIN_MEMORY_CACHE_MB: using the default");
            }
            // SAFETY: sysconf has no preconditions.
            let (pages, size) = unsafe {
                (
                    libc::sysconf(libc::_SC_PHYS_PAGES),
                    libc::sysconf(libc::_SC_PAGESIZE),
                )
            };
            if pages > 0 && size > 0 {
                (pages as usize).saturating_mul(size as usize) / 4
            } else {
                1 << 30
            }
        }
    }
}

/// Points the allocation functions of the plugin loaded from `path` (it
/// must be loaded, and its code not yet run) at the cache, if
/// [`wanted`]. Once per process: later plugins keep glibc. A failure is
/// logged and leaves the plugin on glibc; it is never an error.
pub fn install(path: &Path) -> bool {
    if !wanted(path) || !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return false;
    }
    if ATTEMPTED.swap(true, Ordering::SeqCst) {
        return false;
    }
    pool::CAP.store(cache_cap(), Ordering::Relaxed);
    if !pool::register_fork_handlers() {
        tracing::warn!("plugin memory pool: pthread_atfork failed; not installed");
        return false;
    }
    // Deallocation first (see `got::redirect`).
    let hooks: [(&str, usize); 5] = [
        ("free", pool::hook_free as *const () as usize),
        ("realloc", pool::hook_realloc as *const () as usize),
        ("malloc", pool::hook_malloc as *const () as usize),
        (
            "posix_memalign",
            pool::hook_posix_memalign as *const () as usize,
        ),
        (
            "aligned_alloc",
            pool::hook_aligned_alloc as *const () as usize,
        ),
    ];
    match got::redirect(path, &hooks) {
        Ok(counts) => {
            tracing::debug!(path = %path.display(), ?counts, "plugin memory pool installed");
            INSTALLED.store(true, Ordering::SeqCst);
            true
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "plugin memory pool: not installed");
            false
        }
    }
}

/// Whether [`install`] redirected a plugin in this process.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// The cache's counters.
pub fn stats() -> PoolStats {
    pool::stats()
}

/// Returns every cached (freed) block to the OS; the bytes released.
pub fn trim() -> usize {
    pool::trim()
}
