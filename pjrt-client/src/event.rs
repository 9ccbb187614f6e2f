//! [`Event`]: RAII wrapper for `PJRT_Event` whose completion is always
//! checked for errors.

use crate::api::Plugin;
use crate::error::Result;
use crate::ffi::{self, PjrtStruct};
use crate::pjrt_call;

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
    /// [`spin_budget`](crate::wait_policy::spin_budget) before blocking in
    /// `PJRT_Event_Await` (see [`wait_policy`](crate::wait_policy)).
    pub fn wait(&self) -> Result<()> {
        if self.raw.is_null() {
            return Ok(());
        }
        let api = self.plugin.api();
        if !crate::wait_policy::poll_until(crate::wait_policy::spin_budget(), || self.is_ready())? {
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
