//! Handing PJRT output buffers to Python zero-copy as DLPack capsules.
//!
//! [`Exported`] owns a `DLManagedTensor*` from `Buffer::to_dlpack` (which
//! holds the PJRT buffer, and with it the client, alive) until it is either
//! dropped (deleter called) or wrapped in a `"dltensor"` capsule by
//! [`Exported::into_capsule`]. A consumer such as `torch.from_dlpack` renames
//! the capsule to `"used_dltensor"` and calls the deleter itself when its
//! tensor dies; a capsule that was never consumed calls it on destruction.

use pjrt_client::ffi::dlpack::DLManagedTensor;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::CStr;
use std::os::raw::c_void;

const DLTENSOR: &CStr = c"dltensor";

/// An exported DLPack tensor not yet handed to Python.
pub struct Exported(*mut DLManagedTensor);

// SAFETY: the managed tensor is exclusively owned by this handle; its
// deleter (pjrt-client's) only touches thread-safe PJRT state.
unsafe impl Send for Exported {}

impl Exported {
    /// Takes ownership of a managed tensor produced by `to_dlpack`.
    pub fn new(t: *mut DLManagedTensor) -> Self {
        Exported(t)
    }

    /// Wraps the tensor in a `"dltensor"` capsule (ownership moves to it).
    pub fn into_capsule(self, py: Python<'_>) -> PyResult<PyObject> {
        let t = self.0;
        std::mem::forget(self);
        // SAFETY: `t` is a valid, owned DLManagedTensor; the name is a static
        // C string; on failure we still own `t` and release it.
        unsafe {
            let obj = ffi::PyCapsule_New(t as *mut c_void, DLTENSOR.as_ptr(), Some(destructor));
            if obj.is_null() {
                drop(Exported(t));
                return Err(PyErr::fetch(py));
            }
            Ok(Bound::from_owned_ptr(py, obj).unbind())
        }
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // SAFETY: we own the tensor and call its deleter exactly once.
        unsafe { call_deleter(self.0) }
    }
}

/// Calls a managed tensor's deleter (null-safe).
///
/// # Safety
/// `t` must be null or an owned `DLManagedTensor*` not yet deleted.
unsafe fn call_deleter(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: guaranteed by the caller.
    if let Some(d) = unsafe { (*t).deleter } {
        // SAFETY: the DLPack contract: the owner calls the deleter once.
        unsafe { d(t) }
    }
}

unsafe extern "C" fn destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule. `PyCapsule_IsValid`
    // never raises; if the capsule still has its original name nobody
    // consumed it, so it still owns the tensor.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()) as *mut DLManagedTensor;
            call_deleter(t);
        }
    }
}
