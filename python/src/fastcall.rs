//! The `call_jax` hot path, in one native call.
//!
//! `hlobridge.call_jax(fn, *tensors)` on a signature it has seen before must
//! cost no more than `jax.jit`'s own dispatch. In Python, flattening the
//! arguments, building the cache key, handing pointers over, wrapping the
//! outputs and writing the receipt cost more than the execution itself, so
//! the common case runs here:
//!
//! 1. no torch mode is active (no `TorchDispatchMode` on the dispatch
//!    stack: `make_fx`'s proxy mode, `FakeTensorMode`, functionalization;
//!    no enabled `TorchFunctionMode`; no functorch transform such as `vmap`,
//!    `grad` or `functionalize`), every positional argument is a plain
//!    `torch.Tensor` (or `Parameter`) that is on the CPU, contiguous, has a
//!    storage (so not sparse, nested, MKL-DNN or a functorch wrapper), and
//!    is not tracked by autograd, and there
//!    are no keyword arguments. Under a mode the call must be seen by it
//!    (traced, faked, batched), which only the general path does: running
//!    it here would bake an eager result into a traced graph;
//! 2. `(fn, x64 flag, each tensor's dtype and shape)` names an entry that the
//!    Python slow path registered with [`fast_register`] after it lowered and
//!    compiled that signature;
//! 3. the tensors are executed on zero-copy views ([`crate::execute`]), and
//!    the outputs become torch tensors through torch's DLPack importer, put
//!    back into the function's output structure. Each input's *storage*
//!    (`untyped_storage()`), not just the tensor, is held until PJRT is done
//!    with its memory: another thread may `set_()` the tensor or assign
//!    `.data` while the GIL is released, and the storage object keeps the
//!    old memory alive.
//!
//! Anything else (pytrees, kwargs, static arguments, gradients, complex or
//! unusual tensors, a new signature) answers the `MISS` sentinel and Python
//! takes the general path, which also produces the clear errors. Rust knows
//! nothing about torch or JAX: Python hands over the few objects it needs
//! ([`fast_init`]).
//!
//! Entries are keyed by the function's identity. Python removes them when the
//! function dies ([`fast_forget`], from a weakref callback), before its id
//! can be reused; each entry also holds a strong reference to the
//! function's `__func__` for bound methods.

use crate::executable::{Compiled, Executable};
use crate::execute::{run_counted, Input, VIEW_ALIGNMENT};
use crate::receipt::{self, FastReceipt};
use crate::stats;
use pjrt_client::ElementType;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyList, PyTuple};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The Python objects the fast path needs, handed over once by
/// `hlobridge.jax_bridge` at import.
pub(crate) struct Refs {
    pub(crate) tensor_type: PyObject,
    pub(crate) parameter_type: PyObject,
    method_type: PyObject,
    is_grad_enabled: PyObject,
    pub(crate) from_dlpack: PyObject,
    x64_state: PyObject,
    pub(crate) miss: PyObject,
}

static REFS: GILOnceCell<Refs> = GILOnceCell::new();

/// The objects handed over by [`fast_init`] (also used by
/// [`crate::graphcall`]).
pub(crate) fn refs(py: Python<'_>) -> PyResult<&Refs> {
    REFS.get(py)
        .ok_or_else(|| crate::errors::ArgumentError::new_err("fast path used before fast_init"))
}

/// The torch state the fast path checks on every call (found on first use;
/// `None` if this torch lacks one of them: then the fast path declines
/// every call).
pub(crate) struct Guards {
    /// `torch._C._len_torch_dispatch_stack` (user and infra modes: proxy,
    /// fake, functional).
    dispatch_stack_len: PyObject,
    /// `torch._C._is_torch_function_mode_enabled`.
    function_mode_enabled: PyObject,
    /// `torch._C._functorch.maybe_current_level` (`None` outside
    /// transforms).
    functorch_level: PyObject,
}

static GUARDS: GILOnceCell<Option<Guards>> = GILOnceCell::new();

pub(crate) fn guards(py: Python<'_>) -> Option<&Guards> {
    GUARDS
        .get_or_init(py, || {
            let found = (|| -> PyResult<Guards> {
                let c = py.import("torch._C")?;
                Ok(Guards {
                    dispatch_stack_len: c.getattr("_len_torch_dispatch_stack")?.unbind(),
                    function_mode_enabled: c.getattr("_is_torch_function_mode_enabled")?.unbind(),
                    functorch_level: py
                        .import("torch._C._functorch")?
                        .getattr("maybe_current_level")?
                        .unbind(),
                })
            })();
            match found {
                Ok(g) => Some(g),
                Err(e) => {
                    tracing::warn!(error = %e, "call_jax fast path disabled: torch lacks a mode query");
                    None
                }
            }
        })
        .as_ref()
}

/// Whether a torch dispatch mode, function mode or functorch transform is
/// active on this thread.
pub(crate) fn torch_mode_active(py: Python<'_>, g: &Guards) -> PyResult<bool> {
    Ok(
        g.dispatch_stack_len.bind(py).call0()?.extract::<usize>()? > 0
            || g.function_mode_enabled.bind(py).call0()?.is_truthy()?
            || !g.functorch_level.bind(py).call0()?.is_none(),
    )
}

/// One compiled signature of one function.
struct Entry {
    owner_id: usize,
    /// `__func__` of a bound method (kept alive so its id stays unique).
    func: Option<PyObject>,
    x64: bool,
    /// `torch.dtype` objects (singletons, compared by identity).
    dtypes: Vec<PyObject>,
    shapes: Vec<Vec<i64>>,
    elements: Vec<ElementType>,
    nbytes: Vec<usize>,
    compiled: Arc<Compiled>,
    /// The output pytree definition; `None` for a single array output.
    out_tree: Option<PyObject>,
    segments: PyObject,
    platform: PyObject,
}

type Table = Mutex<HashMap<u64, Vec<Arc<Entry>>>>;

fn table() -> &'static Table {
    static T: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A small, fast mixing hash over the key's words (the map re-hashes it).
struct KeyHash(u64);

impl KeyHash {
    fn new() -> Self {
        KeyHash(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x0100_0000_01b3).rotate_left(17);
    }
}

/// Hands the fast path the objects it needs: `torch.Tensor`,
/// `torch.nn.Parameter`, `types.MethodType`, `torch.is_grad_enabled`,
/// torch's DLPack capsule importer, JAX's `enable_x64` config state (read
/// through `.value`) and the sentinel returned on a miss. Called once.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
pub fn fast_init(
    py: Python<'_>,
    tensor_type: PyObject,
    parameter_type: PyObject,
    method_type: PyObject,
    is_grad_enabled: PyObject,
    from_dlpack: PyObject,
    x64_state: PyObject,
    miss: PyObject,
) -> PyResult<()> {
    let refs = Refs {
        tensor_type,
        parameter_type,
        method_type,
        is_grad_enabled,
        from_dlpack,
        x64_state,
        miss,
    };
    // A second call keeps the first objects (they are process-wide).
    let _ = REFS.set(py, refs);
    Ok(())
}

/// Tensor `t` (already matched against a cached entry's dtype and dims) as
/// an [`Input`] of `nbytes` bytes: a zero-copy view when its data is
/// aligned, holding the tensor's storage; else a copy, made later with the
/// GIL released, so the storage is pushed on `unused_owners`, which the
/// caller keeps until the call has run. `None`: the fast path misses (no
/// storage, or a null pointer for non-empty data). Shared by this module
/// and [`crate::graphcall`].
///
/// The storage keeps the memory alive if another thread swaps the tensor's
/// storage (`set_`, `.data = ...`) while the GIL is released; it is taken
/// before the pointer, with no Python code between.
pub(crate) fn tensor_input<'py>(
    t: &Bound<'py, PyAny>,
    dims: Vec<i64>,
    dtype: ElementType,
    nbytes: usize,
    unused_owners: &mut Vec<Bound<'py, PyAny>>,
) -> PyResult<Option<Input>> {
    let py = t.py();
    let Ok(storage) = t.call_method0(intern!(py, "untyped_storage")) else {
        return Ok(None);
    };
    let ptr: usize = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
    if ptr == 0 && nbytes > 0 {
        return Ok(None);
    }
    let owner = if nbytes > 0 && ptr.is_multiple_of(VIEW_ALIGNMENT) {
        Some(storage.unbind())
    } else {
        unused_owners.push(storage);
        None
    };
    Ok(Some(Input {
        ptr,
        dims,
        dtype,
        nbytes,
        owner,
    }))
}

/// `(owner id, func)` of a callable: a bound method is keyed by its
/// instance and underlying function, anything else by itself.
fn owner_of<'py>(
    refs: &Refs,
    f: &Bound<'py, PyAny>,
) -> PyResult<(usize, Option<Bound<'py, PyAny>>)> {
    let py = f.py();
    if f.get_type().is(refs.method_type.bind(py)) {
        let owner = f.getattr(intern!(py, "__self__"))?;
        let func = f.getattr(intern!(py, "__func__"))?;
        Ok((owner.as_ptr() as usize, Some(func)))
    } else {
        Ok((f.as_ptr() as usize, None))
    }
}

fn key_of(owner: usize, func: Option<usize>, x64: bool) -> KeyHash {
    let mut h = KeyHash::new();
    h.add(owner as u64);
    h.add(func.unwrap_or(0) as u64);
    h.add(x64 as u64);
    h
}

/// Runs `fn(*args)` if the call is on the fast path (see the module docs);
/// otherwise returns the `MISS` sentinel without side effects.
#[pyfunction]
pub fn fast_call<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
) -> PyResult<PyObject> {
    let t0 = Instant::now();
    let Some(refs) = REFS.get(py) else {
        return Err(crate::errors::ArgumentError::new_err(
            "fast_call used before fast_init",
        ));
    };
    let miss = || Ok(refs.miss.clone_ref(py));
    let Some(guards) = guards(py) else {
        return miss();
    };
    if torch_mode_active(py, guards)? {
        return miss();
    }
    let (owner, func) = owner_of(refs, f)?;
    let grad = refs.is_grad_enabled.bind(py).call0()?.is_truthy()?;
    let x64 = refs
        .x64_state
        .bind(py)
        .getattr(intern!(py, "value"))?
        .is_truthy()?;
    let mut hash = key_of(owner, func.as_ref().map(|f| f.as_ptr() as usize), x64);
    let n = args.len();
    let mut tensors: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>, Vec<i64>)> = Vec::with_capacity(n);
    let (tensor_type, parameter_type) = (refs.tensor_type.bind(py), refs.parameter_type.bind(py));
    for a in args.iter() {
        let ty = a.get_type();
        if !(ty.is(tensor_type) || ty.is(parameter_type)) {
            return miss();
        }
        // A tensor these queries fail on (sparse, nested, wrapped) is not
        // for the fast path: the general path gives the clear error.
        let plain = (|| -> PyResult<Option<(Bound<'py, PyAny>, Vec<i64>)>> {
            if !a.getattr(intern!(py, "is_cpu"))?.is_truthy()?
                || !a.call_method0(intern!(py, "is_contiguous"))?.is_truthy()?
                || (grad && a.getattr(intern!(py, "requires_grad"))?.is_truthy()?)
            {
                return Ok(None);
            }
            let dtype = a.getattr(intern!(py, "dtype"))?;
            let shape = a.getattr(intern!(py, "shape"))?;
            let shape = shape.downcast::<PyTuple>()?;
            let mut dims = Vec::with_capacity(shape.len());
            for d in shape.iter() {
                dims.push(d.extract::<i64>()?);
            }
            Ok(Some((dtype, dims)))
        })();
        let Ok(Some((dtype, dims))) = plain else {
            return miss();
        };
        hash.add(dtype.as_ptr() as u64);
        hash.add(dims.len() as u64);
        for &d in &dims {
            hash.add(d as u64);
        }
        tensors.push((a, dtype, dims));
    }
    let entry = {
        let t = table().lock().unwrap_or_else(|e| e.into_inner());
        let found = t.get(&hash.0).and_then(|bucket| {
            bucket
                .iter()
                .find(|e| {
                    e.owner_id == owner
                        && e.func.as_ref().map(|f| f.as_ptr()) == func.as_ref().map(|f| f.as_ptr())
                        && e.x64 == x64
                        && e.dtypes.len() == n
                        && tensors.iter().enumerate().all(|(i, (_, dt, dims))| {
                            e.dtypes[i].as_ptr() == dt.as_ptr() && &e.shapes[i] == dims
                        })
                })
                .cloned()
        });
        match found {
            Some(e) => e,
            None => return miss(),
        }
    };
    let mut inputs = Vec::with_capacity(n);
    let mut unused_owners = Vec::new();
    for (i, (t, _, dims)) in tensors.into_iter().enumerate() {
        let dtype = entry.elements[i];
        let Some(input) = tensor_input(&t, dims, dtype, entry.nbytes[i], &mut unused_owners)?
        else {
            return miss();
        };
        inputs.push(input);
    }
    let mut ran = run_counted(py, &entry.compiled.exe, inputs)?;
    drop(unused_owners);
    let (hits, compiles) = stats::record_cache_hit();
    let from_dlpack = refs.from_dlpack.bind(py);
    let outputs = std::mem::take(&mut ran.outputs);
    let mut tensors = Vec::with_capacity(outputs.len());
    for o in outputs {
        tensors.push(from_dlpack.call1((o.into_capsule(py)?,))?);
    }
    let result = match &entry.out_tree {
        None if tensors.len() == 1 => tensors
            .pop()
            .map(Bound::unbind)
            .unwrap_or_else(|| py.None()),
        None => PyList::new(py, tensors)?.into_any().unbind(),
        Some(tree) => tree
            .bind(py)
            .call_method1(intern!(py, "unflatten"), (PyList::new(py, tensors)?,))?
            .unbind(),
    };
    receipt::set_fast(FastReceipt {
        platform: entry.platform.clone_ref(py),
        compiles,
        hits,
        segments: entry.segments.clone_ref(py),
        views: n - ran.copies,
        copies: ran.copies,
        output_pointers: std::mem::take(&mut ran.pointers),
        run_s: ran.seconds,
        total_s: t0.elapsed().as_secs_f64(),
    });
    Ok(result)
}

/// Registers a compiled signature for the fast path: the callable `fn`, the
/// x64 flag it was lowered under, each input's `torch.dtype`, element type
/// code (`ELEMENT_TYPES`) and shape, the
/// executable, the output pytree definition (`None` when `fn` returns one
/// array), the receipt's segments tuple and the platform name.
#[pyfunction]
#[pyo3(signature = (f, x64, dtypes, codes, shapes, exe, out_tree, segments, platform))]
#[allow(clippy::too_many_arguments)]
pub fn fast_register(
    py: Python<'_>,
    f: &Bound<'_, PyAny>,
    x64: bool,
    dtypes: Vec<PyObject>,
    codes: Vec<i32>,
    shapes: Vec<Vec<i64>>,
    exe: &Bound<'_, Executable>,
    out_tree: Option<PyObject>,
    segments: PyObject,
    platform: PyObject,
) -> PyResult<()> {
    let Some(refs) = REFS.get(py) else {
        return Ok(());
    };
    let elements = codes
        .into_iter()
        .map(crate::dtype::from_code)
        .collect::<PyResult<Vec<ElementType>>>()?;
    if elements.len() != dtypes.len() || shapes.len() != dtypes.len() {
        return Err(crate::errors::ArgumentError::new_err(format!(
            "fast_register: {} dtypes, {} element codes and {} shapes given",
            dtypes.len(),
            elements.len(),
            shapes.len()
        )));
    }
    let mut nbytes = Vec::with_capacity(shapes.len());
    for (i, (e, dims)) in elements.iter().zip(&shapes).enumerate() {
        nbytes.push(e.host_size_of(dims).ok_or_else(|| {
            crate::errors::ArgumentError::new_err(format!("input {i}: invalid shape {dims:?}"))
        })?);
    }
    let (owner, func) = owner_of(refs, f)?;
    let mut hash = key_of(owner, func.as_ref().map(|f| f.as_ptr() as usize), x64);
    for (dt, dims) in dtypes.iter().zip(&shapes) {
        hash.add(dt.as_ptr() as u64);
        hash.add(dims.len() as u64);
        for &d in dims {
            hash.add(d as u64);
        }
    }
    let entry = Arc::new(Entry {
        owner_id: owner,
        func: func.map(Bound::unbind),
        x64,
        dtypes,
        shapes,
        elements,
        nbytes,
        compiled: exe.get().inner.clone(),
        out_tree,
        segments,
        platform,
    });
    let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
    t.entry(hash.0).or_default().push(entry);
    Ok(())
}

/// Drops every entry of the object whose `id()` is `owner_id` (called when
/// it dies). Returns how many were dropped.
#[pyfunction]
pub fn fast_forget(owner_id: usize) -> usize {
    let dropped = {
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        let mut dropped = Vec::new();
        t.retain(|_, bucket| {
            let (gone, keep): (Vec<_>, Vec<_>) =
                bucket.drain(..).partition(|e| e.owner_id == owner_id);
            dropped.extend(gone);
            *bucket = keep;
            !bucket.is_empty()
        });
        dropped
    };
    // Released outside the lock (dropping Python objects may run code).
    dropped.len()
}

/// Drops every fast-path entry. Returns how many there were.
#[pyfunction]
pub fn fast_clear() -> usize {
    let all = std::mem::take(&mut *table().lock().unwrap_or_else(|e| e.into_inner()));
    all.values().map(Vec::len).sum()
}

/// In a forked child: forgets every fast-path entry without dropping it
/// (their executables belong to the client inherited from the parent; see
/// [`crate::runtime`]).
pub(crate) fn leak_for_fork() {
    std::mem::forget(std::mem::take(
        &mut *table().lock().unwrap_or_else(|e| e.into_inner()),
    ));
}
