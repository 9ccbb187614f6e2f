"""``hb.export``: write a fused program as a deployable artifact directory,
and :func:`load` to read one back (in-process) with its checks.

An artifact (docs/deploy.md) holds:

- the stitched StableHLO module, one file per exported batch size
  (``module.mlir``, or ``module.b{N}.mlir`` with ``batch_sizes``);
- the parameters, buffers and captured constants as ``weights.safetensors``
  (written here: 8-byte little-endian header length, JSON header, data);
- ``manifest.json``: named inputs (``params``, in program order, with
  ``weight: true`` for those bound from the weights file) and ``outputs``
  with shapes and MLIR dtypes, the producers' versions (torch, torch_xla,
  jax, jaxlib), hlobridge's version, the batch dim, and ``content_hash``.

The content hash is SHA-256 over the manifest text with its own hash value
replaced by zeros, then every module file and the weights file, each framed
as ``name, 0x00, u64-le length, bytes`` -- the same bytes the Rust runtime
(``hlobridge-deploy``) hashes, so no JSON canonicalization is involved.

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
import hashlib
import inspect
import json
import os
import struct
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hlobridge import _native
from hlobridge._native import BridgeError

__all__ = ["Artifact", "ArtifactHashError", "ArtifactVersionError", "ExportError", "export", "load"]

FORMAT = "hlobridge-artifact/1"
ZERO_HASH = "sha256:" + "0" * 64
WEIGHTS_FILE = "weights.safetensors"


class ExportError(BridgeError):
    """A program cannot be exported, or an artifact is malformed."""


class ArtifactHashError(ExportError):
    """An artifact's files do not match its manifest's content hash."""


class ArtifactVersionError(ExportError):
    """An artifact was written by an incompatible format, hlobridge or producer version."""


# -- safetensors -----------------------------------------------------------------

_ST_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint64: "U64", torch.uint32: "U32", torch.uint16: "U16", torch.uint8: "U8",
    torch.bool: "BOOL", torch.complex64: "C64",
}


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()  # type: ignore[no-any-return]


def _safetensors(weights: Sequence[tuple[str, torch.Tensor]]) -> bytes:
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    at = 0
    for name, t in weights:
        st = _ST_DTYPES.get(t.dtype)
        if st is None:
            raise ExportError(f"weight {name}: dtype {t.dtype} has no safetensors type")
        b = _tensor_bytes(t)
        header[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def _read_safetensors(data: bytes) -> dict[str, torch.Tensor]:
    from_st = {v: k for k, v in _ST_DTYPES.items()}
    if len(data) < 8:
        raise ExportError("weights file: shorter than its header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ExportError("weights file: header length runs past the end")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ExportError(f"weights file: header is not JSON ({e})") from None
    out: dict[str, torch.Tensor] = {}
    base = 8 + n
    for name, e in header.items():
        if name == "__metadata__":
            continue
        try:
            dt = from_st[e["dtype"]]
            b, end = (int(v) for v in e["data_offsets"])
            shape = [int(d) for d in e["shape"]]
        except (KeyError, TypeError, ValueError):
            raise ExportError(f"weights file: bad entry {name!r}") from None
        if not 0 <= b <= end <= len(data) - base:
            raise ExportError(f"weights file: entry {name!r} out of bounds")
        buf = bytearray(data[base + b:base + end])
        flat = torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.empty(0, dtype=torch.uint8)
        try:
            out[name] = flat.view(dt).reshape(shape)
        except RuntimeError:
            raise ExportError(f"weights file: entry {name!r} size does not match its shape") from None
    return out


# -- hashing and versions ----------------------------------------------------------


def _content_hash(manifest_text: str, claimed: str, files: Sequence[tuple[str, bytes]]) -> str:
    quoted = json.dumps(claimed)
    if manifest_text.count(quoted) != 1:
        raise ExportError("manifest.json: content_hash value must occur exactly once")
    zeroed = manifest_text.replace(quoted, json.dumps(ZERO_HASH), 1).encode()
    h = hashlib.sha256()
    for name, data in [("manifest.json", zeroed), *files]:
        h.update(name.encode() + b"\0" + struct.pack("<Q", len(data)))
        h.update(data)
    return "sha256:" + h.hexdigest()


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


@dataclass
class _Captured:
    text: str
    params: list[dict[str, Any]]
    weights: list[tuple[str, torch.Tensor]]
    outputs: list[dict[str, Any]]
    results: list[torch.Tensor]
    """The program's outputs on the example inputs (for the caller's checks)."""


def _mlir_dtype(dt: torch.dtype) -> str:
    from hlobridge.dtypes import DTYPES

    entry = DTYPES.get(dt)
    if entry is None:
        raise ExportError(f"dtype {dt} is not supported")
    return entry[0]


def _spec(name: str, t: torch.Tensor, weight: bool | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "dtype": _mlir_dtype(t.dtype), "shape": list(t.shape)}
    if weight is not None:
        d["weight"] = weight
    return d


def _recording_backend(record: list[tuple[Any, list[Any]]]) -> Callable[..., Any]:
    """The ``"hlobridge"`` backend (same decompositions, attention and
    collective checks) whose inference compiler also records the arguments
    each compiled graph is called with."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        from torch._dynamo.backends.common import aot_autograd
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from hlobridge.distributed_guard import check_fx_collectives
        from hlobridge.dynamo.engine import decompositions
        from hlobridge.dynamo.program import CompiledGraph

        check_fx_collectives(gm)

        def compiler(g: torch.fx.GraphModule, _ex: list[Any]) -> Any:
            cg = CompiledGraph(g, "export")

            def run(*args: Any) -> Any:
                flat = list(args[0]) if len(args) == 1 and type(args[0]) is list else list(args)
                record.append((cg, flat))
                return cg(flat)

            run._boxed_call = True  # type: ignore[attr-defined]
            return run

        def no_backward(g: torch.fx.GraphModule, _ex: list[Any]) -> Any:
            raise ExportError("export captures inference; call it under torch.no_grad()")

        aot = aot_autograd(fw_compiler=compiler, bw_compiler=no_backward, inference_compiler=compiler,
                           decompositions=decompositions())
        with sdpa_kernel([SDPBackend.MATH]):
            return aot(gm, example_inputs, **kwargs)

    return backend


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype
            and a.stride() == b.stride())


def _capture_torch(fn: Callable[..., Any], args: Sequence[torch.Tensor], names: list[str]) -> _Captured:
    import torch._dynamo

    if isinstance(fn, torch.nn.Module) and fn.training:
        raise ExportError("export captures inference: call model.eval() first")
    named: list[tuple[str, torch.Tensor]] = []
    if isinstance(fn, torch.nn.Module):
        named = [*fn.named_parameters(), *fn.named_buffers()]
    record: list[tuple[Any, list[Any]]] = []
    compiled = torch.compile(fn, backend=_recording_backend(record), dynamic=False, fullgraph=True)
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
        user = next((k for k, x in enumerate(args) if _same(t, x)), None)
        if user is not None:
            params.append(_spec(names[user], t, False))
            continue
        name = next((n for n, p in named if _same(t, p.detach()) and n not in used_names), None)
        if name is None:
            name = f"_captured{len(weights)}"
        used_names.add(name)
        params.append(_spec(name, t, True))
        weights.append((name, t))
    for k, c in enumerate(prog.constants):
        name = f"_const{k}"
        params.append(_spec(name, c, True))
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
    results = _run_text_once(prog.exe, ins)
    outputs = [_spec(n or f"result_{j}", r) for j, (n, r) in enumerate(zip(out_names, results))]
    return _Captured(prog.text, params, weights, outputs, results)


def _run_text_once(exe: Any, ins: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    from torch.utils.dlpack import from_dlpack

    from hlobridge.dtypes import CODES

    ins = [t.contiguous() for t in ins]
    caps, *_ = _native.execute(exe, [t.data_ptr() for t in ins], [tuple(t.shape) for t in ins],
                               [CODES[t.dtype] for t in ins], list(ins))
    return [from_dlpack(c).clone() for c in caps]


def _capture_jax(fn: Callable[..., Any], args: Sequence[torch.Tensor], names: list[str],
                 weight_pos: set[int]) -> _Captured:
    import jax

    from hlobridge.dtypes import DTYPES, X64
    from hlobridge.pallas_auto import lower_traced

    platform = _native.runtime().platform
    sds = [jax.ShapeDtypeStruct(tuple(x.shape), DTYPES[x.dtype][1]) for x in args]  # type: ignore[no-untyped-call]
    need_x64 = any(x.dtype in X64 for x in args)
    with jax.enable_x64(True) if need_x64 else contextlib.nullcontext():
        traced = jax.jit(fn, keep_unused=True).trace(*sds)
        text = lower_traced(traced, platform).as_text()
    return _finish_text(text, args, names, weight_pos)


def _finish_text(text: str, args: Sequence[torch.Tensor], names: list[str],
                 weight_pos: set[int]) -> _Captured:
    exe, _hit = _native.compile(text)
    results = _run_text_once(exe, args)
    params = [_spec(n, x, k in weight_pos) for k, (n, x) in enumerate(zip(names, args))]
    weights = [(n, x) for k, (n, x) in enumerate(zip(names, args)) if k in weight_pos]
    outs = [_spec(f"output_{j}" if len(results) > 1 else "output", r) for j, r in enumerate(results)]
    return _Captured(text, params, weights, outs, results)


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


# -- the artifact ------------------------------------------------------------------


@dataclass
class Artifact:
    """An artifact directory, its manifest, and (after :func:`export`) the
    exported program's outputs on the example inputs."""

    path: Path
    manifest: dict[str, Any]
    example_outputs: dict[str, torch.Tensor] | None = None

    @property
    def content_hash(self) -> str:
        return str(self.manifest["content_hash"])

    def run(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Run the artifact in this process (hlobridge's runtime) on named
        inputs; the batch size must be one of the exported ones."""
        m = self.manifest
        weights = _read_safetensors((self.path / m["weights_file"]).read_bytes())
        unknown = set(inputs) - {p["name"] for p in m["params"] if not p["weight"]}
        if unknown:
            raise _native.ArgumentError("unknown inputs: " + ", ".join(sorted(unknown)))
        bd = m.get("batch_dim")
        module = m["modules"][0]
        if bd is not None:
            first = next(p for p in m["params"] if not p["weight"])
            b = inputs[first["name"]].shape[bd] if first["name"] in inputs else None
            module = next((f for f in m["modules"] if f["batch"] == b), None)
            if module is None:
                raise _native.ArgumentError(f"batch size {b} was not exported")
        args = []
        for p in m["params"]:
            if p["weight"]:
                args.append(weights[p["name"]])
            elif p["name"] not in inputs:
                raise _native.ArgumentError(f"missing input {p['name']}")
            else:
                args.append(inputs[p["name"]])
        exe, _ = _native.compile((self.path / module["file"]).read_text())
        outs = _run_text_once(exe, args)
        return {o["name"]: t for o, t in zip(m["outputs"], outs)}


def export(what: Any, *example_inputs: torch.Tensor, path: str | os.PathLike[str],
           kind: str = "auto", batch_dim: int | None = None,
           batch_sizes: Sequence[int] | None = None, input_names: Sequence[str] | None = None,
           weights: Sequence[int] = ()) -> Artifact:
    """Export ``what`` for ``example_inputs`` into the directory ``path``
    (created; existing artifact files are overwritten).

    ``kind``: ``"torch"`` (an ``nn.Module`` or torch callable, captured like
    ``torch.compile(backend="hlobridge")``), ``"jax"`` (a JAX function), or
    ``"plan"`` (a :class:`~hlobridge.stitching.StitchedProgram`); ``"auto"``
    picks ``plan`` for a stitched program, ``jax`` for a ``jax.jit``
    function, else ``torch``. ``batch_dim``: the dim of every input and
    output that is the batch (enables dynamic batching in ``hlobridge
    serve``); ``batch_sizes``: the batch sizes to compile (each a module;
    default: the example's). ``weights``: positions of example inputs that
    are weights (``jax``/``plan`` only; a module's parameters and buffers are
    weights automatically).
    """
    from hlobridge.stitching import StitchedProgram

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

    captures: list[tuple[int | None, _Captured]] = []
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
        captures.append((b, cap))

    first = captures[0][1]
    for b, cap in captures[1:]:
        if [p["name"] for p in cap.params] != [p["name"] for p in first.params] or \
                [p["weight"] for p in cap.params] != [p["weight"] for p in first.params]:
            raise ExportError(f"batch size {b} captured a program with different parameters")
        if len(cap.outputs) != len(first.outputs):
            raise ExportError(f"batch size {b} captured a program with different outputs")
    if batch_dim is not None:
        for o in first.outputs:
            if len(o["shape"]) <= batch_dim or o["shape"][batch_dim] != sizes[0]:
                raise ExportError(f"output {o['name']} does not carry the batch along dim {batch_dim}")

    out_dir = Path(path)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[tuple[str, bytes]] = []
    modules = []
    for b, cap in captures:
        fname = "module.mlir" if batch_dim is None else f"module.b{b}.mlir"
        files.append((fname, cap.text.encode()))
        modules.append({"file": fname, "batch": b})
    st = _safetensors(first.weights)
    files.append((WEIGHTS_FILE, st))
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
        "content_hash": ZERO_HASH,
    }
    text = json.dumps(manifest, indent=2)
    h = _content_hash(text, ZERO_HASH, files)
    text = text.replace(json.dumps(ZERO_HASH), json.dumps(h), 1)
    manifest["content_hash"] = h
    for name, data in files:
        (out_dir / name).write_bytes(data)
    (out_dir / "manifest.json").write_text(text)
    same = next((cap for b, cap in captures if b == example_b), None)
    example = None if same is None else {o["name"]: r for o, r in zip(first.outputs, same.results)}
    return Artifact(out_dir, manifest, example)


def load(path: str | os.PathLike[str], check_producers: bool = True) -> Artifact:
    """Read an artifact and verify it: format, hlobridge version (major.minor),
    content hash over every file, and (``check_producers``) that the
    producers recorded match those installed here. Raises
    :class:`ArtifactHashError` / :class:`ArtifactVersionError`."""
    d = Path(path)
    try:
        text = (d / "manifest.json").read_text()
        m = json.loads(text)
    except (OSError, ValueError) as e:
        raise ExportError(f"{d}: cannot read manifest.json ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ArtifactVersionError(f"{d}: not a {FORMAT} artifact")
    mine = _native.__version__.split(".")[:2]
    if str(m.get("hlobridge_version", "")).split(".")[:2] != mine:
        raise ArtifactVersionError(f"{d}: written by hlobridge {m.get('hlobridge_version')}, "
                                   f"this is {_native.__version__}")
    if check_producers:
        have = producer_versions()
        diff = {k: (v, have.get(k)) for k, v in m.get("producers", {}).items() if have.get(k) != v}
        if diff:
            raise ArtifactVersionError(
                f"{d}: producer versions differ (artifact, installed): {diff}; "
                f"pass check_producers=False to load anyway")
    try:
        names = [f["file"] for f in m["modules"]] + [m["weights_file"]]
    except (KeyError, TypeError):
        raise ExportError(f"{d}: manifest.json lacks modules/weights_file") from None
    for n in names:
        if not isinstance(n, str) or "/" in n or n.startswith("."):
            raise ExportError(f"{d}: file name {n!r} is not a plain name inside the artifact")
    try:
        files = [(n, (d / n).read_bytes()) for n in names]
    except OSError as e:
        raise ExportError(f"{d}: {e}") from None
    actual = _content_hash(text, str(m.get("content_hash")), files)
    if actual != m.get("content_hash"):
        raise ArtifactHashError(f"{d}: content hash mismatch: manifest {m.get('content_hash')}, "
                                f"files {actual}")
    return Artifact(d, m)


class _CallableModule(types.ModuleType):
    """``hlobridge.export`` is both this module (``hb.export.load``,
    ``hb.export.ExportError``) and the function (``hb.export(...)``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Artifact:
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
