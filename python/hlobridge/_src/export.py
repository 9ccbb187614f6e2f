"""``hb.export``: write a fused program as a deployable artifact directory,
and :func:`load` to read one back (in-process) with its checks.

An artifact (docs/deploy.md) holds:

- the stitched StableHLO module, one file per exported batch size
  (``module.mlir``, or ``module.b{N}.mlir`` with ``batch_sizes``); or, with
  ``dynamic=``, ONE module with ``?`` dims (``module.mlir``, format
  ``hlobridge-artifact/2``; :mod:`hlobridge._src.export_dynamic`), refined
  per concrete shape on first use by the Rust refinement pass and compiled
  once per shape;
- the parameters, buffers and captured constants as ``weights.safetensors``;
- ``manifest.json``: named inputs (``params``, in program order, with
  ``weight: true`` for those bound from the weights file) and ``outputs``
  with shapes and MLIR dtypes, the producers' versions (torch, torch_xla,
  jax, jaxlib), hlobridge's version, the batch dim, each file's size, the
  row-independence check (``rows_independent``, ``batching_refused``), and
  ``content_hash``; a dynamic artifact adds ``dynamic.symbols`` (each
  symbolic dim's name and range) and ``dims`` per input and output.

The format is defined once, in Rust (the ``hlobridge-artifact`` crate):
this module writes and reads artifacts through the extension
(``_native.artifact_write`` / ``artifact_read``), so the writer, the
reader's checks (regular files only, sizes capped before reading, each file
read once, content hash, weights against the manifest) and the hash are the
ones ``hlobridge serve`` and the Rust runtime use. :class:`Artifact` runs
from the verified bytes it holds in memory: changing the files after
:func:`load` changes nothing.

Batching checks at export (with ``batch_dim``): every output must carry the
batch at every exported batch size (else :class:`ExportError`), and the rows
must be independent -- permuting the example batch must permute the
outputs, and changing the other rows must leave a row's outputs alone. A
model that mixes rows is still exported, with ``rows_independent: false``
and the reason in ``batching_refused``: servers then neither pad its
requests nor batch them together (``hlobridge serve --batching`` refuses it
by name).

What can be exported:

- an ``nn.Module`` (or any torch callable): its inference forward, captured
  exactly as ``torch.compile(backend="hlobridge")`` does (Dynamo with
  ``fullgraph=True``, AOTAutograd, torch pieces by torch_xla, ``call_jax``
  pieces by ``jax.jit``, stitched into ONE module); parameters and buffers
  become weights;
- a JAX function (``kind="jax"``, or any ``jax.jit``-wrapped function),
  lowered like ``call_jax`` (Pallas kernels in interpret mode on CPU);
- a stitched plan (:class:`hlobridge.stitching.StitchedProgram`).

For the last two, ``weights=`` names which example inputs are weights.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hlobridge import _native
from hlobridge._src.export_capture import Captured, mlir_dtype, recording_backend, run_text_once, same_tensor, tensor_spec
from hlobridge.errors import (
    ArgumentError,
    ArtifactHashError,
    ArtifactVersionError,
    BridgeError,
    DtypeError,
    ExportError,
)

__all__ = ["Artifact", "ArtifactHashError", "ArtifactVersionError", "ExportError", "export", "load"]

FORMAT = _native.ARTIFACT_FORMAT
WEIGHTS_FILE = "weights.safetensors"

def _torch_dtype(mlir: str) -> torch.dtype:
    from hlobridge._src.dtypes import BY_MLIR

    t = BY_MLIR.get(mlir)
    if t is None:
        raise ExportError(f"dtype {mlir!r} has no torch dtype")
    return t


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()  # type: ignore[no-any-return]


def _from_bytes(data: bytes, mlir: str, shape: Sequence[int]) -> torch.Tensor:
    dt = _torch_dtype(mlir)
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(dt).reshape(list(shape))


def producer_versions() -> dict[str, str]:
    """Installed versions of the producers an artifact records."""
    from importlib import metadata

    out = {}
    for dist, key in (("torch", "torch"), ("torch-xla", "torch_xla"), ("jax", "jax"), ("jaxlib", "jaxlib")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


# -- capture -----------------------------------------------------------------------


def _capture_torch(fn: Callable[..., Any], args: Sequence[torch.Tensor], names: list[str]) -> Captured:
    import torch._dynamo

    if isinstance(fn, torch.nn.Module) and fn.training:
        raise ExportError("export captures inference: call model.eval() first")
    named: list[tuple[str, torch.Tensor]] = []
    if isinstance(fn, torch.nn.Module):
        named = [*fn.named_parameters(), *fn.named_buffers()]
    record: list[tuple[Any, list[Any]]] = []
    compiled = torch.compile(fn, backend=recording_backend(record), dynamic=False, fullgraph=True)
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    try:
        with torch.no_grad(), torch._dynamo.config.patch(**{limit: 1024}):
            compiled(*args)
    except BridgeError:
        raise
    except Exception as e:  # Dynamo wraps backend errors
        inner = getattr(e, "inner_exception", None)
        if isinstance(inner, BridgeError):
            raise inner from None
        raise ExportError(f"capturing the forward failed: {type(e).__name__}: {e}") from e
    if len(record) != 1:
        raise ExportError(f"the forward ran {len(record)} compiled graphs; export needs exactly one")
    cg, gargs = record[0]
    prog = cg._last
    if prog is None:
        raise ExportError("the captured graph did not build a program")
    if cg.random_inputs:
        raise ExportError("the forward draws random numbers (dropout in training mode?); "
                          "export captures a deterministic inference program")
    params: list[dict[str, Any]] = []
    weights: list[tuple[str, torch.Tensor]] = []
    used_names: set[str] = set()
    for i in prog.inputs:
        t = gargs[i]
        user = next((k for k, x in enumerate(args) if same_tensor(t, x)), None)
        if user is not None:
            params.append(tensor_spec(names[user], t, False))
            continue
        name = next((n for n, p in named if same_tensor(t, p.detach()) and n not in used_names), None)
        if name is None:
            name = f"_captured{len(weights)}"
        used_names.add(name)
        params.append(tensor_spec(name, t, True))
        weights.append((name, t))
    for k, c in enumerate(prog.constants):
        name = f"_const{k}"
        params.append(tensor_spec(name, c, True))
        weights.append((name, c))
    # Program results, named by the first graph output that returns each.
    n_res = 1 + max((o[1] for o in prog.outputs if o is not None and o[0] == "prog"), default=-1)
    out_names: list[str | None] = [None] * n_res
    for k, o in enumerate(prog.outputs):
        if o is None or o[0] != "prog":
            raise ExportError(f"output {k} of the forward is not computed by the program (an input "
                              f"returned unchanged, or None); export needs computed outputs")
        if out_names[o[1]] is None:
            out_names[o[1]] = f"output_{k}" if len(prog.outputs) > 1 else "output"
    ins = [gargs[i].contiguous() for i in prog.inputs] + list(prog.constants)
    results = run_text_once(prog.exe, ins)
    outputs = [tensor_spec(n or f"result_{j}", r) for j, (n, r) in enumerate(zip(out_names, results))]
    return Captured(prog.text, params, weights, outputs, results, prog.exe, ins)


def _capture_jax(fn: Callable[..., Any], args: Sequence[torch.Tensor], names: list[str],
                 weight_pos: set[int]) -> Captured:
    import jax

    from hlobridge._src.dtypes import DTYPES, X64
    from hlobridge._src.pallas_auto import lower_traced

    platform = _native.runtime().platform
    sds = [jax.ShapeDtypeStruct(tuple(x.shape), DTYPES[x.dtype][1]) for x in args]  # type: ignore[no-untyped-call]
    need_x64 = any(x.dtype in X64 for x in args)
    with jax.enable_x64(True) if need_x64 else contextlib.nullcontext():
        traced = jax.jit(fn, keep_unused=True).trace(*sds)
        text = lower_traced(traced, platform).as_text()
    return _finish_text(text, args, names, weight_pos)


def _finish_text(text: str, args: Sequence[torch.Tensor], names: list[str],
                 weight_pos: set[int]) -> Captured:
    exe, _hit = _native.compile(text)
    results = run_text_once(exe, args)
    params = [tensor_spec(n, x, k in weight_pos) for k, (n, x) in enumerate(zip(names, args))]
    weights = [(n, x) for k, (n, x) in enumerate(zip(names, args)) if k in weight_pos]
    outs = [tensor_spec(f"output_{j}" if len(results) > 1 else "output", r) for j, r in enumerate(results)]
    return Captured(text, params, weights, outs, results, exe, list(args))


def _input_names(what: Any, n: int, given: Sequence[str] | None) -> list[str]:
    if given is not None:
        names = list(given)
        if len(names) != n or len(set(names)) != n:
            raise ExportError(f"input_names: need {n} distinct names, got {names}")
        return names
    try:
        fn = what.forward if isinstance(what, torch.nn.Module) else what
        ps = [p.name for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        ps = []
    return ps[:n] if len(ps) >= n else [f"input_{k}" for k in range(n)]


def _resize(x: torch.Tensor, dim: int, b: int) -> torch.Tensor:
    idx = torch.arange(b) % x.shape[dim]
    return x.index_select(dim, idx).contiguous()


# -- batching checks ---------------------------------------------------------------


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        scale = float(b.abs().max()) if b.numel() else 0.0
        return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6 * max(1.0, scale), equal_nan=True))
    return bool(torch.equal(a, b))


def _rows_mixed(cap: Captured, b: int, bd: int) -> str | None:
    """Why the rows of ``cap`` (captured at batch size ``b`` >= 2) are not
    independent, or ``None``: permuting the batch must permute the outputs,
    and making every row a copy of row 0 must leave row 0's outputs alone."""
    inputs = [k for k, p in enumerate(cap.params) if not p["weight"]]

    def run_with(idx: torch.Tensor) -> list[torch.Tensor]:
        args = list(cap.args)
        for k in inputs:
            args[k] = args[k].index_select(bd, idx).contiguous()
        return run_text_once(cap.exe, args)

    perm = torch.roll(torch.arange(b), 1)  # every row moves
    for o, got, base in zip(cap.outputs, run_with(perm), cap.results):
        if not _close(got, base.index_select(bd, perm)):
            return (f"output {o['name']}: permuting the example batch along dim {bd} does not "
                    f"permute the output rows")
    row0 = torch.zeros(b, dtype=torch.long)
    first = torch.zeros(1, dtype=torch.long)
    for o, got, base in zip(cap.outputs, run_with(row0), cap.results):
        if not _close(got.index_select(bd, first), base.index_select(bd, first)):
            return (f"output {o['name']}: a row's output changes when the other rows of the batch "
                    f"change (the model mixes rows along dim {bd})")
    return None


# -- the artifact ------------------------------------------------------------------


@dataclass
class Artifact:
    """A verified artifact held in memory: its manifest, module texts and
    weights (read once by :func:`load`, or just written by :func:`export`),
    and (after :func:`export`) the exported program's outputs on the example
    inputs. :meth:`run` uses only what is held here; the files are not read
    again."""

    path: Path
    manifest: dict[str, Any]
    example_outputs: dict[str, torch.Tensor] | None = None
    _modules: dict[str, str] = field(default_factory=dict, repr=False)
    _weights: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    _exes: dict[Any, Any] = field(default_factory=dict, repr=False)
    """Compiled programs: per module file; a dynamic artifact's per argument shapes."""
    _manifest_text: str | None = field(default=None, repr=False)
    _checked: set[frozenset[tuple[str, tuple[int, ...]]]] = field(default_factory=set, repr=False)

    @property
    def content_hash(self) -> str:
        return str(self.manifest["content_hash"])

    @property
    def rows_independent(self) -> bool | None:
        """Whether the exporter found every output row to depend only on its
        own input row (``None``: not checked)."""
        v = self.manifest.get("rows_independent")
        return None if v is None else bool(v)

    def _check(self, name: str, t: torch.Tensor, spec: dict[str, Any], bd: int | None) -> None:
        if not isinstance(t, torch.Tensor):
            raise ArgumentError(f"input {name} must be a torch tensor")
        want = _torch_dtype(spec["dtype"])
        if t.dtype != want:
            raise DtypeError(f"input {name}: dtype must be {want}, not {t.dtype}")
        if "dims" in spec:
            return  # a dynamic artifact: _native.artifact_check_shapes
        shape = list(spec["shape"])
        if len(t.shape) != len(shape) or any(
                a != b and d != bd for d, (a, b) in enumerate(zip(t.shape, shape))):
            raise ArgumentError(f"input {name}: shape must be {shape}"
                                + ("" if bd is None else f" (any exported batch size along dim {bd})"))

    def run(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Run the artifact in this process (hlobridge's runtime) on named
        inputs. With a batch dim, any batch size up to the largest exported
        one runs: one that was not exported is padded with zero rows to the
        next exported size and the outputs are sliced back, as ``hlobridge
        serve`` does (unless the exporter found the rows not independent:
        then the batch size must be an exported one)."""
        m = self.manifest
        specs = {p["name"]: p for p in m["params"] if not p["weight"]}
        unknown = set(inputs) - set(specs)
        if unknown:
            raise ArgumentError("unknown inputs: " + ", ".join(sorted(unknown)))
        missing = [n for n in specs if n not in inputs]
        if missing:
            raise ArgumentError("missing inputs: " + ", ".join(missing))
        bd = m.get("batch_dim")
        for n, spec in specs.items():
            self._check(n, inputs[n], spec, bd)
        if m.get("dynamic") is not None:
            return self._run_dynamic(inputs)
        module = m["modules"][0]
        if bd is not None:
            sizes = {int(inputs[n].shape[bd]) for n in specs}
            b = sizes.pop() if len(sizes) == 1 else None
            if b is None:
                raise ArgumentError("inputs disagree on the batch size")
            module = _bucket(m, b)
            if int(module["batch"]) != b:
                inputs = {n: _pad_rows(t, bd, int(module["batch"])) for n, t in inputs.items()}
        args = [self._weights[p["name"]] if p["weight"] else inputs[p["name"]].contiguous()
                for p in m["params"]]
        file = module["file"]
        outs = self._execute(file, file, args, lambda: self._modules[file])
        if bd is not None and int(module["batch"]) != b:
            outs = [t.narrow(bd, 0, b) for t in outs]
        return {o["name"]: t for o, t in zip(m["outputs"], outs)}

    def _execute(self, key: Any, label: str, args: list[torch.Tensor],
                 text: Callable[[], str]) -> list[torch.Tensor]:
        """Run the program cached under ``key`` on ``args``, compiling
        ``text()`` on first use, with a receipt (segment ``label``)."""
        from torch.utils.dlpack import from_dlpack

        from hlobridge._src.dtypes import CODES
        from hlobridge._src.receipt import Segment, compile_accounting, run_and_record

        t0 = time.perf_counter()
        exe = self._exes.get(key)
        cache: Any = "hit"
        compile_s = 0.0
        if exe is None:
            exe, hit = _native.compile(text())
            compile_s = time.perf_counter() - t0
            cache = "content" if hit else "miss"
            self._exes[key] = exe
        seg = Segment(f"export:{self.path.name}/{label}", "hlobridge", self.content_hash,
                      len(args), len(self.manifest["outputs"]))
        return run_and_record(exe, args, platform=_native.runtime().platform, segments=[seg],
                              accounting=compile_accounting(cache, compile_s), t0=t0,
                              wrap=from_dlpack, shapes=[tuple(t.shape) for t in args],
                              codes=[CODES[t.dtype] for t in args])

    def _run_dynamic(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """:meth:`run` of a dynamic artifact: the shapes checked against the
        manifest's symbols (``_native.artifact_check_shapes``, the check
        ``hlobridge serve`` makes), a batch below the batch symbol's ``min``
        padded up to it, and the ONE module refined to the call's shapes by
        the Rust pass and compiled on first use of each shape."""
        from hlobridge._src.errors import ShapeAssertionError

        m = self.manifest
        text = self._manifest_json()
        seen = frozenset((n, tuple(t.shape)) for n, t in inputs.items())
        if seen not in self._checked:  # shapes checked once, then remembered
            _native.artifact_check_shapes(text, [(n, list(t.shape)) for n, t in inputs.items()])
        bd = m.get("batch_dim")
        b = rows = None
        if bd is not None:
            sizes = {int(t.shape[bd]) for t in inputs.values()}
            if len(sizes) != 1:
                raise ArgumentError("inputs disagree on the batch size")
            b = sizes.pop()
            try:
                rows = _native.artifact_bucket(text, b)
            except ArgumentError as e:
                sym = next(p["dims"][bd] for p in m["params"] if not p["weight"])
                err = ShapeAssertionError(f"shape constraint violated: {e}")
                err.dim = f"dim {bd} ({sym})"
                raise err from None
            if rows != b:
                inputs = {n: _pad_rows(t, bd, rows) for n, t in inputs.items()}
        if len(self._checked) < 1024:
            self._checked.add(seen)
        args = [self._weights[p["name"]] if p["weight"] else inputs[p["name"]].contiguous()
                for p in m["params"]]
        key = tuple(tuple(int(d) for d in t.shape) for t in args)
        file = m["modules"][0]["file"]
        outs = self._execute(key, f"{file}{list(key)}", args,  # refined per shape, in Rust
                             lambda: _native.refine_shapes(self._modules[file], [list(d) for d in key]))
        if bd is not None and rows != b:
            outs = [t.narrow(bd, 0, int(b)) for t in outs]  # type: ignore[arg-type]
        return {o["name"]: t for o, t in zip(m["outputs"], outs)}

    def _manifest_json(self) -> str:
        if self._manifest_text is None:
            self._manifest_text = json.dumps(self.manifest)
        return self._manifest_text

    @property
    def compiled_shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        """A dynamic artifact's argument shapes compiled so far (weights
        included, in parameter order), oldest first."""
        return [k for k in self._exes if isinstance(k, tuple)]


def _bucket(m: dict[str, Any], b: int) -> dict[str, Any]:
    """The module a batch of ``b`` rows runs on, by the one rule every front
    end shares (``hlobridge_artifact::Manifest::bucket_for``, which
    ``hlobridge serve`` and the Rust deployer call too): the module exported
    for ``b``, else -- when the rows are independent -- the smallest
    exported batch size above ``b``, the rows padded with zeros and the
    outputs sliced back. Raises :class:`ArgumentError` with the reason."""
    size = _native.artifact_bucket(json.dumps(m), b)
    return next(f for f in m["modules"] if f.get("batch") == size)


def _pad_rows(t: torch.Tensor, bd: int, rows: int) -> torch.Tensor:
    """``t`` with zero rows appended along ``bd`` up to ``rows``."""
    shape = list(t.shape)
    shape[bd] = rows - shape[bd]
    return torch.cat([t, torch.zeros(shape, dtype=t.dtype, device=t.device)], dim=bd)


def _check_names(params: list[dict[str, Any]]) -> None:
    seen: dict[str, bool] = {}
    for p in params:
        if p["name"] in seen:
            kinds = {True: "a parameter or buffer of the model", False: "a forward argument"}
            raise ExportError(
                f"the name {p['name']!r} is both {kinds[seen[p['name']]]} and {kinds[p['weight']]}; "
                f"pass input_names=[...] to name the forward's arguments apart")
        seen[p["name"]] = p["weight"]


def export(what: Any, *example_inputs: torch.Tensor, path: str | os.PathLike[str],
           kind: str = "auto", batch_dim: int | None = None,
           batch_sizes: Sequence[int] | None = None, input_names: Sequence[str] | None = None,
           weights: Sequence[int] = (),
           dynamic: bool | Mapping[str, Mapping[int, str]] | None = None) -> Artifact:
    """Export ``what`` for ``example_inputs`` into the directory ``path``
    (created; existing artifact files are overwritten).

    ``kind``: ``"torch"`` (an ``nn.Module`` or torch callable, captured like
    ``torch.compile(backend="hlobridge")``), ``"jax"`` (a JAX function), or
    ``"plan"`` (a :class:`~hlobridge._src.stitching.StitchedProgram`); ``"auto"``
    picks ``plan`` for a stitched program, ``jax`` for a ``jax.jit``
    function, else ``torch``. ``batch_dim``: the dim of every input and
    output that is the batch (enables padding and dynamic batching in
    ``hlobridge serve``); ``batch_sizes``: the batch sizes to compile (each a
    module; default: the example's). Every output must carry the batch at
    every size, and the rows are checked for independence (module docs).
    ``weights``: positions of example inputs that are weights (``jax``/``plan``
    only; a module's parameters and buffers are weights automatically).
    ``dynamic``: capture ONCE with symbolic dims and store ONE module, refined
    per shape at run time instead of one module per batch size: ``True``
    makes ``batch_dim`` dynamic (symbol ``batch``), ``{"x": {0: "batch", 1:
    "seq"}}`` names each dynamic dim of each input (``torch`` and ``jax``
    kinds; not with ``batch_sizes``).
    """
    from hlobridge._src.stitching import StitchedProgram

    if kind == "auto":
        kind = ("plan" if isinstance(what, StitchedProgram)
                else "jax" if hasattr(what, "lower") and hasattr(what, "trace") else "torch")
    if kind not in ("torch", "jax", "plan"):
        raise ExportError(f"kind must be auto, torch, jax or plan, not {kind!r}")
    args = list(example_inputs)
    for k, x in enumerate(args):
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
            raise ExportError(f"example input {k} must be a CPU torch tensor")
    names = _input_names(what, len(args), input_names)
    weight_pos = set(weights)
    if kind == "torch" and weight_pos:
        raise ExportError("weights= is for jax/plan exports; a module's parameters are weights already")
    if batch_dim is None and batch_sizes is not None:
        raise ExportError("batch_sizes needs batch_dim")
    if batch_dim is not None:
        for k, x in enumerate(args):
            if k not in weight_pos and (x.dim() <= batch_dim or x.shape[batch_dim] != args[0].shape[batch_dim]):
                raise ExportError(f"input {names[k]} has no batch dim {batch_dim} of the common size")
    example_b = args[0].shape[batch_dim] if batch_dim is not None and args else None
    sizes: list[int | None] = list(batch_sizes) if batch_sizes else [example_b]
    if batch_dim is not None and any(not isinstance(b, int) or b < 1 for b in sizes):
        raise ExportError("batch_sizes must be positive integers")
    if len(set(sizes)) != len(sizes):
        raise ExportError("batch_sizes must be distinct")

    dyn_symbols: list[dict[str, Any]] | None = None
    captures: list[tuple[int | None, Any]] = []
    if dynamic is not None and dynamic is not False:
        from hlobridge._src import export_dynamic

        if batch_sizes is not None:
            raise ExportError("dynamic= replaces batch_sizes: one module serves every size")
        if kind == "plan":
            raise ExportError("a stitched plan has fixed shapes; dynamic= is for torch and jax")
        spec = export_dynamic.normalize(dynamic, names, args, batch_dim, weight_pos)
        if kind == "torch":
            dcap = export_dynamic.capture_torch(what, args, names, spec)
        else:
            dcap = export_dynamic.capture_jax(what, args, names, weight_pos, spec)
        _check_names(dcap.params)
        dyn_symbols = dcap.symbols
        captures.append((example_b, dcap))
        sizes = []
    for b in sizes:
        xs = args
        if batch_dim is not None and b != example_b:
            xs = [x if k in weight_pos else _resize(x, batch_dim, int(b)) for k, x in enumerate(args)]
        if kind == "torch":
            cap = _capture_torch(what, xs, names)
        elif kind == "jax":
            cap = _capture_jax(what, xs, names, weight_pos)
        else:
            if len(sizes) > 1:
                raise ExportError("a stitched plan has fixed shapes: one batch size only")
            cap = _finish_text(what.text, xs, names, weight_pos)
        _check_names(cap.params)
        captures.append((b, cap))

    first = captures[0][1]
    for b, cap in captures[1:]:
        if [p["name"] for p in cap.params] != [p["name"] for p in first.params] or \
                [p["weight"] for p in cap.params] != [p["weight"] for p in first.params]:
            raise ExportError(f"batch size {b} captured a program with different parameters")
        if len(cap.outputs) != len(first.outputs):
            raise ExportError(f"batch size {b} captured a program with different outputs")
    rows_independent: bool | None = None
    refused: str | None = None
    if batch_dim is not None:
        batch_sym = None if dyn_symbols is None else next(
            p["dims"][batch_dim] for p in first.params if not p["weight"])
        for b, cap in captures:
            for o in cap.outputs:
                if batch_sym is not None and (len(o["dims"]) <= batch_dim
                                              or o["dims"][batch_dim] != batch_sym):
                    raise ExportError(
                        f"output {o['name']} has dims {o['dims']}: it does not carry the batch "
                        f"symbol {batch_sym!r} along dim {batch_dim}, so requests could not be "
                        f"split back (export without batch_dim, or return per-row outputs)")
                if len(o["shape"]) <= batch_dim or o["shape"][batch_dim] != b:
                    raise ExportError(
                        f"output {o['name']} has shape {o['shape']} at batch size {b}: it does not "
                        f"carry the batch along dim {batch_dim}, so requests could not be split "
                        f"back (export without batch_dim, or return per-row outputs)")
        b_max, cap_max = max(((b, c) for b, c in captures), key=lambda bc: int(bc[0] or 0))
        if b_max is not None and b_max >= 2:
            refused = _rows_mixed(cap_max, int(b_max), batch_dim)
            rows_independent = refused is None
            if refused is not None:
                refused = (f"{refused}; requests of this artifact are neither padded nor batched "
                           f"together")

    out_dir = Path(path)
    modules = []
    texts: list[tuple[str, str]] = []
    for b, cap in captures:
        fname = "module.mlir" if batch_dim is None or dyn_symbols is not None else f"module.b{b}.mlir"
        texts.append((fname, cap.text))
        modules.append({"file": fname, "batch": None if dyn_symbols is not None else b})
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "hlobridge_version": _native.__version__,
        "producers": producer_versions(),
        "kind": {"torch": "torch.compile", "jax": "jax", "plan": "plan"}[kind],
        "params": first.params,
        "outputs": first.outputs,
        "batch_dim": batch_dim,
        "modules": modules,
        "weights_file": WEIGHTS_FILE,
        "content_hash": "",
    }
    if rows_independent is not None:
        manifest["rows_independent"] = rows_independent
    if refused is not None:
        manifest["batching_refused"] = refused
    if dyn_symbols is not None:
        manifest["dynamic"] = {"symbols": dyn_symbols}
    weights_in = [(n, mlir_dtype(t.dtype), list(t.shape), _tensor_bytes(t)) for n, t in first.weights]
    text = _native.artifact_write(str(out_dir), json.dumps(manifest), texts, weights_in)
    same = next((cap for b, cap in captures if b == example_b), None)
    example = None if same is None else {o["name"]: r for o, r in zip(first.outputs, same.results)}
    held = {n: _from_bytes(d, dt, shape) for n, dt, shape, d in weights_in}
    return Artifact(out_dir, json.loads(text), example, dict(texts), held)


def load(path: str | os.PathLike[str], check_producers: bool = True) -> Artifact:
    """Read an artifact once and verify it (through ``hlobridge-artifact``):
    regular files only (no symlinks), sizes capped by the manifest before
    reading, format and hlobridge version (major.minor), the content hash
    over every file, the weights against the manifest's dtypes and shapes,
    and (``check_producers``) that the producers recorded match those
    installed here. Raises :class:`ArtifactHashError` /
    :class:`ArtifactVersionError` / :class:`ExportError`. The returned
    :class:`Artifact` runs from the bytes read here."""
    d = Path(path)
    text, modules, weights = _native.artifact_read(
        str(d), producer_versions() if check_producers else None)
    held = {n: _from_bytes(data, dt, shape) for n, dt, shape, data in weights}
    return Artifact(d, json.loads(text), None, dict(modules), held)
