"""``stitch_program``: stitch torch, JAX and Pallas segments into ONE module,
prove that every embedded Pallas kernel survived, and run it.

A thin layer over :func:`hlobridge._native.stitch`: segments are the native
``(name, producer, module_text, entry, input_handles, output_handles)`` tuples
or ``(PallasSegment, input_handles, output_handles)``. After stitching, every
kernel custom call of the Pallas segments is looked up in the fused text and in
its ``format_module`` round-trip (same target, payload hash, operand and
result types) -- for ``cuda``/``tpu`` kernels, which cannot be compiled on a
CPU-only machine, this is the check that the kernel is in the program that
would run. Interpret-mode kernels (``cpu``) have no custom call: they are
plain StableHLO and their proof is the numerics.

:meth:`StitchedProgram.run` compiles once (CPU runtime) and executes with
torch tensors; its receipt (:func:`hlobridge.last_receipt`) lists one
:class:`KernelSegment` per Pallas segment, whose ``kernels`` name every
embedded kernel with its target, backend and payload hash.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hlobridge import _native
from hlobridge._src.errors import ArgumentError
from hlobridge._src.pallas import KernelRecord, PallasLoweringError, PallasSegment, find_kernels
from hlobridge._src.receipt import CacheOutcome, Segment, compile_accounting, run_and_record

__all__ = ["KernelSegment", "StitchedProgram", "stitch_program"]

NativeSegment = tuple[str, str, str, str, list[str], list[str]]


@dataclass(frozen=True)
class KernelSegment(Segment):
    """A receipt segment produced by Pallas, with the kernels it embeds."""

    kernels: tuple[KernelRecord, ...] = ()


@dataclass
class StitchedProgram:
    """One fused module made of several segments (see the module docs)."""

    text: str
    """The fused StableHLO module."""
    report: dict[str, Any]
    """The stitcher's report (segments, handles, dead ops removed, ...)."""
    kernels: tuple[KernelRecord, ...]
    """Every Pallas kernel embedded in the program, verified present."""
    segments: tuple[Segment, ...]
    input_types: tuple[str, ...]
    _exe: Any = field(default=None, repr=False)

    @property
    def targets(self) -> set[str]:
        """Targets of the embedded kernels (``cpu`` for interpret mode)."""
        return {k.target if k.backend != "interpret" else "cpu" for k in self.kernels}

    def run(self, *tensors: Any) -> list[Any]:
        """Compile (once) and run on torch CPU tensors given in input order;
        returns the outputs as torch tensors and records a receipt. CUDA and
        xla tensors run on their device (:class:`hlobridge.devices.DeviceProgram`)."""
        import torch
        from torch.utils.dlpack import from_dlpack

        from hlobridge._src.dtypes import CODES

        if any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in tensors):
            # cuda tensors: the CUDA runtime; xla tensors: torch_xla's runtime.
            from hlobridge._src.devices import DeviceProgram

            return DeviceProgram(self)(*tensors)
        t0 = time.perf_counter()
        platform = _native.runtime().platform
        foreign = [k for k in self.kernels if k.backend != "interpret" and k.target != platform]
        if foreign:
            k = foreign[0]
            raise PallasLoweringError(k.name, k.target, f"the program embeds a {k.backend} kernel, which the "
                                      f"{platform} runtime cannot run")
        if len(tensors) != len(self.input_types):
            raise ArgumentError(f"stitched program takes {len(self.input_types)} inputs, "
                                        f"got {len(tensors)}")
        outcome: CacheOutcome = "hit"
        compile_s = 0.0
        if self._exe is None:
            self._exe, hit = _native.compile(self.text)
            outcome, compile_s = ("content", 0.0) if hit else ("miss", self._exe.compile_time_s)
        ins = [t.contiguous() for t in tensors if isinstance(t, torch.Tensor)]
        return run_and_record(self._exe, ins, shapes=[tuple(t.shape) for t in ins],
                              codes=[CODES[t.dtype] for t in ins], platform=platform,
                              segments=self.segments, accounting=compile_accounting(outcome, compile_s),
                              t0=t0, wrap=from_dlpack)


def _fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stitch_program(inputs: Sequence[tuple[str, str] | tuple[str, str, bool]],
                   segments: Sequence[NativeSegment | tuple[PallasSegment, Sequence[str], Sequence[str]]],
                   outputs: Sequence[str], inline: bool = True) -> StitchedProgram:
    """Stitch ``segments`` into one module with ``inputs`` ``(name, mlir_type[,
    donate])`` and ``outputs`` (handle names), then verify that every Pallas
    kernel is present in the fused module and in its ``format_module``
    round-trip (raises :class:`~hlobridge.pallas.PallasLoweringError` if one
    is missing)."""
    native: list[NativeSegment] = []
    receipt_segs: list[Segment] = []
    kernels: list[KernelRecord] = []
    for seg in segments:
        if isinstance(seg[0], PallasSegment):
            pseg, ins, outs = seg[0], seg[1], seg[2]
            t = pseg.stitch_segment(list(ins), list(outs))
            kernels.extend(pseg.kernels)
            receipt_segs.append(KernelSegment(pseg.name, "pallas", _fingerprint(pseg.module_text),
                                              len(pseg.input_types), len(pseg.output_types), pseg.kernels))
        else:
            t = tuple(seg)  # type: ignore[assignment]
            name, producer, text, _entry, ins, outs = t  # type: ignore[misc]
            receipt_segs.append(Segment(name, producer, _fingerprint(text), len(ins), len(outs)))
        native.append(t)  # type: ignore[arg-type]
    triples = [(i[0], i[1], bool(i[2]) if len(i) > 2 else False) for i in inputs]  # type: ignore[misc]
    text, report_json = _native.stitch(triples, native, list(outputs), inline)
    find_kernels(text, kernels)
    find_kernels(_native.format_module(text), kernels)
    return StitchedProgram(text=text, report=json.loads(report_json), kernels=tuple(kernels),
                           segments=tuple(receipt_segs), input_types=tuple(i[1] for i in triples))
