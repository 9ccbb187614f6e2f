//! Work donation: threads that are polling for a program's completion (a
//! caller inside [`Event::wait`](crate::Event::wait)) run parts of the host
//! kernel that program is executing, instead of only yielding the core.
//!
//! A kernel splits its work into chunks and posts them on a one-slot board;
//! it then claims and runs chunks itself, and any waiting thread that looks
//! at the board ([`help`]) claims and runs others. Claims are a
//! `fetch_add` on the job's counter, so each chunk runs exactly once; the
//! kernel returns only after every claimed chunk has finished, so a helper
//! never touches the program's buffers after the kernel has returned (it
//! can only hold the job, whose claims then all fail). When nobody helps,
//! the kernel simply runs every chunk itself. The poster waits without a
//! lock, and helpers never block on the board (`try_lock`).
//!
//! This uses a core that would otherwise spin: on this project's 2-core
//! machine the caller polls while the plugin's worker runs the program, so
//! a 128³ product is split between the two without waking any thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One posted piece of work: `total` chunks of `run`.
struct Job {
    total: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    run: Box<dyn Fn(usize) + Send + Sync>,
}

static BOARD: Mutex<Option<Arc<Job>>> = Mutex::new(None);

/// Claims and runs chunks of `job` until none are left; returns whether
/// this thread ran any.
fn drain(job: &Job) -> bool {
    let mut ran = false;
    loop {
        let i = job.next.fetch_add(1, Ordering::AcqRel);
        if i >= job.total {
            return ran;
        }
        // A chunk must count as done even if it panicked, or its poster
        // would wait forever; kernels validate their inputs before posting.
        if catch_unwind(AssertUnwindSafe(|| (job.run)(i))).is_err() {
            tracing::error!(chunk = i, "host kernel chunk panicked");
        }
        job.done.fetch_add(1, Ordering::Release);
        ran = true;
    }
}

/// Runs chunks `0..total` of `run`, with help from waiting threads when
/// there are any. Returns when every chunk has finished.
pub(crate) fn run_shared(total: usize, run: impl Fn(usize) + Send + Sync + 'static) {
    let job = Arc::new(Job {
        total,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        run: Box::new(run),
    });
    let posted = match BOARD.try_lock() {
        Ok(mut slot) if slot.is_none() => {
            *slot = Some(job.clone());
            true
        }
        _ => false,
    };
    drain(&job);
    if posted {
        let mut slot = BOARD.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|j| Arc::ptr_eq(j, &job)) {
            *slot = None;
        }
    }
    let mut spins = 0u32;
    while job.done.load(Ordering::Acquire) < total {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Runs chunks of the posted job, if any; called by threads that are
/// waiting for a program. Returns whether it did any work.
pub fn help() -> bool {
    let job = match BOARD.try_lock() {
        Ok(slot) => slot.clone(),
        Err(_) => return false,
    };
    job.is_some_and(|j| drain(&j))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn every_chunk_runs_once_with_and_without_helpers() {
        for helpers in [0usize, 1, 3] {
            let hits: Arc<Vec<AtomicUsize>> =
                Arc::new((0..257).map(|_| AtomicUsize::new(0)).collect());
            let stop = Arc::new(AtomicBool::new(false));
            let threads: Vec<_> = (0..helpers)
                .map(|_| {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            help();
                            std::thread::yield_now();
                        }
                    })
                })
                .collect();
            for _ in 0..20 {
                let h = hits.clone();
                run_shared(257, move |i| {
                    h[i].fetch_add(1, Ordering::Relaxed);
                    std::hint::black_box((0..200).sum::<u64>());
                });
            }
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                t.join().unwrap();
            }
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 20),
                "helpers {helpers}"
            );
        }
    }
}
