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
//!
//! A caller whose polling budget has run out does not go to sleep in the
//! plugin: it sleeps here ([`wait_helping`]), and is woken either by the
//! program's completion ([`wake_waiters`], from the event's `OnReady`
//! callback) or by a product large enough to be worth a wake-up. So the
//! products late in a long program get the caller's core too. Kernels ask
//! [`has_waiters`] to choose between posting work and spawning a thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// One posted piece of work: `total` chunks of `run`.
struct Job {
    total: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    run: Box<dyn Fn(usize) + Send + Sync>,
}

static BOARD: Mutex<Option<Arc<Job>>> = Mutex::new(None);

/// Threads inside [`wait_helping`] (polling or asleep).
static WAITERS: AtomicUsize = AtomicUsize::new(0);
/// Threads asleep in [`wait_helping`]; guarded by `SLEEP` for wake-ups.
static SLEEPERS: AtomicUsize = AtomicUsize::new(0);
/// Wake-up generation: bumped under the lock on every wake-up, so that a
/// sleeper never misses one between its last check and its wait.
static SLEEP: Mutex<u64> = Mutex::new(0);
static WAKE: Condvar = Condvar::new();

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
///
/// With `wake`, threads asleep in [`wait_helping`] are woken to help: worth
/// it only for work that takes much longer than a wake-up (tens of µs).
pub(crate) fn run_shared(total: usize, wake: bool, run: impl Fn(usize) + Send + Sync + 'static) {
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
    fence(Ordering::SeqCst);
    if posted && wake && SLEEPERS.load(Ordering::SeqCst) > 0 {
        wake_waiters();
    }
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

/// Whether the board holds a job with chunks nobody has claimed yet (a
/// fully claimed job stays posted until its poster finishes its own chunk;
/// a waiter should sleep through that, not spin).
fn unclaimed_work() -> bool {
    BOARD.try_lock().is_ok_and(|slot| {
        slot.as_ref()
            .is_some_and(|j| j.next.load(Ordering::Acquire) < j.total)
    })
}

/// Whether donation is on: `HLOBRIDGE_GEMM_DONATE=0` (or `off`, `false`)
/// keeps every product on the executing thread, and waiting threads then
/// block in the plugin.
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        !matches!(
            std::env::var("HLOBRIDGE_GEMM_DONATE").as_deref(),
            Ok("0") | Ok("off") | Ok("false")
        )
    })
}

/// Whether any thread is waiting for a program in [`wait_helping`], and so
/// will run posted chunks (if asleep, once woken).
pub fn has_waiters() -> bool {
    WAITERS.load(Ordering::Acquire) > 0
}

/// A thread counted by [`has_waiters`] while this lives: it is about to
/// poll with [`help`] or to sleep in [`wait_helping`].
pub struct Waiter(());

impl Waiter {
    /// Counts the calling thread as waiting.
    pub fn register() -> Waiter {
        WAITERS.fetch_add(1, Ordering::AcqRel);
        Waiter(())
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        WAITERS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Wakes every thread asleep in [`wait_helping`]. Called when an awaited
/// event completes and when large work is posted.
pub fn wake_waiters() {
    let mut generation = SLEEP.lock().unwrap_or_else(|e| e.into_inner());
    *generation = generation.wrapping_add(1);
    WAKE.notify_all();
}

/// Waits until `done()` holds, running posted chunks meanwhile. `done` must
/// turn true only together with a [`wake_waiters`] call made after it
/// turned true (an event's `OnReady` callback does both), or the wait may
/// sleep past it.
pub fn wait_helping(_waiting: &Waiter, done: impl Fn() -> bool) {
    loop {
        if done() {
            return;
        }
        if help() {
            continue;
        }
        let generation = SLEEP.lock().unwrap_or_else(|e| e.into_inner());
        // Counted as asleep before the last checks (and fenced against the
        // poster's store of its job and load of the count): a job posted
        // after the check sees the sleeper and wakes it. A wake-up needs
        // the lock, which the wait below releases atomically, so none is
        // missed.
        SLEEPERS.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if done() || unclaimed_work() {
            SLEEPERS.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let seen = *generation;
        let guard = WAKE
            .wait_while(generation, |g| *g == seen)
            .unwrap_or_else(|e| e.into_inner());
        SLEEPERS.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
    }
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
                run_shared(257, false, move |i| {
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
    /// A thread asleep in `wait_helping` is woken by work posted with
    /// `wake`, runs a chunk of it, sleeps again, and returns once its
    /// condition holds and `wake_waiters` is called.
    #[test]
    fn a_sleeping_waiter_is_woken_to_help_and_to_return() {
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};
        let done = Arc::new(AtomicBool::new(false));
        let helped = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let done = done.clone();
            std::thread::spawn(move || {
                let w = Waiter::register();
                wait_helping(&w, || done.load(Ordering::Acquire));
                std::thread::current().id()
            })
        };
        // Until the waiter is registered and asleep.
        let t = Instant::now();
        while SLEEPERS.load(Ordering::SeqCst) == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "waiter never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(has_waiters());
        let waiter_id = waiter.thread().id();
        // Chunks that take long enough for the woken waiter to claim some.
        for _ in 0..50 {
            let h = helped.clone();
            run_shared(8, true, move |_| {
                if std::thread::current().id() == waiter_id {
                    h.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            });
            if helped.load(Ordering::Relaxed) > 0 {
                break;
            }
        }
        assert!(
            helped.load(Ordering::Relaxed) > 0,
            "the sleeping waiter never helped"
        );
        done.store(true, Ordering::Release);
        wake_waiters();
        assert_eq!(waiter.join().unwrap(), waiter_id);
    }
}
