//! Running an [`Executable`] on host arrays given as raw pointers, with
//! zero-copy inputs and outputs.
//!
//! Python passes each input as `(data pointer, shape, element type code,
//! owner)`; the Rust side knows nothing about torch. An input whose pointer
//! is 64-byte aligned (what the CPU plugin requires) becomes a PJRT view of
//! that memory (`create_view`): no copy. The view's `on_delete` callback
//! holds a reference to the owner, so the memory stays alive for as long as
//! PJRT may read it, even past this call. An owner with an
//! `untyped_storage()` method (a torch tensor) is replaced by its storage,
//! and the pointer is checked to lie inside that storage: holding only the
//! tensor would not do, since another thread can swap the tensor's storage
//! (`set_`, `.data = ...`) while the GIL is released and free the memory
//! PJRT reads. (A concurrent `resize_` that grows the storage reallocates
//! it in place, which no reference can prevent: like any concurrent write
//! to an input, it is the caller's race.) Any
//! other input (unaligned, or empty) is copied into a fresh device buffer,
//! and counted. The caller guarantees the memory is dense (C-contiguous)
//! and valid for the shape's byte size.
//!
//! Outputs are exported with `Buffer::to_dlpack` (which waits until they
//! are ready) and returned as DLPack capsules, so the consumer's tensors
//! alias PJRT's buffers. The GIL is released for views, copies, execution
//! and the wait.

use crate::dlpack::Exported;
use crate::dtype;
use crate::errors::{pjrt_to_py, ArgumentError};
use crate::executable::Executable;
use crate::stats;
use pjrt_client::{Buffer, ElementType};
use pyo3::prelude::*;
use std::os::raw::c_void;
use std::time::Instant;

/// Alignment the CPU plugin requires for zero-copy views.
pub const VIEW_ALIGNMENT: usize = 64;

/// One input, validated and ready to hand to PJRT.
pub(crate) struct Input {
    pub ptr: usize,
    pub dims: Vec<i64>,
    pub dtype: ElementType,
    pub nbytes: usize,
    /// `Some` for a view: moved into the view's `on_delete` callback.
    pub owner: Option<PyObject>,
}

/// What one execution produced, before the GIL is re-acquired.
pub(crate) struct Ran {
    pub outputs: Vec<Exported>,
    pub pointers: Vec<usize>,
    views: Vec<Buffer>,
    pub copies: usize,
    copied_bytes: usize,
    pub seconds: f64,
}

/// `(outputs, output_pointers, views, copies, seconds)`.
type ExecuteResult = (Vec<PyObject>, Vec<usize>, usize, usize, f64);

/// Runs `exe` on dense host arrays given by pointer. See the module docs.
///
/// Returns `(outputs, output_pointers, views, copies, seconds)`: DLPack
/// capsules (consume with `torch.from_dlpack`), each output's PJRT buffer
/// address (`PJRT_Buffer_UnsafePointer`), how many inputs were viewed and
/// copied, and the wall time of views + copies + execution + wait.
#[pyfunction]
pub fn execute(
    py: Python<'_>,
    exe: &Bound<'_, Executable>,
    pointers: Vec<usize>,
    shapes: Vec<Vec<i64>>,
    dtypes: Vec<i32>,
    owners: Vec<PyObject>,
) -> PyResult<ExecuteResult> {
    let n = pointers.len();
    if shapes.len() != n || dtypes.len() != n || owners.len() != n {
        return Err(ArgumentError::new_err(format!(
            "execute: pointers, shapes, dtypes and owners must have the same length \
             (got {n}, {}, {}, {})",
            shapes.len(),
            dtypes.len(),
            owners.len()
        )));
    }
    let mut inputs = Vec::with_capacity(n);
    let mut unused_owners = Vec::new();
    for (i, (((ptr, dims), code), owner)) in pointers
        .into_iter()
        .zip(shapes)
        .zip(dtypes)
        .zip(owners)
        .enumerate()
    {
        let dtype = dtype::from_code(code)?;
        let nbytes = dtype
            .host_size_of(&dims)
            .ok_or_else(|| ArgumentError::new_err(format!("input {i}: invalid shape {dims:?}")))?;
        if ptr == 0 && nbytes > 0 {
            return Err(ArgumentError::new_err(format!(
                "input {i}: null data pointer for {nbytes} bytes"
            )));
        }
        let owner = storage_of(py, i, owner, ptr, nbytes)?;
        let view = nbytes > 0 && ptr % VIEW_ALIGNMENT == 0;
        let owner = if view {
            Some(owner)
        } else {
            unused_owners.push(owner);
            None
        };
        inputs.push(Input {
            ptr,
            dims,
            dtype,
            nbytes,
            owner,
        });
    }
    let compiled = exe.get().inner.clone();
    let mut ran = run_counted(py, &compiled.exe, inputs)?;
    drop(unused_owners);
    let nviews = n - ran.copies;
    let mut caps = Vec::with_capacity(ran.outputs.len());
    for o in std::mem::take(&mut ran.outputs) {
        caps.push(o.into_capsule(py)?);
    }
    Ok((caps, ran.pointers, nviews, ran.copies, ran.seconds))
}

/// The object that keeps input `i`'s memory alive: a torch tensor's
/// `untyped_storage()` (after checking that `ptr..ptr + nbytes` lies inside
/// it: the tensor may have been given another storage since Python read its
/// pointer), anything else as it is.
fn storage_of(
    py: Python<'_>,
    i: usize,
    owner: PyObject,
    ptr: usize,
    nbytes: usize,
) -> PyResult<PyObject> {
    let o = owner.bind(py);
    let Ok(method) = o.getattr(pyo3::intern!(py, "untyped_storage")) else {
        return Ok(owner);
    };
    if !method.is_callable() {
        return Ok(owner);
    }
    let storage = method.call0()?;
    if nbytes > 0 {
        let base: usize = storage
            .call_method0(pyo3::intern!(py, "data_ptr"))?
            .extract()?;
        let size: usize = storage
            .call_method0(pyo3::intern!(py, "nbytes"))?
            .extract()?;
        let inside = ptr >= base && ptr - base <= size && size - (ptr - base) >= nbytes;
        if !inside {
            return Err(ArgumentError::new_err(format!(
                "input {i}: its {nbytes} bytes at {ptr:#x} are not inside the tensor's storage \
                 ({size} bytes at {base:#x}); was the tensor given another storage \
                 (set_, resize_, .data = ...) during the call?"
            )));
        }
    }
    Ok(storage.unbind())
}

/// Runs `exe` on prepared inputs with the GIL released, then (GIL held)
/// releases the views and updates the process-wide counters. The shared
/// core of [`execute`] and the `call_jax` fast path.
pub(crate) fn run_counted(
    py: Python<'_>,
    exe: &pjrt_client::LoadedExecutable,
    inputs: Vec<Input>,
) -> PyResult<Ran> {
    run_counted_donating(py, exe, inputs, &[])
}

/// [`run_counted`], letting PJRT donate the inputs at positions `donate`
/// to the outputs the program aliases them to: such an input that is
/// viewed becomes a mutable zero-copy buffer
/// (`Client::create_mutable_view`), so its memory is written in place (see
/// `crate::graphcall`). The caller guarantees that each donated input's
/// memory overlaps no other input's.
pub(crate) fn run_counted_donating(
    py: Python<'_>,
    exe: &pjrt_client::LoadedExecutable,
    inputs: Vec<Input>,
    donate: &[usize],
) -> PyResult<Ran> {
    // A program compiled before this process was forked cannot run here.
    crate::runtime::check_client(exe.client())?;
    let n = inputs.len();
    let mut ran = py
        .allow_threads(move || run(exe, inputs, donate))
        .map_err(pjrt_to_py)?;
    // Dropped with the GIL held: if PJRT releases the views now, the
    // owners' references are released right away.
    ran.views.clear();
    stats::EXECUTIONS.add(1);
    stats::INPUT_COPIES.add(ran.copies as u64);
    stats::INPUT_COPIED_BYTES.add(ran.copied_bytes as u64);
    stats::OUTPUTS.add(ran.outputs.len() as u64);
    stats::INPUT_VIEWS.add((n - ran.copies) as u64);
    Ok(ran)
}

fn run(
    exe: &pjrt_client::LoadedExecutable,
    inputs: Vec<Input>,
    donate: &[usize],
) -> pjrt_client::Result<Ran> {
    let t0 = Instant::now();
    let client = exe.client();
    let mut bufs = Vec::with_capacity(inputs.len());
    let mut views = Vec::new();
    let mut copies = 0;
    let mut copied_bytes = 0;
    for (k, inp) in inputs.into_iter().enumerate() {
        let buf = match inp.owner {
            Some(owner) if donate.contains(&k) => {
                let keep = move || drop(owner);
                // SAFETY: as for a view below; the caller also guarantees
                // that no other input overlaps this memory, which the
                // program may write in place once the buffer is donated.
                let b = unsafe {
                    client.create_mutable_view(
                        inp.ptr as *mut c_void,
                        inp.dtype,
                        &inp.dims,
                        None,
                        Box::new(keep),
                    )?
                };
                views.push(b.clone());
                b
            }
            Some(owner) => {
                let keep = move || drop(owner);
                // SAFETY: the caller guarantees `ptr` is valid, dense host
                // memory of `nbytes` bytes owned by `owner`; the callback
                // keeps `owner` alive until PJRT no longer uses the memory.
                let b = unsafe {
                    client.create_view(
                        inp.ptr as *mut c_void,
                        inp.dtype,
                        &inp.dims,
                        None,
                        Some(Box::new(keep)),
                    )?
                };
                views.push(b.clone());
                b
            }
            None => {
                let data: &[u8] = if inp.nbytes == 0 {
                    &[]
                } else {
                    // SAFETY: the caller guarantees `ptr` is valid for
                    // `nbytes` bytes for the duration of this call (its owner
                    // is referenced by the caller's arguments), and the copy
                    // below completes before we return.
                    unsafe { std::slice::from_raw_parts(inp.ptr as *const u8, inp.nbytes) }
                };
                copies += 1;
                copied_bytes += inp.nbytes;
                client.buffer_from_host_bytes(data, inp.dtype, &inp.dims, None)?
            }
        };
        bufs.push(buf);
    }
    let refs: Vec<&Buffer> = bufs.iter().collect();
    let outs = if donate.is_empty() {
        exe.execute(&refs)?
    } else {
        let opts = pjrt_client::ExecuteOptions {
            donation: pjrt_client::Donation::Only(donate),
            ..Default::default()
        };
        exe.execute_with(&refs, &opts)?
    };
    let mut pointers = Vec::with_capacity(outs.len());
    let mut outputs = Vec::with_capacity(outs.len());
    for o in &outs {
        // to_dlpack waits until the output is ready, so once every output
        // is exported the execution no longer reads the inputs.
        outputs.push(Exported::new(o.to_dlpack()?));
        pointers.push(o.unsafe_pointer()?);
    }
    Ok(Ran {
        outputs,
        pointers,
        views,
        copies,
        copied_bytes,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
