//! Device runtimes beside the CPU one, and running programs on tensors
//! handed over by DLPack.
//!
//! [`cuda_runtime`] creates the process-wide CUDA PJRT client (once; the
//! plugin found by `pjrt_client::accel`, options from
//! `pjrt_client::cuda::CudaOptions::from_env` overridden by the call's
//! keyword options). [`device_compile`] compiles module text on a device
//! runtime (no host lowering: the host GEMM kernels exist on CPU only), with
//! an in-memory cache keyed on the client and the text.
//!
//! [`execute_dlpack`] runs any [`Executable`] (CPU or CUDA) on unconsumed
//! `"dltensor"` capsules: each capsule is consumed (renamed
//! `"used_dltensor"`, the DLPack protocol), checked against the
//! executable's client by `Client::buffer_from_dlpack` (device type, device
//! id, dtype, density; a CUDA tensor given to the CPU runtime is an
//! `ArgumentError`), and becomes a zero-copy view whose `on_delete` calls the
//! producer's deleter; outputs come back as capsules (`Buffer::to_dlpack`,
//! which waits until each output is ready, so the consumer may use them on
//! any stream). The producer's pending writes to the inputs must be complete
//! before the call (the Python side synchronizes torch's current stream).

use crate::dlpack::Exported;
use crate::errors::{pjrt_to_py, ArgumentError, ForkError};
use crate::executable::Executable;
use hlobridge_compile::{CompilePolicy, DiskCacheMode, HostLoweringMode};
use pjrt_client::cuda::{CudaAllocator, CudaOptions};
use pjrt_client::ffi::dlpack::DLManagedTensor;
use pjrt_client::{Buffer, Client, CompileOptions, OptionValue};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::ffi::CStr;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

const DLTENSOR: &CStr = c"dltensor";
const USED_DLTENSOR: &CStr = c"used_dltensor";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct CudaState {
    client: Client,
    options: CudaOptions,
    pid: u32,
}

static CUDA: Mutex<Option<CudaState>> = Mutex::new(None);

/// A device runtime (`hlobridge.devices.runtime("cuda")`).
#[pyclass(frozen, module = "hlobridge._native")]
pub struct DeviceRuntime {
    client: Client,
}

#[pymethods]
impl DeviceRuntime {
    /// Platform name (`cuda`, ...).
    #[getter]
    fn platform(&self) -> &str {
        self.client.platform_name()
    }
    /// Platform version string.
    #[getter]
    fn platform_version(&self) -> &str {
        self.client.platform_version()
    }
    /// Number of addressable devices.
    #[getter]
    fn device_count(&self) -> usize {
        self.client.device_count()
    }
    /// Local hardware ids (CUDA ordinals) of the addressable devices.
    #[getter]
    fn local_hardware_ids(&self) -> PyResult<Vec<i32>> {
        self.client
            .addressable_devices()
            .iter()
            .map(|d| d.local_hardware_id())
            .collect::<pjrt_client::Result<Vec<_>>>()
            .map_err(pjrt_to_py)
    }
    /// Path of the loaded plugin.
    #[getter]
    fn plugin_path(&self) -> String {
        self.client.plugin().api().path().display().to_string()
    }
    fn __repr__(&self) -> String {
        format!(
            "DeviceRuntime(platform={:?}, devices={}, plugin={:?})",
            self.client.platform_name(),
            self.client.device_count(),
            self.plugin_path()
        )
    }
}

fn parse_options(options: Option<&Bound<'_, PyDict>>) -> PyResult<CudaOptions> {
    let mut o = CudaOptions::from_env().map_err(pjrt_to_py)?;
    let Some(d) = options else {
        return Ok(o);
    };
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        let bad = |want: &str| {
            ArgumentError::new_err(format!("CUDA option {k:?}: expected {want}, got {v}"))
        };
        match k.as_str() {
            "allocator" => {
                let s: String = v.extract().map_err(|_| bad("a string"))?;
                o.allocator = Some(s.parse::<CudaAllocator>().map_err(pjrt_to_py)?);
            }
            "memory_fraction" => o.memory_fraction = Some(v.extract().map_err(|_| bad("a float"))?),
            "preallocate" => o.preallocate = Some(v.extract().map_err(|_| bad("a bool"))?),
            "visible_devices" => {
                o.visible_devices = Some(v.extract().map_err(|_| bad("a list of ints"))?)
            }
            "node_id" => o.node_id = Some(v.extract().map_err(|_| bad("an int"))?),
            "num_nodes" => o.num_nodes = Some(v.extract().map_err(|_| bad("an int"))?),
            "collective_memory_size" => {
                o.collective_memory_size = Some(v.extract().map_err(|_| bad("an int"))?)
            }
            "platform_name" => o.platform_name = Some(v.extract().map_err(|_| bad("a string"))?),
            "stage_host_to_device" => {
                o.stage_host_to_device = Some(v.extract().map_err(|_| bad("a bool"))?)
            }
            _ => {
                return Err(ArgumentError::new_err(format!(
                    "unknown CUDA option {k:?}; known: allocator, memory_fraction, preallocate, \
                     visible_devices, node_id, num_nodes, collective_memory_size, \
                     platform_name, stage_host_to_device"
                )))
            }
        }
    }
    o.validate().map_err(pjrt_to_py)?;
    Ok(o)
}

/// The `PJRT_Client_Create` named values the CUDA runtime would be created
/// with for these options (after `HLOBRIDGE_CUDA_*`): `[(name, value)]`.
/// Needs no GPU.
#[pyfunction]
#[pyo3(signature = (**options))]
pub fn cuda_client_options(
    py: Python<'_>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<(String, PyObject)>> {
    let o = parse_options(options)?;
    let c = o.to_client_options().map_err(pjrt_to_py)?;
    c.values
        .into_iter()
        .map(|(k, v)| {
            let obj = match v {
                OptionValue::String(s) => s.into_pyobject(py)?.into_any().unbind(),
                OptionValue::Int64(i) => i.into_pyobject(py)?.into_any().unbind(),
                OptionValue::Int64List(l) => PyList::new(py, l)?.into_any().unbind(),
                OptionValue::Float(f) => (f as f64).into_pyobject(py)?.into_any().unbind(),
                OptionValue::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
            };
            Ok((k, obj))
        })
        .collect()
}

/// The process-wide CUDA runtime, created on first call (GIL released).
/// Later calls return it; passing options that differ from the ones it was
/// created with is an `ArgumentError` (a client's options are fixed).
/// Without the plugin: `PluginNotFoundError`; without a usable GPU: the
/// plugin's error as `PjrtError`.
#[pyfunction]
#[pyo3(signature = (**options))]
pub fn cuda_runtime(
    py: Python<'_>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<DeviceRuntime> {
    let explicit = options.is_some_and(|d| !d.is_empty());
    let opts = parse_options(options)?;
    let pid = std::process::id();
    {
        let cur = lock(&CUDA);
        if let Some(s) = &*cur {
            if s.pid != pid {
                return Err(ForkError::new_err(format!(
                    "hlobridge: the CUDA runtime was created by pid {} before this process (pid \
                     {pid}) was forked; a CUDA context cannot be used across fork(). Start \
                     workers with the 'spawn' method",
                    s.pid
                )));
            }
            if explicit && s.options != opts {
                return Err(ArgumentError::new_err(format!(
                    "the CUDA runtime already exists with options {:?}; a client's options \
                     cannot change (requested {opts:?})",
                    s.options
                )));
            }
            return Ok(DeviceRuntime {
                client: s.client.clone(),
            });
        }
    }
    // Other threads run here (GIL released): nothing below writes the
    // environment. The CUDA data dir travels as a compile option
    // (`accel::set_cuda_data_dir_flag` only records it), never XLA_FLAGS.
    let client = py
        .allow_threads(|| pjrt_client::cuda::cuda_client(&opts))
        .map_err(pjrt_to_py)?;
    let mut cur = lock(&CUDA);
    // Another thread may have won the race: keep the first client. (The
    // loser's client is dropped after the lock is released.)
    let (keep, extra) = match &*cur {
        Some(s) => (s.client.clone(), Some(client)),
        None => {
            *cur = Some(CudaState {
                client: client.clone(),
                options: opts,
                pid,
            });
            (client, None)
        }
    };
    drop(cur);
    drop(extra);
    Ok(DeviceRuntime { client: keep })
}

/// Compiles module text on `runtime` through the compile service (GIL
/// released; memory cache on, no disk cache, no host lowering), or returns
/// the cached executable for the same text. Returns `(executable, cache_hit)`.
#[pyfunction]
pub fn device_compile(
    py: Python<'_>,
    runtime: &DeviceRuntime,
    text: &str,
) -> PyResult<(Executable, bool)> {
    // The one switch for CPU-only rewrites (host GEMM/conv kernels): a
    // device runtime compiles the stitched text as it is.
    if hlobridge::lower::host_lowering_for(runtime.client.platform_name()).is_some() {
        return Err(ArgumentError::new_err(format!(
            "device_compile is for device runtimes; the {} runtime compiles with \
             hlobridge._native.compile",
            runtime.client.platform_name()
        )));
    }
    let policy = CompilePolicy {
        host_lowering: HostLoweringMode::Off,
        memory_cache: true,
        disk_cache: DiskCacheMode::Off,
        before_compile: Some(crate::runtime::check_compile),
        ..CompilePolicy::default()
    };
    let client = runtime.client.clone();
    let fetched = py
        .allow_threads(|| {
            hlobridge_compile::compile(&client, text, CompileOptions::default(), &policy)
        })
        .map_err(crate::executable::compile_error_to_py)?;
    Ok((
        Executable {
            inner: fetched.compiled,
        },
        fetched.from_memory,
    ))
}

/// A consumed `DLManagedTensor` whose deleter has not run yet.
struct Managed(*mut DLManagedTensor);

// SAFETY: DLPack deleters may be called from any thread (torch's drops an
// at::Tensor; Python producers take the GIL themselves).
unsafe impl Send for Managed {}

impl Managed {
    /// Calls the producer's deleter (once: `self` is consumed).
    fn release(self) {
        drop(self)
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        // Reached when the view is released (its `on_delete`), when the
        // import refused the tensor, or when the plugin dropped the view
        // callback without creating the view: in every case PJRT no longer
        // reads the memory.
        let t = self.0;
        // SAFETY: we own `t` (the capsule was renamed "used_dltensor") and
        // this runs once; the deleter may be called from any thread.
        unsafe {
            if let Some(d) = (*t).deleter {
                d(t)
            }
        }
    }
}

/// Takes ownership of the tensor in an unconsumed `"dltensor"` capsule.
fn consume(i: usize, obj: &Bound<'_, PyAny>) -> PyResult<Managed> {
    let p = obj.as_ptr();
    // SAFETY: `p` is a live object; the capsule calls only inspect it and
    // never raise for a non-capsule with `PyCapsule_IsValid`.
    unsafe {
        if ffi::PyCapsule_IsValid(p, DLTENSOR.as_ptr()) != 1 {
            return Err(ArgumentError::new_err(format!(
                "input {i}: expected an unconsumed DLPack capsule (\"dltensor\", e.g. \
                 torch.utils.dlpack.to_dlpack(t)), got {}",
                obj.get_type().name()?
            )));
        }
        let t = ffi::PyCapsule_GetPointer(p, DLTENSOR.as_ptr()) as *mut DLManagedTensor;
        if t.is_null() {
            return Err(PyErr::fetch(obj.py()));
        }
        if ffi::PyCapsule_SetName(p, USED_DLTENSOR.as_ptr()) != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Managed(t))
    }
}

/// `(outputs, views, copies, seconds)`.
type DlpackResult = (Vec<PyObject>, usize, usize, f64);

/// Runs `exe` on DLPack capsules (module docs). Returns the outputs as
/// `"dltensor"` capsules, how many inputs were viewed / copied, and the wall
/// time of imports + execution + the wait for the outputs.
#[pyfunction]
pub fn execute_dlpack(
    py: Python<'_>,
    exe: &Bound<'_, Executable>,
    capsules: Vec<Bound<'_, PyAny>>,
) -> PyResult<DlpackResult> {
    let compiled = exe.get().inner.clone();
    crate::runtime::check_client(compiled.exe.client())?;
    let mut managed = Vec::with_capacity(capsules.len());
    for (i, c) in capsules.iter().enumerate() {
        managed.push(consume(i, c)?);
    }
    let ran = py.allow_threads(move || {
        let client = compiled.exe.client().clone();
        let t0 = Instant::now();
        let mut views: Vec<Buffer> = Vec::with_capacity(managed.len());
        let mut copies = 0usize;
        let mut first_err = None;
        for (i, m) in managed.into_iter().enumerate() {
            if first_err.is_some() {
                m.release();
                continue;
            }
            let t = m.0;
            let on_delete: pjrt_client::OnDelete = Box::new(move || m.release());
            // SAFETY: `t` is a live managed tensor we own; it stays alive
            // until `on_delete` (which the buffer owns) calls its deleter.
            match unsafe { client.buffer_from_dlpack(&(*t).dl_tensor, Some(on_delete)) } {
                Ok((b, copied)) => {
                    copies += copied as usize;
                    views.push(b);
                }
                Err(e) => first_err = Some((i, e)),
            }
        }
        if let Some((i, e)) = first_err {
            return Err((Some(i), Box::new(e)));
        }
        let refs: Vec<&Buffer> = views.iter().collect();
        let outs = compiled
            .exe
            .execute(&refs)
            .map_err(|e| (None, Box::new(e)))?;
        let mut exported = Vec::with_capacity(outs.len());
        for o in &outs {
            exported.push(Exported::new(
                o.to_dlpack().map_err(|e| (None, Box::new(e)))?,
            ));
        }
        let n = views.len();
        drop(views);
        Ok::<_, (Option<usize>, Box<pjrt_client::Error>)>((
            exported,
            n - copies,
            copies,
            t0.elapsed().as_secs_f64(),
        ))
    });
    let (exported, nviews, copies, secs) = ran.map_err(|(i, e)| match i {
        Some(i) => {
            let py_err = pjrt_to_py(*e);
            let msg = py_err.value(py).to_string();
            PyErr::from_type(py_err.get_type(py), format!("input {i}: {msg}"))
        }
        None => pjrt_to_py(*e),
    })?;
    let mut caps = Vec::with_capacity(exported.len());
    for o in exported {
        caps.push(o.into_capsule(py)?);
    }
    Ok((caps, nviews, copies, secs))
}

/// Adds this module's class and functions to `_native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DeviceRuntime>()?;
    m.add_function(wrap_pyfunction!(cuda_runtime, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_client_options, m)?)?;
    m.add_function(wrap_pyfunction!(device_compile, m)?)?;
    m.add_function(wrap_pyfunction!(execute_dlpack, m)?)?;
    Ok(())
}
