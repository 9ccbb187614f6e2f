"""Running a stitched program through torch_xla's runtime: the TPU adapter.

On a TPU host, libtpu serves one PJRT client per process, and when torch_xla
is in use that client is torch_xla's. hlobridge therefore does not open its
own client there: it hands the stitched StableHLO module to the runtime that
owns the chip. :class:`TorchXlaProgram` does that with torch_xla 2.9's
``torch_xla._XLAC._run_stablehlo(artifact, tensors)`` (the call behind
``torch_xla.stablehlo.StableHLOGraphModule``), which compiles the module with
torch_xla's PJRT client (caching it by content) and runs it on ``xla``
tensors, pending lazy graphs included; the outputs are ``xla`` tensors that
later torch ops continue lazily.

``_run_stablehlo`` takes a StableHLO *portable artifact* (versioned VHLO
bytecode), not text: the module is serialized with jaxlib's StableHLO
bindings for the older of jaxlib's and torch_xla's StableHLO versions
(torch_xla's is read once from the header of an artifact it writes itself),
so a newer jaxlib never emits ops torch_xla cannot read.

What is tested where: with ``PJRT_DEVICE=CPU`` (this repository's CI),
torch_xla's CPU client runs the adapter end to end
(``tests/python/test_tpu_adapter.py``: a stitched torch + JAX + Pallas
(interpret) program on ``xla:0`` tensors against hlobridge's own runtime and
eager). On a TPU the same call runs on torch_xla's TPU client; what only a
TPU can show (Mosaic ``tpu_custom_call`` kernels executing, HBM limits at
run time, performance) is listed in docs/accelerators.md.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

from hlobridge._src.errors import ArgumentError, CompileError, DtypeError

__all__ = ["TorchXlaProgram", "run_on_torch_xla", "torch_xla_platform", "torch_xla_stablehlo_version"]

_LOCK = threading.Lock()
_VERSION: str | None = None
_TENSOR_TYPE = re.compile(r"^tensor<((?:\d+x)*)([a-z]+\d*)>$")
_MLIR_DTYPES = {
    "f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "i1": "bool",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "ui8": "uint8",
    "ui16": "uint16", "ui32": "uint32", "ui64": "uint64", "complex<f32>": "complex64",
    "complex<f64>": "complex128",
}


def torch_xla_stablehlo_version() -> str:
    """The StableHLO version torch_xla reads and writes (e.g. ``1.13.0``),
    from the header of a portable artifact it serializes itself (once)."""
    global _VERSION
    with _LOCK:
        if _VERSION is None:
            import torch
            import torch_xla

            t = torch.zeros(1, device=torch_xla.device()) + 1
            art = torch_xla._XLAC._get_stablehlo([t], "", [], True)
            m = re.search(rb"StableHLO_v(\d+\.\d+\.\d+)", art[:64])
            if m is None:
                raise CompileError("torch_xla: cannot read the StableHLO version of its artifacts")
            _VERSION = m.group(1).decode()
        return _VERSION


def torch_xla_platform() -> str:
    """The platform of torch_xla's runtime, lower case (``cpu``, ``tpu``,
    ``cuda``)."""
    import torch_xla.runtime as xr

    return str(xr.device_type()).lower()


def _artifact(text: str) -> bytes:
    from jaxlib.mlir.dialects import stablehlo

    target = stablehlo.get_smaller_version(stablehlo.get_current_version(), torch_xla_stablehlo_version())
    try:
        return bytes(stablehlo.serialize_portable_artifact_str(text, target))
    except Exception as e:  # the bindings raise plain ValueError/RuntimeError
        raise CompileError(f"torch_xla adapter: cannot serialize the module as a StableHLO {target} "
                           f"portable artifact (what torch_xla reads): {e}") from e


def _parse_type(t: str) -> tuple[tuple[int, ...], str] | None:
    m = _TENSOR_TYPE.match(t.strip())
    if m is None:
        return None
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    return dims, _MLIR_DTYPES.get(m.group(2), m.group(2))


class TorchXlaProgram:
    """A stitched module that runs on torch_xla's runtime (module docs).

    ``program`` is a :class:`hlobridge._src.stitching.StitchedProgram` or module
    text; with text, ``input_types`` (MLIR types such as ``tensor<2x3xf32>``)
    enables the argument checks."""

    def __init__(self, program: Any, input_types: Sequence[str] | None = None) -> None:
        text = getattr(program, "text", program)
        if not isinstance(text, str):
            raise ArgumentError(f"torch_xla adapter: expected a StitchedProgram or module text, got "
                                f"{type(program).__name__}")
        self.text: str = text
        self.input_types: tuple[str, ...] | None = (
            tuple(input_types) if input_types is not None else getattr(program, "input_types", None))
        self.kernels: tuple[Any, ...] = tuple(getattr(program, "kernels", ()))
        self._artifact: bytes | None = None

    @property
    def artifact(self) -> bytes:
        """The portable artifact handed to torch_xla (built once)."""
        if self._artifact is None:
            self._artifact = _artifact(self.text)
        return self._artifact

    def _check(self, tensors: Sequence[Any]) -> None:
        import torch

        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                raise ArgumentError(f"torch_xla adapter: input {i} is a {type(t).__name__}, not a tensor")
            if t.device.type != "xla":
                raise ArgumentError(f"torch_xla adapter: input {i} is on {t.device}; the program runs "
                                    f"on torch_xla's runtime, so inputs must be xla tensors "
                                    f"(t.to(torch_xla.device()))")
        if self.input_types is None:
            return
        if len(tensors) != len(self.input_types):
            raise ArgumentError(f"torch_xla adapter: the program takes {len(self.input_types)} inputs, "
                                f"got {len(tensors)}")
        for i, (t, ty) in enumerate(zip(tensors, self.input_types)):
            parsed = _parse_type(ty)
            if parsed is None:
                continue
            dims, dtype = parsed
            if tuple(t.shape) != dims:
                raise ArgumentError(f"torch_xla adapter: input {i} has shape {tuple(t.shape)}, the "
                                    f"program expects {ty}")
            if str(t.dtype).removeprefix("torch.") != dtype:
                raise DtypeError(f"torch_xla adapter: input {i} has dtype {t.dtype}, the program "
                                 f"expects {ty}")

    def _check_kernels(self) -> None:
        platform = torch_xla_platform()
        for k in self.kernels:
            if k.backend != "interpret" and k.target != platform:
                from hlobridge._src.pallas import PallasLoweringError

                raise PallasLoweringError(k.name, k.target, f"the program embeds a {k.backend} kernel, "
                                          f"which torch_xla's {platform} runtime cannot run")

    def __call__(self, *tensors: Any) -> list[Any]:
        """Runs the program on ``xla`` tensors (in the module's input order);
        returns its outputs as ``xla`` tensors."""
        import torch_xla

        self._check(tensors)
        self._check_kernels()
        art = self.artifact
        try:
            return list(torch_xla._XLAC._run_stablehlo(art, list(tensors)))
        except RuntimeError as e:
            raise CompileError(f"torch_xla adapter: torch_xla's runtime refused the program: {e}") from e


def run_on_torch_xla(program: Any, *tensors: Any) -> list[Any]:
    """One-shot :class:`TorchXlaProgram` (serializes the module each call;
    keep a :class:`TorchXlaProgram` to reuse the artifact)."""
    return TorchXlaProgram(program)(*tensors)
