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
    pub fn wait(&self) -> Result<()> {
        if self.raw.is_null() {
            return Ok(());
        }
        let api = self.plugin.api();
        let waiter = donation::enabled().then(donation::Waiter::register);
        if !crate::wait_policy::poll_until(crate::wait_policy::spin_budget(), || self.is_ready())?
            && !waiter.as_ref().is_some_and(|w| self.wait_helping(w))
        {
            drop(waiter);
            let mut a = ffi::PJRT_Event_Await_Args::new();
            a.event = self.raw;
            // SAFETY: valid owned event.
            unsafe { pjrt_call!(api, PJRT_Event_Await, &mut a)? };
        }
        let mut e = ffi::PJRT_Event_Error_Args::new();
        e.event = self.raw;
        // SAFETY: the event is ready, so Event_Error may be called.
        unsafe { pjrt_call!(api, PJRT_Event_Error, &mut e) }
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
