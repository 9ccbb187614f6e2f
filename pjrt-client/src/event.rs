//! [`Event`]: RAII wrapper for `PJRT_Event` whose completion is always
//! checked for errors.

use crate::api::Plugin;
use crate::error::Result;
use crate::ffi::{self, PjrtStruct};
use crate::host_kernels::donation;
use crate::pjrt_call;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An owned PJRT event. Dropping it destroys the event (without waiting).
pub struct Event {
    plugin: Plugin,
    raw: *mut ffi::PJRT_Event,
}

// SAFETY: PJRT events are thread-safe handles.
unsafe impl Send for Event {}
// SAFETY: see above.
unsafe impl Sync for Event {}

impl Event {
    /// Wraps an owned raw event (null is allowed and means "already done").
    pub(crate) fn from_raw(plugin: Plugin, raw: *mut ffi::PJRT_Event) -> Self {
        Event { plugin, raw }
    }

    /// Waits until the event is ready, then reports its error status
    /// (`PJRT_Event_Error`). It polls for up to
    /// [`spin_budget`](crate::wait_policy::spin_budget) (see
    /// [`wait_policy`](crate::wait_policy)), then sleeps until the event's
    /// `OnReady` callback fires. While polling and while asleep it runs the
    /// host-kernel chunks that programs post (see
    /// [`donation`](crate::host_kernels::donation)). With donation off, or if
    /// the plugin refuses the callback, it blocks in `PJRT_Event_Await`.
    ///
    /// A failing `PJRT_Event_IsReady` never ends the wait early: the wait
    /// goes on through `OnReady` or `PJRT_Event_Await`. Only if none of the
    /// three can confirm completion does it return an error while the event
    /// may still be pending (see [`Event::wait_completion`]).
    pub fn wait(&self) -> Result<()> {
        match self.wait_completion() {
            Completion::Done(r) => r,
            Completion::Unknown(e) => Err(e),
        }
    }

    /// Like [`wait`](Self::wait), but says whether the event was seen to
    /// complete. Callers that lent memory to the operation behind the event
    /// must not free it on [`Completion::Unknown`].
    pub fn wait_completion(&self) -> Completion {
        if self.raw.is_null() {
            return Completion::Done(Ok(()));
        }
        let waiter = donation::enabled().then(donation::Waiter::register);
        let polled =
            crate::wait_policy::poll_until(crate::wait_policy::spin_budget(), || self.is_ready());
        let ready = match polled {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!(error = %e, "PJRT_Event_IsReady failed; waiting for the event by other means");
                false
            }
        };
        if !ready && !waiter.as_ref().is_some_and(|w| self.wait_helping(w)) {
            drop(waiter);
            if let Err(e) = self.await_blocking() {
                return Completion::Unknown(e);
            }
        }
        let mut e = ffi::PJRT_Event_Error_Args::new();
        e.event = self.raw;
        // SAFETY: the event is ready, so Event_Error may be called.
        Completion::Done(unsafe { pjrt_call!(self.plugin.api(), PJRT_Event_Error, &mut e) })
    }

    /// Waits until the event is known to have completed and returns its
    /// status, for callers that lent *borrowed* memory to the operation
    /// behind it (which they cannot leak). If the plugin cannot confirm
    /// completion ([`Completion::Unknown`]), it keeps retrying with a
    /// growing pause (1 ms to 100 ms) instead of returning: returning would
    /// let the caller free memory the plugin may still use. This only
    /// blocks for good with a plugin whose `IsReady`, `OnReady` and `Await`
    /// all fail on a live event.
    pub(crate) fn wait_until_confirmed(&self) -> Result<()> {
        let mut pause = std::time::Duration::from_millis(1);
        let mut tries = 0u64;
        loop {
            match self.wait_completion() {
                Completion::Done(r) => return r,
                Completion::Unknown(e) => {
                    if tries.is_power_of_two() {
                        tracing::error!(error = %e, tries, "cannot confirm that a transfer using borrowed host memory completed; still waiting");
                    }
                }
            }
            tries += 1;
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(100));
        }
    }

    /// Blocks until the event is ready: `PJRT_Event_Await`, or, if that
    /// fails without the event being ready, an `OnReady` wait. `Err` only if
    /// neither could confirm completion.
    fn await_blocking(&self) -> Result<()> {
        let mut a = ffi::PJRT_Event_Await_Args::new();
        a.event = self.raw;
        // SAFETY: valid owned event.
        let awaited = unsafe { pjrt_call!(self.plugin.api(), PJRT_Event_Await, &mut a) };
        let Err(err) = awaited else {
            return Ok(());
        };
        // Await also fails when the event completed with an error: then the
        // event is ready and `PJRT_Event_Error` reports that error.
        if matches!(self.is_ready(), Ok(true)) {
            return Ok(());
        }
        tracing::warn!(error = %err, "PJRT_Event_Await failed on a pending event; waiting for its OnReady callback");
        let waiter = donation::Waiter::register();
        if self.wait_helping(&waiter) {
            return Ok(());
        }
        Err(err)
    }

    /// Sleeps until the event is ready, running posted host-kernel chunks
    /// meanwhile. Returns false (nothing waited) when the callback cannot be
    /// registered.
    fn wait_helping(&self, waiter: &donation::Waiter) -> bool {
        let signal = Arc::new(ReadySignal {
            ready: AtomicBool::new(false),
            plugin: self.plugin.clone(),
        });
        let mut a = ffi::PJRT_Event_OnReady_Args::new();
        a.event = self.raw;
        a.callback = Some(on_ready);
        a.user_arg = Arc::into_raw(signal.clone()) as *mut c_void;
        // SAFETY: valid owned event; `user_arg` holds one count of `signal`,
        // which the callback takes back (it runs exactly once).
        if let Err(e) = unsafe { pjrt_call!(self.plugin.api(), PJRT_Event_OnReady, &mut a) } {
            // SAFETY: the callback was not registered, so the count is ours.
            drop(unsafe { Arc::from_raw(a.user_arg as *const ReadySignal) });
            tracing::debug!(error = %e, "PJRT_Event_OnReady failed; blocking in PJRT_Event_Await");
            return false;
        }
        donation::wait_helping(waiter, || signal.ready.load(Ordering::Acquire));
        true
    }

    /// Runs `f` once the event has completed (successfully or not), on
    /// whatever thread completes it (now, if it already has; a null event
    /// counts as completed). If the plugin cannot register the callback, `f`
    /// is leaked (never run, never dropped: what it keeps alive stays alive)
    /// and the error is returned.
    pub(crate) fn on_ready_run(&self, f: crate::buffer::OnDelete) -> Result<()> {
        if self.raw.is_null() {
            f();
            return Ok(());
        }
        let slot = Box::new(ReadyRun {
            run: f,
            plugin: self.plugin.clone(),
        });
        let mut a = ffi::PJRT_Event_OnReady_Args::new();
        a.event = self.raw;
        a.callback = Some(on_ready_run);
        a.user_arg = Box::into_raw(slot) as *mut c_void;
        // SAFETY: valid owned event; `user_arg` is a leaked box the callback
        // takes back (it runs exactly once). On an error the callback was
        // not registered: the box stays leaked, so whatever `f` holds is
        // never released.
        unsafe { pjrt_call!(self.plugin.api(), PJRT_Event_OnReady, &mut a) }?;
        Ok(())
    }

    /// Whether the event has completed (successfully or not).
    pub fn is_ready(&self) -> Result<bool> {
        if self.raw.is_null() {
            return Ok(true);
        }
        let mut a = ffi::PJRT_Event_IsReady_Args::new();
        a.event = self.raw;
        // SAFETY: valid owned event.
        unsafe { pjrt_call!(self.plugin.api(), PJRT_Event_IsReady, &mut a)? };
        Ok(a.is_ready)
    }
}

/// How [`Event::wait_completion`] ended.
#[derive(Debug)]
pub enum Completion {
    /// The event completed; its error status.
    Done(Result<()>),
    /// The plugin could confirm completion through none of
    /// `PJRT_Event_IsReady`, `PJRT_Event_OnReady` and `PJRT_Event_Await`:
    /// the operation may still be running. The error of the last attempt.
    Unknown(crate::error::Error),
}

/// What [`Event::on_ready_run`]'s callback runs.
struct ReadyRun {
    run: crate::buffer::OnDelete,
    plugin: Plugin,
}

/// `PJRT_Event_OnReadyCallback` of [`Event::on_ready_run`]: destroys the
/// error (if any) and runs the closure, never unwinding into the plugin.
unsafe extern "C" fn on_ready_run(error: *mut ffi::PJRT_Error, user_arg: *mut c_void) {
    // SAFETY: `user_arg` is the box `on_ready_run` leaked for this one call.
    let slot = unsafe { Box::from_raw(user_arg as *mut ReadyRun) };
    let ReadyRun { run, plugin } = *slot;
    let done = catch_unwind(AssertUnwindSafe(move || {
        if !error.is_null() {
            plugin.api().destroy_error(error);
        }
        run();
    }));
    if done.is_err() {
        tracing::error!("event on-ready closure panicked");
    }
}

/// What an event's `OnReady` callback sets (see [`Event::wait`]).
struct ReadySignal {
    ready: AtomicBool,
    plugin: Plugin,
}

/// `PJRT_Event_OnReadyCallback`: marks the signal ready and wakes waiting
/// threads. The event's status is read later through `PJRT_Event_Error`, so
/// the error handed over here is only destroyed.
unsafe extern "C" fn on_ready(error: *mut ffi::PJRT_Error, user_arg: *mut c_void) {
    // SAFETY: `user_arg` is the count `wait_helping` leaked for this one call.
    let signal = unsafe { Arc::from_raw(user_arg as *const ReadySignal) };
    // Never unwind into the plugin.
    let done = catch_unwind(AssertUnwindSafe(|| {
        if !error.is_null() {
            signal.plugin.api().destroy_error(error);
        }
        signal.ready.store(true, Ordering::Release);
        donation::wake_waiters();
    }));
    if done.is_err() {
        // Still mark it ready and wake the waiter, or it would sleep forever.
        signal.ready.store(true, Ordering::Release);
        let _ = catch_unwind(donation::wake_waiters);
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let mut a = ffi::PJRT_Event_Destroy_Args::new();
        a.event = self.raw;
        // SAFETY: we own the event; destroyed exactly once.
        if let Err(e) = unsafe { pjrt_call!(self.plugin.api(), PJRT_Event_Destroy, &mut a) } {
            tracing::warn!(error = %e, "PJRT_Event_Destroy failed");
        }
    }
}

#[cfg(test)]
mod tests {
    //! Waits through a plugin whose `IsReady`, `Await` or `OnReady` fail:
    //! a second handle on the CPU plugin with those table slots replaced by
    //! wrappers that, when their failure bit is set, call the real function
    //! with an undersized `struct_size`, which the plugin refuses with an
    //! error (without touching the event).

    use super::*;
    use crate::client::{Client, ClientOptions};
    use crate::compile::{CompileOptions, Program};
    use crate::error::Error;
    use crate::ffi::PJRT_Error;
    use std::sync::atomic::AtomicU8;
    use std::sync::{Mutex, OnceLock};

    const IS_READY: u8 = 1;
    const AWAIT: u8 = 2;
    const ON_READY: u8 = 4;

    /// Which calls fail (bits above); only the patched plugin reads it.
    static FAIL: AtomicU8 = AtomicU8::new(0);
    static SERIAL: Mutex<()> = Mutex::new(());

    type Real<A> = unsafe extern "C" fn(*mut A) -> *mut PJRT_Error;
    struct Reals {
        is_ready: Real<ffi::PJRT_Event_IsReady_Args>,
        await_: Real<ffi::PJRT_Event_Await_Args>,
        on_ready: Real<ffi::PJRT_Event_OnReady_Args>,
    }
    static REAL: OnceLock<Reals> = OnceLock::new();

    fn failing(bit: u8) -> bool {
        FAIL.load(Ordering::SeqCst) & bit != 0
    }

    unsafe extern "C" fn is_ready(args: *mut ffi::PJRT_Event_IsReady_Args) -> *mut PJRT_Error {
        let real = REAL.get().unwrap().is_ready;
        if !failing(IS_READY) {
            // SAFETY: forwarding the caller's valid args.
            return unsafe { real(args) };
        }
        let mut a = ffi::PJRT_Event_IsReady_Args::new();
        // SAFETY: `args` is valid (the caller's contract).
        a.event = unsafe { (*args).event };
        a.struct_size = 0;
        // SAFETY: a well-formed struct whose size the plugin rejects.
        unsafe { real(&mut a) }
    }

    unsafe extern "C" fn await_(args: *mut ffi::PJRT_Event_Await_Args) -> *mut PJRT_Error {
        let real = REAL.get().unwrap().await_;
        if !failing(AWAIT) {
            // SAFETY: forwarding the caller's valid args.
            return unsafe { real(args) };
        }
        let mut a = ffi::PJRT_Event_Await_Args::new();
        // SAFETY: as above.
        a.event = unsafe { (*args).event };
        a.struct_size = 0;
        // SAFETY: as above.
        unsafe { real(&mut a) }
    }

    unsafe extern "C" fn on_ready(args: *mut ffi::PJRT_Event_OnReady_Args) -> *mut PJRT_Error {
        let real = REAL.get().unwrap().on_ready;
        if !failing(ON_READY) {
            // SAFETY: forwarding the caller's valid args.
            return unsafe { real(args) };
        }
        let mut a = ffi::PJRT_Event_OnReady_Args::new();
        // SAFETY: as above.
        a.event = unsafe { (*args).event };
        a.struct_size = 0;
        // SAFETY: as above; the callback is not registered on failure.
        unsafe { real(&mut a) }
    }

    fn patched_client() -> Client {
        let plugin = crate::api::Plugin::discover().expect("CPU plugin for tests (run `make`)");
        let patched = plugin
            .patched_for_tests(|t| {
                let _ = REAL.set(Reals {
                    is_ready: t.PJRT_Event_IsReady.unwrap(),
                    await_: t.PJRT_Event_Await.unwrap(),
                    on_ready: t.PJRT_Event_OnReady.unwrap(),
                });
                t.PJRT_Event_IsReady = Some(is_ready);
                t.PJRT_Event_Await = Some(await_);
                t.PJRT_Event_OnReady = Some(on_ready);
            })
            .unwrap();
        Client::new(&patched, &ClientOptions::new().cpu_device_count(1)).unwrap()
    }

    /// Runs `-x` on 16 Mi random f32 (64 MiB each way) with the calls in
    /// `fail` failing for every transfer and wait; all must still succeed
    /// with the exact result.
    fn round_trip_with_failing(fail: u8) {
        let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let c = patched_client();
        let n = 1usize << 24;
        let exe = c
            .compile(
                &Program::mlir_text(&format!(
                    "func.func public @main(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n  \
                     %0 = stablehlo.negate %a : tensor<{n}xf32>\n  return %0 : tensor<{n}xf32>\n}}"
                )),
                &CompileOptions::default(),
            )
            .unwrap();
        let mut s = 0x9e3779b97f4a7c15u64 ^ u64::from(fail);
        let x: Vec<f32> = (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        FAIL.store(fail, Ordering::SeqCst);
        let result = (|| -> Result<(Vec<f32>, Vec<f32>)> {
            let b = c.buffer_from_host(&x, &[n as i64], None)?;
            let back = b.to_host::<f32>()?;
            let y = exe.execute(&[&b])?;
            Ok((back, y[0].to_host::<f32>()?))
        })();
        FAIL.store(0, Ordering::SeqCst);
        let (back, y) = result.unwrap_or_else(|e| panic!("fail bits {fail}: {e}"));
        assert!(back == x, "fail bits {fail}: round trip differs");
        assert!(
            y.iter().zip(&x).all(|(y, x)| *y == -*x),
            "fail bits {fail}: -x differs"
        );
    }

    #[test]
    fn a_failing_is_ready_falls_back_to_waiting() {
        round_trip_with_failing(IS_READY);
    }

    #[test]
    fn a_failing_is_ready_and_await_fall_back_to_on_ready() {
        round_trip_with_failing(IS_READY | AWAIT);
    }

    #[test]
    fn a_failing_on_ready_falls_back_to_await() {
        round_trip_with_failing(IS_READY | ON_READY);
    }

    /// With all three failing, completion cannot be confirmed: the wait
    /// and an owned-memory copy return the plugin's error (the copy leaks
    /// its host vector rather than freeing it under the transfer).
    #[test]
    fn no_way_to_confirm_completion_is_an_error() {
        let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let c = patched_client();
        let b = c.buffer_from_host(&[1.0f32, 2.0, 3.0], &[3], None).unwrap();
        FAIL.store(IS_READY | AWAIT | ON_READY, Ordering::SeqCst);
        let ready = b.ready();
        let copy = b.to_host::<f32>();
        FAIL.store(0, Ordering::SeqCst);
        for (what, r) in [("ready", ready.map(|_| ())), ("to_host", copy.map(|_| ()))] {
            let err = r.expect_err("completion cannot be confirmed");
            assert!(
                matches!(&err, Error::Pjrt { function, .. } if function.starts_with("PJRT_Event_")),
                "{what}: {err}"
            );
        }
        // The client still works once the calls succeed again.
        assert_eq!(b.to_host::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    }
}
