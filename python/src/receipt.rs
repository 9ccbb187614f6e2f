//! Per-thread storage of the last call's receipt.
//!
//! `hlobridge.last_receipt()` answers for the last hlobridge call on the
//! calling thread. Calls made in Python store their raw receipt tuple with
//! [`record_receipt`]; the native `call_jax` fast path stores a
//! [`FastReceipt`] without building any Python object. [`last_receipt_raw`]
//! turns either into the tuple that `hlobridge.receipt.Receipt` is built
//! from, so receipts cost nothing on the hot path unless they are read.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::cell::RefCell;

/// What the fast path knows about one cached, zero-copy call.
pub struct FastReceipt {
    /// Platform name (a Python `str`).
    pub platform: PyObject,
    /// Process-wide compile count at the time of the call.
    pub compiles: u64,
    /// Process-wide cache-hit count at the time of the call.
    pub hits: u64,
    /// The receipt's segments tuple.
    pub segments: PyObject,
    /// Inputs used in place.
    pub views: usize,
    /// Inputs copied.
    pub copies: usize,
    /// PJRT output buffer addresses.
    pub output_pointers: Vec<usize>,
    /// Seconds the execution took.
    pub run_s: f64,
    /// Seconds the whole call took.
    pub total_s: f64,
}

enum Last {
    Raw(PyObject),
    Fast(FastReceipt),
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

/// Stores the fast path's receipt for this thread.
pub fn set_fast(r: FastReceipt) {
    // Replacing drops the previous receipt's references; the GIL is held
    // (we are called from a #[pyfunction]).
    let old = LAST.with(|l| l.borrow_mut().replace(Last::Fast(r)));
    drop(old);
}

/// Stores a receipt tuple (the fields of `hlobridge.Receipt`, in order) for
/// this thread.
#[pyfunction]
pub fn record_receipt(raw: PyObject) {
    let old = LAST.with(|l| l.borrow_mut().replace(Last::Raw(raw)));
    drop(old);
}

/// The receipt tuple of this thread's last call, or `None`.
#[pyfunction]
pub fn last_receipt_raw(py: Python<'_>) -> PyResult<PyObject> {
    LAST.with(|l| {
        let l = l.borrow();
        Ok(match &*l {
            None => py.None(),
            Some(Last::Raw(raw)) => raw.clone_ref(py),
            Some(Last::Fast(r)) => PyTuple::new(
                py,
                [
                    r.platform.clone_ref(py),
                    r.compiles.into_pyobject(py)?.into_any().unbind(),
                    r.hits.into_pyobject(py)?.into_any().unbind(),
                    "hit".into_pyobject(py)?.into_any().unbind(),
                    r.segments.clone_ref(py),
                    r.views.into_pyobject(py)?.into_any().unbind(),
                    r.copies.into_pyobject(py)?.into_any().unbind(),
                    PyTuple::new(py, &r.output_pointers)?.into_any().unbind(),
                    0.0f64.into_pyobject(py)?.into_any().unbind(),
                    0.0f64.into_pyobject(py)?.into_any().unbind(),
                    r.run_s.into_pyobject(py)?.into_any().unbind(),
                    r.total_s.into_pyobject(py)?.into_any().unbind(),
                ],
            )?
            .into_any()
            .unbind(),
        })
    })
}
