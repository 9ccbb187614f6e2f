//! Keeps a plugin's load-time noise off the terminal: libtpu writes glog
//! lines such as `E0000 … unexpected worker hostname` and `WARNING: could not
//! determine TPU accelerator type` straight to file descriptor 2 when it
//! initializes, although a deviceless compile needs neither.
//!
//! [`capture`] points fd 2 at an unlinked temporary file while a closure
//! runs, restores it, and replays what was written: lines in this CLI's own
//! log format (a `tracing` event starts with an RFC 3339 timestamp) go back
//! to the terminal unchanged, every other line becomes a `debug` event with
//! target `plugin_stderr` (`HLOBRIDGE_LOG=plugin_stderr=debug` shows them).
//!
//! Redirecting fd 2 is process-global, so it is done only when the process
//! has one thread ([`pjrt_client::accel::single_threaded`], checked right
//! before): then no other thread can write to fd 2, `dup2` it, or observe
//! the swap, and the one thread that could start another is the one running
//! the closure. The CLI loads libtpu on its main thread before any client or
//! thread exists, so `hlobridge compile --target tpu:…` qualifies. Threads
//! the plugin starts inside the closure that write after it returns write to
//! the terminal again; nothing written is dropped. In a multithreaded
//! process the closure runs with fd 2 untouched.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Runs `f` with fd 2 redirected as described in the module docs (or not
/// redirected, when the process is not single-threaded or a step fails).
pub fn capture<T>(f: impl FnOnce() -> T) -> T {
    if !pjrt_client::accel::single_threaded() {
        tracing::debug!("plugin stderr not captured: the process is multithreaded");
        return f();
    }
    let Some(guard) = Redirect::start() else {
        return f();
    };
    let out = f();
    let text = guard.finish();
    replay(&text);
    out
}

/// fd 2 pointed at a temporary file; the saved original.
struct Redirect {
    saved: OwnedFd,
    file: File,
}

impl Redirect {
    fn start() -> Option<Redirect> {
        let file = unlinked_temp_file()?;
        // SAFETY: dup(2) on fd 2 has no memory-safety preconditions; a
        // negative result is checked, a valid one is a new descriptor this
        // process owns exclusively, so OwnedFd may close it.
        let saved = unsafe {
            let fd = libc::dup(2);
            if fd < 0 {
                return None;
            }
            OwnedFd::from_raw_fd(fd)
        };
        // SAFETY: dup2 with two valid descriptors (the temp file, open for
        // the lifetime of `file`, and fd 2); the process is single-threaded
        // (checked by the caller), so no other thread uses fd 2 meanwhile.
        if unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
            return None;
        }
        Some(Redirect { saved, file })
    }

    /// Restores fd 2 and returns what was written meanwhile.
    fn finish(mut self) -> String {
        // SAFETY: `saved` is a valid descriptor owned by `self`; dup2 makes
        // fd 2 a copy of it again (the process is still single-threaded,
        // or the plugin's threads see fd 2 swap back atomically).
        unsafe { libc::dup2(self.saved.as_raw_fd(), 2) };
        let mut text = String::new();
        let mut bytes = Vec::new();
        if self.file.seek(SeekFrom::Start(0)).is_ok() && self.file.read_to_end(&mut bytes).is_ok() {
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    }
}

/// A temporary file with no name (created, then unlinked at once).
fn unlinked_temp_file() -> Option<File> {
    let path = std::env::temp_dir().join(format!(
        "hlobridge-stderr-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .ok()?;
    let _ = std::fs::remove_file(&path);
    Some(file)
}

/// Whether `line` is one of this CLI's own `tracing` events (they start with
/// an RFC 3339 timestamp such as `2026-11-27T06:53:14.708Z`).
pub(crate) fn is_own_log_line(line: &str) -> bool {
    // A colored event starts with an ANSI escape (`ESC [ 2 m`) first.
    let line = match line.strip_prefix("\u{1b}[") {
        Some(rest) => rest.split_once('m').map_or(rest, |(_, r)| r),
        None => line,
    };
    let b = line.as_bytes();
    b.len() > 11
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
}

fn replay(text: &str) {
    for line in text.lines() {
        if is_own_log_line(line) {
            eprintln!("{line}");
        } else if !line.trim().is_empty() {
            tracing::debug!(target: "plugin_stderr", "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_own_log_line;

    #[test]
    fn own_log_lines_are_told_from_plugin_lines() {
        assert!(is_own_log_line(
            "2026-11-27T06:53:14.708138Z  WARN hlobridge: unknown variable"
        ));
        assert!(!is_own_log_line(
            "E0000 00:00:1795762394.708138   31391 common_lib.cc:554] INVALID_ARGUMENT"
        ));
        assert!(!is_own_log_line("WARNING: Logging before InitGoogle()"));
        assert!(is_own_log_line(
            "\u{1b}[2m2026-11-27T06:53:14.708138Z\u{1b}[0m  WARN x"
        ));
        assert!(!is_own_log_line(""));
    }
}
