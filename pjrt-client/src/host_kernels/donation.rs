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
//! can only hold the job, whose claims then all fail). That wait and the
//! job's removal from the board run in a drop guard, so they happen even if
//! the poster unwinds. When nobody helps, the kernel simply runs every chunk
//! itself. The poster waits without a lock, and helpers never block on the
//! board (`try_lock`).
//!
//! A chunk runs under the poster's floating-point control state (XLA's
//! workers flush subnormals; see [`fp_env`](super::fp_env)), so the result
//! does not depend on which thread ran it. A chunk that panics, on any
//! thread, makes the whole job fail with the panic's message.
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

use super::fp_env::FpEnv;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// One posted piece of work: `total` chunks of `run`.
struct Job {
    total: usize,
    /// Next chunk to claim; [`CLOSED`] once the poster stops accepting
    /// claims (see [`Posting`]).
    next: AtomicUsize,
    done: AtomicUsize,
    /// The poster's floating-point control state: every chunk runs under it
    /// (see [`fp_env`](super::fp_env)).
    fp: FpEnv,
    /// The first chunk failure (a panic), reported by [`run_shared`].
    failure: OnceLock<String>,
    run: Box<dyn Fn(usize) + Send + Sync>,
}

/// What `next` is set to when a job is closed: far above any chunk count,
/// and far enough below `usize::MAX` that late `fetch_add` claims never wrap.
const CLOSED: usize = usize::MAX / 2;

static BOARD: Mutex<Option<Arc<Job>>> = Mutex::new(None);

/// Threads inside [`wait_helping`] (polling or asleep).
static WAITERS: AtomicUsize = AtomicUsize::new(0);
/// Threads asleep in [`wait_helping`]; guarded by `SLEEP` for wake-ups.
static SLEEPERS: AtomicUsize = AtomicUsize::new(0);
/// Wake-up generation: bumped under the lock on every wake-up, so that a
/// sleeper never misses one between its last check and its wait.
static SLEEP: Mutex<u64> = Mutex::new(0);
static WAKE: Condvar = Condvar::new();

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}

/// Claims and runs chunks of `job` until none are left; returns whether
/// this thread ran any. Chunks run under the poster's floating-point state;
/// the thread's own is restored before this returns.
fn drain(job: &Job) -> bool {
    let mut fp = None;
    loop {
        let i = job.next.fetch_add(1, Ordering::AcqRel);
        if i >= job.total {
            return fp.is_some();
        }
        if fp.is_none() {
            fp = Some(job.fp.enter());
        }
        // A chunk must count as done even if it panicked, or its poster
        // would wait forever; the panic becomes the job's failure, which
        // the poster reports instead of success.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (job.run)(i))) {
            let msg = format!(
                "host kernel chunk {i} of {} panicked: {}",
                job.total,
                panic_message(payload.as_ref())
            );
            tracing::error!(message = %msg);
            let _ = job.failure.set(msg);
        }
        job.done.fetch_add(1, Ordering::Release);
    }
}

/// A job posted on the board (or not, if the board was taken). Dropping it
/// (normally, or while unwinding) takes the job off the board, closes it to
/// new claims, and waits until every chunk some thread claimed has finished:
/// after that no helper can touch the kernel's buffers, and the board never
/// holds a job whose poster has gone.
struct Posting {
    job: Arc<Job>,
    posted: bool,
}

impl Posting {
    fn post(job: Arc<Job>) -> Posting {
        let posted = match BOARD.try_lock() {
            Ok(mut slot) if slot.is_none() => {
                *slot = Some(job.clone());
                true
            }
            _ => false,
        };
        Posting { job, posted }
    }
}

impl Drop for Posting {
    fn drop(&mut self) {
        if self.posted {
            let mut slot = BOARD.lock().unwrap_or_else(|e| e.into_inner());
            if slot.as_ref().is_some_and(|j| Arc::ptr_eq(j, &self.job)) {
                *slot = None;
            }
        }
        // Chunks 0..claimed were handed out; nothing is handed out later.
        let claimed = self
            .job
            .next
            .swap(CLOSED, Ordering::AcqRel)
            .min(self.job.total);
        let mut spins = 0u32;
        while self.job.done.load(Ordering::Acquire) < claimed {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Runs chunks `0..total` of `run`, with help from waiting threads when
/// there are any, each under the calling thread's floating-point control
/// state. Returns when every chunk has finished: `Err` with a message if
/// any chunk panicked (on whichever thread ran it).
///
/// With `wake`, threads asleep in [`wait_helping`] are woken to help: worth
/// it only for work that takes much longer than a wake-up (tens of µs).
pub(crate) fn run_shared(
    total: usize,
    wake: bool,
    run: impl Fn(usize) + Send + Sync + 'static,
) -> Result<(), String> {
    let job = Arc::new(Job {
        total,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        fp: FpEnv::current(),
        failure: OnceLock::new(),
        run: Box::new(run),
    });
    let posting = Posting::post(job.clone());
    fence(Ordering::SeqCst);
    if posting.posted && wake && SLEEPERS.load(Ordering::SeqCst) > 0 {
        wake_waiters();
    }
    #[cfg(test)]
    tests::maybe_panic_after_post();
    drain(&job);
    drop(posting);
    match job.failure.get() {
        Some(msg) => Err(msg.clone()),
        None => Ok(()),
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
    *ON.get_or_init(|| !hlobridge_config::is_off(hlobridge_config::Var::GemmDonate))
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

/// Held by every lib test that posts to or watches the one job board (these
/// donation tests, and the GEMM and convolution kernels' tests, whose
/// products post when a waiter is registered), so that no test sees another
/// test's job there.
#[cfg(test)]
pub(crate) fn test_serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    /// The board is process-wide: these tests take turns with it.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        super::test_serial()
    }

    thread_local! {
        static PANIC_AFTER_POST: Cell<bool> = const { Cell::new(false) };
    }

    /// Test hook in `run_shared`: unwinds the poster between posting its
    /// job and running it, when the calling test asked for it.
    pub(super) fn maybe_panic_after_post() {
        if PANIC_AFTER_POST.with(|p| p.replace(false)) {
            panic!("poster unwinds after posting");
        }
    }

    /// Whether the board empties within 5 s. Other lib tests (the GEMM and
    /// convolution kernels') post jobs of their own concurrently, so a job
    /// seen on the board at one instant may be theirs; a job this test
    /// left behind would stay there for good.
    fn board_is_empty() -> bool {
        let t = Instant::now();
        loop {
            if BOARD.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
                return true;
            }
            if t.elapsed() > Duration::from_secs(5) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// `helpers` threads that call `help` until dropped.
    struct Helpers {
        stop: Arc<AtomicBool>,
        threads: Vec<std::thread::JoinHandle<()>>,
    }

    impl Helpers {
        fn start(n: usize) -> Helpers {
            let stop = Arc::new(AtomicBool::new(false));
            let threads = (0..n)
                .map(|_| {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            if !help() {
                                std::thread::yield_now();
                            }
                        }
                    })
                })
                .collect();
            Helpers { stop, threads }
        }
    }

    impl Drop for Helpers {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            for t in self.threads.drain(..) {
                t.join().unwrap();
            }
        }
    }

    /// A chunk claimed by a helper thread runs under the poster's MXCSR
    /// (FTZ|DAZ here), not the helper's default, and the helper gets its own
    /// state back. Deterministic: the poster's own chunk waits until the
    /// helper has run the other one.
    #[test]
    fn a_donated_chunk_runs_under_the_posters_fp_state() {
        let _s = serial();
        let helper_fp = FpEnv::current();
        let results: Arc<Mutex<Vec<(bool, f32, FpEnv)>>> = Arc::default();
        let poster_ftz = helper_fp.with_ftz_daz();
        let stop = Arc::new(AtomicBool::new(false));
        let helper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if !help() {
                        std::thread::yield_now();
                    }
                }
                FpEnv::current()
            })
        };
        let poster = {
            let results = results.clone();
            std::thread::spawn(move || {
                let _ftz = poster_ftz.enter();
                let me = std::thread::current().id();
                let r = run_shared(2, false, move |_| {
                    let on_poster = std::thread::current().id() == me;
                    if on_poster {
                        // Let the helper take the other chunk: wait until a
                        // chunk of *this* call has run off the poster (the
                        // helper may run other tests' donated work first,
                        // so "the helper ran something" does not say it took
                        // ours).
                        let t = Instant::now();
                        while results.lock().unwrap().iter().all(|r| r.0)
                            && t.elapsed() < Duration::from_secs(20)
                        {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                    }
                    let x = std::hint::black_box(1e-39f32) * std::hint::black_box(1.0f32);
                    results
                        .lock()
                        .unwrap()
                        .push((on_poster, x, FpEnv::current()));
                });
                (r, FpEnv::current())
            })
        };
        let (r, poster_after) = poster.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let helper_after = helper.join().unwrap();
        r.unwrap();
        let results = results.lock().unwrap();
        assert_eq!(results.len(), 2);
        assert!(
            results.iter().any(|r| !r.0),
            "no chunk ran on the helper: {results:?}"
        );
        for &(on_poster, x, fp) in results.iter() {
            assert_eq!(
                fp, poster_ftz,
                "chunk on poster={on_poster} ran under {fp:?}"
            );
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                x.to_bits(),
                0,
                "chunk on poster={on_poster} kept a subnormal"
            );
            let _ = x;
        }
        assert_eq!(helper_after, helper_fp, "the helper's own state came back");
        assert_eq!(poster_after, poster_ftz);
    }

    /// A panicking chunk fails the job with its message, whichever thread
    /// ran it, with 0, 1 and 3 helpers; every other chunk still runs once
    /// and the board is empty afterwards.
    #[test]
    fn a_panicking_chunk_fails_the_job() {
        let _s = serial();
        for helpers in [0usize, 1, 3] {
            let _h = Helpers::start(helpers);
            for rep in 0..20 {
                let hits: Arc<Vec<AtomicUsize>> =
                    Arc::new((0..64).map(|_| AtomicUsize::new(0)).collect());
                let h = hits.clone();
                let bad = (rep * 7) % 64;
                let r = run_shared(64, false, move |i| {
                    h[i].fetch_add(1, Ordering::Relaxed);
                    std::hint::black_box((0..500).sum::<u64>());
                    if i == bad {
                        panic!("chunk test failure {i}");
                    }
                });
                let err = r.expect_err("a panicking chunk must fail the job");
                assert!(
                    err.contains(&format!("chunk test failure {bad}")) && err.contains("panicked"),
                    "{err}"
                );
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                assert!(board_is_empty());
            }
        }
    }

    /// A poster that unwinds after posting still takes its job off the
    /// board and waits for the chunks helpers had claimed: nothing runs
    /// after `run_shared` has returned.
    #[test]
    fn a_poster_that_unwinds_leaves_no_job_behind() {
        let _s = serial();
        for helpers in [0usize, 1, 3] {
            let _h = Helpers::start(helpers);
            for _ in 0..20 {
                let started = Arc::new(AtomicUsize::new(0));
                let finished = Arc::new(AtomicUsize::new(0));
                let (s, f) = (started.clone(), finished.clone());
                PANIC_AFTER_POST.with(|p| p.set(true));
                let r = catch_unwind(|| {
                    run_shared(32, false, move |_| {
                        s.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(200));
                        f.fetch_add(1, Ordering::SeqCst);
                    })
                });
                assert!(r.is_err(), "the hook unwinds the poster");
                let (s0, f0) = (
                    started.load(Ordering::SeqCst),
                    finished.load(Ordering::SeqCst),
                );
                assert_eq!(s0, f0, "a claimed chunk was still running after the return");
                assert!(board_is_empty(), "the job stayed on the board");
                std::thread::sleep(Duration::from_millis(2));
                assert_eq!(
                    started.load(Ordering::SeqCst),
                    s0,
                    "a chunk ran after the return"
                );
            }
        }
    }

    #[test]
    fn every_chunk_runs_once_with_and_without_helpers() {
        let _s = serial();
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
                })
                .unwrap();
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
        let _s = serial();
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
            })
            .unwrap();
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
