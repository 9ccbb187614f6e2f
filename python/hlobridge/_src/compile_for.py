"""``hb.compile_for(target, what, *example_inputs)``: compile the program
hlobridge builds for ``what`` with the real compiler of another target --
libtpu for ``tpu:v5e``/``tpu:v6e``/``tpu:v5p``, the CUDA PJRT plugin for
``cuda:h100[:N]`` -- on this CPU-only machine (deviceless), or for ``cpu``.

``what`` is one of:

- a function for :func:`hlobridge.call_jax` (``example_inputs`` are its
  arguments: torch tensors, pytrees allowed): lowered for the target's
  platform, so Pallas kernels in it lower for TPU (Mosaic) or GPU as
  written (on ``cpu`` in interpret mode, as ``call_jax`` does);
- an ``nn.Module`` (compiled here with ``torch.compile(model,
  backend="hlobridge", fullgraph=True, dynamic=False)``), or a
  ``torch.compile(model, backend="hlobridge")`` model (or any callable
  that runs one): called once on ``example_inputs`` under ``torch.no_grad()``
  so the backend builds its stitched inference program (this runs the
  model once on the CPU, as a first call would), and that program is
  compiled for the target;
- a :class:`~hlobridge.TrainStep` from :func:`hlobridge.compile_train_step`
  (``example_inputs`` is a batch): the step's ONE stitched program. The step
  runs once on the CPU to build it; the model's parameters, buffers and the
  optimizer state are restored afterwards;
- a :class:`~hlobridge._src.stitching.StitchedProgram` (``hb.stitch_program``),
  e.g. with ``trace_pallas(..., target="tpu"|"cuda")`` kernels, or StableHLO
  module text.

The stitched module is the one hlobridge runs on the CPU (torch pieces and
JAX pieces stitched by the Rust core); for other targets it is compiled as
it is: host GEMM lowering and the other CPU-only rewrites are applied only
for ``cpu`` (``hlobridge::lower::host_lowering_for``). Partitions and
replicas come from the module (``mhlo.num_partitions``; Shardy when it
declares an ``sdy.mesh``), or ``devices=N``.

Errors: :class:`~hlobridge.UnknownTargetError`,
:class:`~hlobridge.AcceleratorNotInstalledError` (``scripts/setup.sh``
installs the compilers into ``.venv/accel``),
:class:`~hlobridge.OutOfMemoryError` (the compiler's numbers: HBM, VMEM,
shared memory, or compiled memory above the device's capacity),
:class:`~hlobridge.CompileError` (any other compiler rejection).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hlobridge import _native
from hlobridge._src.errors import ArgumentError, UnknownTargetError
from hlobridge._src.receipt import Segment

__all__ = ["CompileReceipt", "MemoryUse", "TargetExecutable", "TargetKernel", "compile_for"]


@dataclass(frozen=True)
class MemoryUse:
    """Per-device memory of the compiled program against the capacity (bytes)."""

    arguments: int
    outputs: int
    alias: int
    """Argument bytes reused for outputs (donation)."""
    temporaries: int
    generated_code: int
    total: int
    """arguments + outputs - alias + temporaries + generated code."""
    peak: int
    """Peak as the plugin reports it (0 if it does not)."""
    capacity: int | None
    """The device's memory (HBM), from the plugin or the target table."""
    vmem_capacity: int | None = None
    """TPU vector memory per core (target table), for reference."""

    @property
    def fraction(self) -> float | None:
        """``total / capacity``."""
        return self.total / self.capacity if self.capacity else None


@dataclass(frozen=True)
class TargetKernel:
    """A kernel custom call in the compiled program."""

    custom_call_target: str
    """``tpu_custom_call``, ``__gpu$xla.gpu.triton``, ``mosaic_gpu_v2``..."""
    backend: str
    """``Pallas TPU (Mosaic)``, ``Pallas Triton``, ``Pallas Mosaic GPU``."""
    count: int


@dataclass(frozen=True)
class CompileReceipt:
    """What ``compile_for`` compiled and how."""

    target: str
    platform: str
    device_kind: str
    topology_devices: int
    plugin_api: str
    what: str
    """``call_jax``, ``torch.compile``, ``compile_train_step``, ``stitched`` or ``module``."""
    segments: tuple[Segment, ...]
    """The program's segments (torch / jax / pallas), as in runtime receipts."""
    fingerprint: str
    """SHA-256 prefix of the module text compiled (before any host lowering)."""
    partitions: int
    replicas: int
    build_s: float
    """Building the module (lowering, stitching; a CPU run for models/steps)."""
    compile_s: float
    host_lowering: int
    """Host GEMM calls rewritten (``cpu`` only; 0 for other targets)."""


@dataclass(frozen=True)
class TargetExecutable:
    """A program compiled for a target (serialized; it cannot run here)."""

    target: str
    text: str
    """The StableHLO module that was compiled."""
    memory: MemoryUse | None
    fusions: dict[str, int]
    """Fusions in the optimized program, by kind."""
    custom_calls: dict[str, int]
    kernels: tuple[TargetKernel, ...]
    """Every kernel custom call in the optimized program, with its backend."""
    compile_time: float
    """Seconds the compiler took."""
    generated_code_bytes: int | None
    receipt: CompileReceipt
    optimized_text: str | None = field(default=None, repr=False)
    _serialized: bytes = field(default=b"", repr=False)

    def serialize(self) -> bytes:
        """The serialized executable (a TPU executable, or a GPU executable
        with its cubin), as ``hlobridge compile -o`` writes it."""
        return self._serialized


def _partitioning(text: str) -> tuple[int, int, bool]:
    def attr(name: str) -> int:
        m = re.search(name + r"\s*=\s*(\d+)", text[:text.find("func.func")] if "func.func" in text else text)
        return int(m.group(1)) if m else 1

    return attr("mhlo.num_partitions"), attr("mhlo.num_replicas"), "sdy.mesh @" in text


def _fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _platform(target: str) -> str:
    head = target.split(":", 1)[0]
    if head not in ("cpu", "tpu", "cuda"):
        raise UnknownTargetError(f"{target!r}; known targets: {', '.join(_native.known_targets())}")
    return head


def _jax_function(fn: Callable[..., Any], platform: str, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[str, tuple[Segment, ...]]:
    import torch
    from jax import tree_util

    from hlobridge._src.lowering import lower, segment_of

    leaves, treedef = tree_util.tree_flatten((args, kwargs))
    low = lower(fn, treedef, leaves, platform)
    n_in = sum(isinstance(x, torch.Tensor) for x in leaves)
    seg = segment_of(fn, low, platform, _fingerprint(low.text), n_in, low.out_tree.num_leaves)
    return low.text, (seg,)


def _programs_run_by(run: Callable[[], Any]) -> list[Any]:
    """Programs (``hlobridge._src.dynamo.program.Program``) that ``run`` built or ran."""
    from hlobridge._src.dynamo.program import compiled_graphs

    before = {id(p): p.calls for g in compiled_graphs() for p in g.programs.values()}
    run()
    return [p for g in compiled_graphs() for p in g.programs.values()
            if id(p) not in before or p.calls > before[id(p)]]


def _train_step(step: Any, batch: tuple[Any, ...]) -> list[Any]:
    """Build the step's program by running it once, then restore the model's
    parameters and buffers and the optimizer state."""
    import torch

    model = step.model
    tensors = [*model.parameters(), *model.buffers()]
    # Copies: the step updates parameters and buffers in place.
    saved = [t.data.clone() for t in tensors]
    state = step.state  # a snapshot
    try:
        return _programs_run_by(lambda: step(*batch))
    finally:
        with torch.no_grad():
            for t, d in zip(tensors, saved):
                t.data = d
        step.state = state


def _torch_compiled(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    import torch

    with torch.no_grad():
        return _programs_run_by(lambda: model(*args, **kwargs))


def compile_for(target: str, what: Any, *example_inputs: Any, devices: int | None = None,
                **kwargs: Any) -> TargetExecutable:
    """Compile ``what`` (see the module docs) for ``target``: ``tpu:v5e``,
    ``tpu:v6e[:2x2]``, ``tpu:v5p``, ``cuda:h100[:N]``, ``cpu`` or a target
    from ``HLOBRIDGE_TARGETS``. ``kwargs`` go to a ``call_jax`` function or a
    model. Returns a :class:`TargetExecutable` with ``.memory``,
    ``.fusions``, ``.kernels``, ``.serialize()``, ``.compile_time`` and
    ``.receipt``."""
    import torch

    from hlobridge._src.stitching import StitchedProgram

    platform = _platform(target)
    t0 = time.perf_counter()
    segments: tuple[Segment, ...] = ()
    if isinstance(what, str):
        kind, text = "module", what
    elif isinstance(what, StitchedProgram):
        kind, text, segments = "stitched", what.text, what.segments
    else:
        from hlobridge._src.train_step import TrainStep

        if isinstance(what, TrainStep):
            kind, progs = "compile_train_step", _train_step(what, example_inputs)
        elif isinstance(what, torch.nn.Module) or hasattr(what, "_torchdynamo_orig_callable"):
            if isinstance(what, torch.nn.Module) and not hasattr(what, "_orig_mod"):
                # A plain module: compiled here, as one graph.
                what = torch.compile(what, backend="hlobridge", fullgraph=True, dynamic=False)
            kind, progs = "torch.compile", _torch_compiled(what, example_inputs, kwargs)
        elif callable(what):
            kind = "call_jax"
            text, segments = _jax_function(what, platform, example_inputs, kwargs)
            progs = None
        else:
            raise ArgumentError(f"compile_for: cannot compile a {type(what).__name__}; pass a JAX "
                                        f"function, a torch.compile'd model, a TrainStep, a stitched "
                                        f"program or module text")
        if kind != "call_jax":
            if not progs:
                raise ArgumentError(
                    f"compile_for: running the {kind} model built no hlobridge program; compile it "
                    f"with torch.compile(model, backend=\"hlobridge\") or pass the nn.Module itself")
            if len(progs) != 1:
                raise ArgumentError(
                    f"compile_for: running {kind} built {len(progs)} hlobridge programs; expected one (a "
                    f"graph break splits a model into several programs: compile with fullgraph=True)")
            text, segments = progs[0].text, tuple(progs[0].segments)
    build_s = time.perf_counter() - t0
    parts, replicas, shardy = _partitioning(text)
    if devices is not None and devices > 1:
        parts = devices
    if platform == "cpu":
        r = _native.compile_for_target(target, text, parts, replicas, shardy)
    else:  # libtpu / the CUDA plugin load in a worker process (see target_worker)
        from hlobridge._src import target_worker

        r = target_worker.compile_for_target(target, text, parts, replicas, shardy)
    mem = r["memory"]
    memory = None if mem is None else MemoryUse(
        arguments=mem["arguments"], outputs=mem["outputs"], alias=mem["alias"],
        temporaries=mem["temporaries"], generated_code=mem["generated_code"], total=mem["total"],
        peak=mem["peak"], capacity=r["capacity"], vmem_capacity=r["vmem_capacity"])
    receipt = CompileReceipt(
        target=target, platform=r["platform"], device_kind=r["device_kind"],
        topology_devices=r["topology_devices"], plugin_api=r["plugin_api"], what=kind,
        segments=segments, fingerprint=_fingerprint(text), partitions=r["partitions"],
        replicas=r["replicas"], build_s=build_s, compile_s=r["compile_s"], host_lowering=r["host_lowering"])
    return TargetExecutable(
        target=target, text=text, memory=memory, fusions=dict(r["fusions"]),
        custom_calls=dict(r["custom_calls"]),
        kernels=tuple(TargetKernel(t, b, n) for t, b, n in r["kernels"]),
        compile_time=r["compile_s"], generated_code_bytes=r["generated_code_bytes"], receipt=receipt,
        optimized_text=r["optimized_text"], _serialized=r["serialized"])
