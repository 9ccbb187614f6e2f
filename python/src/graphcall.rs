//! The `torch.compile` backend's hot path: one compiled graph program run
//! in one native call.
//!
//! `hlobridge.dynamo.CompiledGraph` is what AOTAutograd calls on every
//! step, with the graph's inputs (parameters, buffers, activations) as one
//! list. Everything about the call that does not depend on the inputs'
//! values is fixed when the program is built, so it is computed once and
//! kept in a [`GraphCall`]: which graph inputs the program reads (in
//! program order), each one's `torch.dtype`, shape and element type, the
//! program's constants (their storages and pointers, taken once), and where
//! each graph output comes from (a program result, a graph input returned
//! as it is, or `None`). A call then only:
//!
//! 1. checks that no torch mode is active (as [`crate::fastcall`]: a traced
//!    or faked call must not run eagerly here);
//! 2. checks each read input: a plain `torch.Tensor` (or `Parameter`) on
//!    the CPU, contiguous, of the registered dtype (identity) and shape;
//! 3. takes each input's storage and pointer and runs the program on
//!    zero-copy views with the GIL released ([`crate::execute::run_counted`]);
//! 4. imports the outputs with torch's DLPack importer and builds the output
//!    list, and stores the receipt natively ([`crate::receipt::set_fast`]).
//!
//! Mutated inputs written in place: a graph output that is the new value
//! of a mutated graph input (AOTAutograd's functionalized `copy_`, e.g. a
//! static KV cache's `index_copy_`) can be registered as an alias `(k, j)`:
//! the program marks input `k` `tf.aliasing_output = j`, and the call lets
//! PJRT donate that input's zero-copy view, so the program writes result
//! `j` into the tensor's own memory instead of a fresh buffer. Only where
//! result `j`'s buffer then starts at the input's address (XLA honoured the
//! alias) does the output list hold the input tensor itself, whose
//! `copy_` onto itself AOTAutograd's epilogue skips; otherwise result `j`
//! is returned as usual. An input that was copied (unaligned) or whose
//! memory overlaps another input's is never donated.
//!
//! Anything else (another dtype, shape, density or device, a tensor
//! subclass, fewer arguments) returns the `MISS` sentinel of
//! [`crate::fastcall`] without side effects, and Python takes the general
//! path (which compiles a new signature, copies non-contiguous inputs and
//! names errors). Autograd tracking is not checked: a graph program is
//! what AOTAutograd already differentiated, its inputs are used detached.
//!
//! The object is owned by the Python program it belongs to, so it lives
//! exactly as long as the program (no process-wide table, no id reuse).
//! After `fork()` its executable belongs to the parent's client: running it
//! raises the same `ForkError` as every other execution in the child.

use crate::executable::{Compiled, Executable};
use crate::execute::{run_counted_donating, Input, VIEW_ALIGNMENT};
use crate::fastcall::{guards, refs, tensor_input, torch_mode_active};
use crate::receipt::{self, FastReceipt};
use crate::stats;
use pjrt_client::ElementType;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Where one graph output comes from.
#[derive(Clone, Copy)]
enum Slot {
    /// Result `j` of the program.
    Prog(usize),
    /// Graph input `i`, returned as it is.
    Arg(usize),
    /// `None`.
    Empty,
}

/// A program constant: its storage (kept alive here) and data pointer.
struct Constant {
    storage: PyObject,
    ptr: usize,
    dims: Vec<i64>,
}

/// One compiled graph program, ready to run (see the module docs).
#[pyclass(frozen, module = "hlobridge._native")]
pub struct GraphCall {
    /// Graph input position of each program input (before the constants).
    picks: Vec<usize>,
    /// `torch.dtype` of each picked input (compared by identity).
    dtypes: Vec<PyObject>,
    shapes: Vec<Vec<i64>>,
    /// Element type and byte size of every program input (picks, then
    /// constants).
    elements: Vec<ElementType>,
    nbytes: Vec<usize>,
    constants: Vec<Constant>,
    slots: Vec<Slot>,
    /// `(k, j)`: program input `k` (a pick) aliased to program result `j`
    /// (see the module docs).
    aliases: Vec<(usize, usize)>,
    compiled: Arc<Compiled>,
    segments: PyObject,
    platform: PyObject,
    calls: AtomicU64,
}

/// The positional arguments of a call: `(list,)` (AOTAutograd's boxed
/// convention), a list, or a tuple of the graph's inputs.
fn arguments<'py>(args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(t) = args.downcast::<PyTuple>() {
        if t.len() == 1 {
            let first = t.get_item(0)?;
            if first.is_instance_of::<PyList>() {
                return Ok(first);
            }
        }
    }
    Ok(args.clone())
}

fn item<'py>(seq: &Bound<'py, PyAny>, i: usize) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(l) = seq.downcast::<PyList>() {
        return Ok(if i < l.len() {
            Some(l.get_item(i)?)
        } else {
            None
        });
    }
    if let Ok(t) = seq.downcast::<PyTuple>() {
        return Ok(if i < t.len() {
            Some(t.get_item(i)?)
        } else {
            None
        });
    }
    Ok(None)
}

/// Whether `a` is a dense CPU tensor of exactly `dtype` and `dims`
/// (query failures, e.g. on a sparse tensor, answer `false`).
fn matches(a: &Bound<'_, PyAny>, dtype: &PyObject, dims: &[i64]) -> bool {
    let py = a.py();
    (|| -> PyResult<bool> {
        if !a.getattr(intern!(py, "dtype"))?.is(dtype.bind(py)) {
            return Ok(false);
        }
        let shape = a.getattr(intern!(py, "shape"))?;
        let shape = shape.downcast::<PyTuple>()?;
        if shape.len() != dims.len() {
            return Ok(false);
        }
        for (d, &want) in shape.iter().zip(dims) {
            if d.extract::<i64>()? != want {
                return Ok(false);
            }
        }
        Ok(a.getattr(intern!(py, "is_cpu"))?.is_truthy()?
            && a.call_method0(intern!(py, "is_contiguous"))?.is_truthy()?)
    })()
    .unwrap_or(false)
}

impl GraphCall {
    /// The aliases whose input may be donated on this call: a zero-copy
    /// view (not a copy) of memory that no other input overlaps.
    fn donatable(&self, inputs: &[Input]) -> Vec<(usize, usize)> {
        let overlaps = |k: usize| {
            let (a, n) = (inputs[k].ptr, inputs[k].nbytes);
            inputs
                .iter()
                .enumerate()
                .any(|(m, o)| m != k && o.nbytes > 0 && o.ptr < a + n && a < o.ptr + o.nbytes)
        };
        self.aliases
            .iter()
            .copied()
            .filter(|&(k, _)| inputs[k].owner.is_some() && inputs[k].nbytes > 0 && !overlaps(k))
            .collect()
    }
}

#[pymethods]
impl GraphCall {
    /// `picks`: graph input position of each program input; `dtypes`,
    /// `codes` (element type codes) and `shapes` of those inputs;
    /// `constants`: the program's constant tensors (dense), appended after
    /// them; `outputs`: per graph output, `j >= 0` for program result `j`,
    /// `-1 - i` for graph input `i`, `None` for `None`; the executable, the
    /// receipt's segments tuple and the platform name; `aliases`: `(k, j)`
    /// pairs, program input `k` (a pick) written in place as result `j`.
    #[new]
    #[pyo3(signature = (picks, dtypes, codes, shapes, constants, outputs, exe, segments, platform, aliases=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        picks: Vec<usize>,
        dtypes: Vec<PyObject>,
        codes: Vec<i32>,
        shapes: Vec<Vec<i64>>,
        constants: Vec<Bound<'_, PyAny>>,
        outputs: Vec<Option<i64>>,
        exe: &Bound<'_, Executable>,
        segments: PyObject,
        platform: PyObject,
        aliases: Vec<(usize, usize)>,
    ) -> PyResult<Self> {
        let n = picks.len();
        let num_outputs = exe.get().inner.exe.num_outputs();
        if let Some(&(k, j)) = aliases.iter().find(|&&(k, j)| k >= n || j >= num_outputs) {
            return Err(crate::errors::ArgumentError::new_err(format!(
                "GraphCall: alias ({k}, {j}) out of range ({n} picks, {num_outputs} results)"
            )));
        }
        if dtypes.len() != n || shapes.len() != n || codes.len() != n + constants.len() {
            return Err(crate::errors::ArgumentError::new_err(format!(
                "GraphCall: {n} picks, {} dtypes, {} shapes, {} codes for {} constants",
                dtypes.len(),
                shapes.len(),
                codes.len(),
                constants.len()
            )));
        }
        let elements = codes
            .into_iter()
            .map(crate::dtype::from_code)
            .collect::<PyResult<Vec<ElementType>>>()?;
        let mut consts = Vec::with_capacity(constants.len());
        let mut all_dims: Vec<Vec<i64>> = shapes.clone();
        for c in &constants {
            let dims: Vec<i64> = c.getattr(intern!(py, "shape"))?.extract()?;
            let storage = c.call_method0(intern!(py, "untyped_storage"))?.unbind();
            let ptr: usize = c.call_method0(intern!(py, "data_ptr"))?.extract()?;
            all_dims.push(dims.clone());
            consts.push(Constant { storage, ptr, dims });
        }
        let mut nbytes = Vec::with_capacity(all_dims.len());
        for (i, (e, dims)) in elements.iter().zip(&all_dims).enumerate() {
            nbytes.push(e.host_size_of(dims).ok_or_else(|| {
                crate::errors::ArgumentError::new_err(format!("input {i}: invalid shape {dims:?}"))
            })?);
        }
        let slots = outputs
            .into_iter()
            .map(|o| match o {
                None => Slot::Empty,
                Some(j) if j >= 0 => Slot::Prog(j as usize),
                Some(j) => Slot::Arg((-1 - j) as usize),
            })
            .collect();
        Ok(GraphCall {
            picks,
            dtypes,
            shapes,
            elements,
            nbytes,
            constants: consts,
            slots,
            aliases,
            compiled: exe.get().inner.clone(),
            segments,
            platform,
            calls: AtomicU64::new(0),
        })
    }

    /// How many calls this object served.
    #[getter]
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Runs the program on the graph inputs `args` (see [`arguments`]) and
    /// returns the graph outputs as a list, or the `MISS` sentinel (see
    /// the module docs).
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<PyObject> {
        let t0 = Instant::now();
        let refs = refs(py)?;
        let miss = || Ok(refs.miss.clone_ref(py));
        let Some(g) = guards(py) else {
            return miss();
        };
        if torch_mode_active(py, g)? {
            return miss();
        }
        let args = arguments(args.as_any())?;
        let (tensor_type, parameter_type) =
            (refs.tensor_type.bind(py), refs.parameter_type.bind(py));
        let n = self.picks.len();
        let mut picked = Vec::with_capacity(n);
        for (k, &i) in self.picks.iter().enumerate() {
            let Some(a) = item(&args, i)? else {
                return miss();
            };
            let ty = a.get_type();
            if !(ty.is(tensor_type) || ty.is(parameter_type))
                || !matches(&a, &self.dtypes[k], &self.shapes[k])
            {
                return miss();
            }
            picked.push(a);
        }
        let mut inputs = Vec::with_capacity(n + self.constants.len());
        let mut unused_owners = Vec::new();
        for (k, a) in picked.iter().enumerate() {
            let (dims, dtype, nbytes) = (self.shapes[k].clone(), self.elements[k], self.nbytes[k]);
            let Some(input) = tensor_input(a, dims, dtype, nbytes, &mut unused_owners)? else {
                return miss();
            };
            inputs.push(input);
        }
        for (c, k) in self.constants.iter().zip(n..) {
            let nbytes = self.nbytes[k];
            let view = nbytes > 0 && c.ptr.is_multiple_of(VIEW_ALIGNMENT);
            inputs.push(Input {
                ptr: c.ptr,
                dims: c.dims.clone(),
                dtype: self.elements[k],
                nbytes,
                owner: view.then(|| c.storage.clone_ref(py)),
            });
        }
        let donate = self.donatable(&inputs);
        let donated_ptrs: Vec<(usize, usize)> =
            donate.iter().map(|&(k, j)| (inputs[k].ptr, j)).collect();
        let donate_idx: Vec<usize> = donate.iter().map(|&(k, _)| k).collect();
        let mut ran = run_counted_donating(py, &self.compiled.exe, inputs, &donate_idx)?;
        drop(unused_owners);
        // Results written into their input's memory: returned as that input.
        let mut in_place: Vec<Option<usize>> = vec![None; ran.outputs.len()];
        for (&(ptr, j), &(k, _)) in donated_ptrs.iter().zip(&donate) {
            if ran.pointers.get(j) == Some(&ptr) {
                in_place[j] = Some(self.picks[k]);
            }
        }
        let (hits, compiles) = stats::record_cache_hit();
        let from_dlpack = refs.from_dlpack.bind(py);
        let mut results = Vec::with_capacity(ran.outputs.len());
        for (j, o) in std::mem::take(&mut ran.outputs).into_iter().enumerate() {
            if in_place[j].is_some() {
                results.push(None); // the input tensor stands for it
                continue;
            }
            results.push(Some(from_dlpack.call1((o.into_capsule(py)?,))?));
        }
        let out = PyList::empty(py);
        for s in &self.slots {
            match *s {
                Slot::Empty => out.append(py.None())?,
                Slot::Arg(i) => match item(&args, i)? {
                    Some(a) => out.append(a)?,
                    None => out.append(py.None())?,
                },
                // A result read twice is the same tensor (clone the reference).
                Slot::Prog(j) => match (results.get(j).and_then(Option::as_ref), in_place.get(j)) {
                    (Some(t), _) => out.append(t)?,
                    (None, Some(&Some(i))) => match item(&args, i)? {
                        Some(a) => out.append(a)?,
                        None => out.append(py.None())?,
                    },
                    (None, _) => out.append(py.None())?,
                },
            }
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        receipt::set_fast(FastReceipt {
            platform: self.platform.clone_ref(py),
            compiles,
            hits,
            segments: self.segments.clone_ref(py),
            views: n + self.constants.len() - ran.copies,
            copies: ran.copies,
            output_pointers: std::mem::take(&mut ran.pointers),
            run_s: ran.seconds,
            total_s: t0.elapsed().as_secs_f64(),
        });
        Ok(out.into_any().unbind())
    }
}
