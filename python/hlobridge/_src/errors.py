"""Every hlobridge exception class, in one importable module.

The Rust extension raises these same classes (``python/src/errors.rs``
imports this module once and looks each class up by name), so an error
raised in a worker process pickles by its import path,
``hlobridge.errors.<Name>``, and reaches the parent as that class with its
message and attributes (multiprocessing, DataLoader workers).

```text
BridgeError
├── ParseError            malformed StableHLO/MLIR text (file:line:col)
├── InvalidIrError        structurally invalid IR
├── StitchError           stitch plans: bad plan, seam mismatch, cycle, conflict, alias
│   └── CollectiveRewriteError  a collective hlobridge.spmd cannot rewrite
├── FileError             (also an OSError) reading/writing a file
├── PluginError           finding or loading a PJRT plugin
│   ├── PluginNotFoundError
│   └── PluginLoadError
├── PjrtError             a PJRT C API call failed (.function, .code)
│   └── CompileError      PJRT_Client_Compile failed
├── TargetError           hb.compile_for: compiling for a target
│   ├── UnknownTargetError            the target string names no target
│   ├── AcceleratorNotInstalledError  libtpu / the CUDA plugin / ptxas missing
│   └── OutOfMemoryError              the program does not fit the device
├── ArgumentError         bad inputs: count, shape, device, size, layout
│   ├── DtypeError        unsupported or mismatched element type
│   ├── CapturedTensorError  call_jax: the JAX function closes over a torch tensor
│   ├── UnsupportedOptimizerError  compile_train_step: an optimizer with no captured update
│   ├── SpmdArgumentError a tensor does not fit an SPMD program's input
│   └── NotCompiledError  hb.viz: a torch.compile'd model/function not called yet
├── OutputError           a function's result holds a leaf that is not an array
├── BufferDeletedError    a buffer used after it was deleted or donated
├── ForkError             the PJRT client was inherited through fork()
├── CompileBackendError   the torch.compile backend cannot compile a graph
│   ├── UnsupportedOpError            an aten op has no (faithful) lowering
│   │   └── CollectiveNotSupportedError  a collective in a one-device graph
│   ├── DataDependentError            a shape/value depends on tensor data
│   ├── InputMutationError            the graph mutates an input in place
│   ├── DistributedNotSupportedError  DDP/FSDP/DTensor setups hlobridge would run wrong
│   └── DynamicShapeError             a graph with symbolic sizes the dynamic route cannot capture
├── ShapeAssertionError   a call's shapes violate a dynamic program's shape assertion (.dim)
├── ShapeRefinementError  a dynamic module cannot be specialised to a call's shapes
├── CallTorchError        hb.call_torch / hb.torch_module cannot capture or embed a torch function
├── PallasLoweringError   a Pallas kernel cannot be lowered (.kernel, .target, .reason)
├── DistributedInitError  hlobridge.distributed cannot start JAX's runtime
├── JaxVersionError       the installed JAX lacks what hlobridge.spmd relies on
├── ExportError           hb.export cannot export, or an artifact is malformed or refused
│   ├── ArtifactHashError     an artifact's files do not match its content hash
│   └── ArtifactVersionError  an incompatible format, hlobridge or producer version
└── ServeError            a call to a `hlobridge serve` server failed (.code)
```

Pickling: :meth:`BridgeError.__reduce__` rebuilds an instance without
calling ``__init__`` (so classes whose constructor takes other arguments
than the message, such as :class:`PallasLoweringError`, round-trip) and
restores its attributes (``PjrtError.function``/``.code``, notes).

This module imports nothing from hlobridge: the native module imports it
while it initializes.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AcceleratorNotInstalledError",
    "ArgumentError",
    "ArtifactHashError",
    "ArtifactVersionError",
    "BridgeError",
    "BufferDeletedError",
    "CallTorchError",
    "CapturedTensorError",
    "CollectiveNotSupportedError",
    "CollectiveRewriteError",
    "CompileBackendError",
    "CompileError",
    "DataDependentError",
    "DistributedInitError",
    "DistributedNotSupportedError",
    "DtypeError",
    "DynamicShapeError",
    "ExportError",
    "FileError",
    "ForkError",
    "InputMutationError",
    "InvalidIrError",
    "JaxVersionError",
    "NotCompiledError",
    "OutOfMemoryError",
    "OutputError",
    "PallasLoweringError",
    "ParseError",
    "PjrtError",
    "PluginError",
    "PluginLoadError",
    "PluginNotFoundError",
    "ServeError",
    "ShapeAssertionError",
    "ShapeRefinementError",
    "SpmdArgumentError",
    "StitchError",
    "TargetError",
    "UnknownTargetError",
    "UnsupportedOpError",
    "UnsupportedOptimizerError",
]

_PUBLIC_MODULE = "hlobridge.errors"


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """Unpickles a :class:`BridgeError`: ``BaseException.__new__`` sets
    ``args`` without running the subclass's ``__init__``."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class BridgeError(Exception):
    """Base class of every hlobridge error."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:
            # Pickle and repr name the public path (hlobridge.errors.X).
            cls.__module__ = _PUBLIC_MODULE

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


BridgeError.__module__ = _PUBLIC_MODULE


class ParseError(BridgeError):
    """Malformed StableHLO/MLIR text; the message names file:line:col."""


class InvalidIrError(BridgeError):
    """Structurally invalid IR for the requested operation."""


class StitchError(BridgeError):
    """A stitch plan is invalid: unknown handle, seam type mismatch, cycle, conflict or
    an input-output alias that does not fit."""


class CollectiveRewriteError(StitchError):
    """A collective in a segment cannot be rewritten for the devices the
    program runs on (``hlobridge.spmd``)."""


class FileError(BridgeError, OSError):
    """Reading or writing a file failed (also an OSError)."""


class PluginError(BridgeError):
    """Finding or loading a PJRT plugin failed."""


class PluginNotFoundError(PluginError):
    """No PJRT plugin was found (set HLOBRIDGE_PLUGIN=/path/to/plugin.so)."""


class PluginLoadError(PluginError):
    """A PJRT plugin exists but cannot be loaded or has an incompatible API."""


class PjrtError(BridgeError):
    """A PJRT C API call failed; ``function`` and ``code`` name the call and its status."""

    function: str
    """The PJRT C API function that failed (set by the native module)."""
    code: str
    """Its status code name (``InvalidArgument``, ``Unimplemented``...)."""


class CompileError(PjrtError):
    """Compiling a program with PJRT failed."""


class TargetError(BridgeError):
    """Compiling for a target (``hb.compile_for``, ``hlobridge compile
    --target``) failed before or around the compiler: an unknown target, a
    missing accelerator compiler, or a program that does not fit the device."""


class UnknownTargetError(TargetError):
    """The target string names no known target; the message lists the known ones."""


class AcceleratorNotInstalledError(TargetError):
    """The target's compiler (libtpu, the CUDA PJRT plugin, ptxas/libdevice)
    is not installed; the message says where it was looked for
    (``scripts/setup.sh`` installs them into .venv/accel)."""


class OutOfMemoryError(TargetError):
    """The program does not fit the target device's memory (HBM, VMEM, shared
    memory); the message carries the compiler's numbers."""


class ArgumentError(BridgeError):
    """Invalid arguments: count, shape, device, size or memory layout."""


class DtypeError(ArgumentError):
    """An unsupported or mismatched element type."""


class CapturedTensorError(ArgumentError):
    """A function given to :func:`hlobridge.call_jax` closes over a
    ``torch.Tensor``, which JAX cannot use inside its program; the message
    says to pass the tensor as an argument instead."""


class UnsupportedOptimizerError(ArgumentError):
    """:func:`hlobridge.compile_train_step` got an optimizer whose update it
    cannot capture (a custom ``torch.optim.Optimizer`` subclass, a
    ``differentiable=True`` one); the message lists the supported ones."""


class SpmdArgumentError(ArgumentError):
    """A tensor given to an SPMD program does not fit its input: wrong count,
    shape or dtype for this process's part of the global array."""


class NotCompiledError(ArgumentError):
    """:func:`hlobridge.viz` was given a ``torch.compile``'d model or
    function (or a train step) that has no compiled program yet: call it
    once first (compilation happens on the first call)."""


class OutputError(BridgeError):
    """A function's result cannot be handed back to torch: it holds a leaf
    that is not an array (a string, an arbitrary object)."""


class BufferDeletedError(BridgeError):
    """A buffer was used after it was deleted or donated."""


class ForkError(BridgeError):
    """The process was forked after hlobridge created its PJRT client, and the
    inherited client (or a program compiled on it) cannot be used here; start
    workers with the 'spawn' or 'forkserver' method."""


class CompileBackendError(BridgeError):
    """The hlobridge ``torch.compile`` backend cannot compile this graph."""


class UnsupportedOpError(CompileBackendError):
    """An aten op in the graph has no lowering (or no faithful one: random
    ops). The message names the op(s)."""


class DataDependentError(CompileBackendError):
    """The graph has a shape or value that depends on tensor data
    (``nonzero``, ``.item()``, boolean masking, ...)."""


class InputMutationError(CompileBackendError):
    """The graph mutates one of its inputs in place, which a StableHLO program
    (pure: new outputs only) cannot express."""


class DistributedNotSupportedError(CompileBackendError):
    """A ``torch.distributed`` setup hlobridge would run silently wrong:
    :func:`hlobridge.compile_train_step` on a model wrapped in
    ``DistributedDataParallel`` (process group of more than one rank) or FSDP,
    or with DTensor parameters. The message says what to do instead
    (``docs/distributed.md``)."""


class CollectiveNotSupportedError(UnsupportedOpError):
    """A collective (``_c10d_functional.all_reduce``, ``wait_tensor``, ...,
    or its lowering ``stablehlo.all_reduce``/``all_gather``/...) in a graph
    hlobridge would compile for one device, where it does nothing. The
    message names the op(s) and says what to do instead."""


class CallTorchError(BridgeError):
    """:func:`hlobridge.call_torch` or :func:`hlobridge.torch_module` cannot
    capture the torch function for these inputs, or cannot embed it in the
    JAX program (the message says which and why)."""


class DynamicShapeError(CompileBackendError):
    """A graph with symbolic (dynamic) sizes that hlobridge's dynamic-shape
    route cannot capture as one shape-polymorphic module (an aten op with no
    JAX lowering, a size JAX cannot express symbolically, a symbolic size no
    input tensor carries); the message names the op or size and says to
    compile with ``dynamic=False`` instead (``docs/dynamic_shapes.md``)."""


class ShapeAssertionError(ArgumentError):
    """A call's input shapes violate a shape assertion of a dynamic program
    (a constraint Dynamo's guards or the program's shape arithmetic imply);
    ``dim`` names the dimension (``"x.shape[1]"`` or the symbol) where known,
    and the message states the constraint."""

    dim: str | None = None


class ShapeRefinementError(BridgeError):
    """A shape-polymorphic module cannot be specialised (refined) to a
    call's concrete input shapes."""


class PallasLoweringError(BridgeError):
    """A Pallas kernel cannot be lowered for the requested target (or a
    lowered kernel is missing from a program). ``kernel``, ``target`` and
    ``reason`` say which, where and why."""

    def __init__(self, kernel: str, target: str, reason: str) -> None:
        super().__init__(f"Pallas kernel {kernel!r} cannot be lowered for target {target!r}: {reason}")
        self.kernel = kernel
        self.target = target
        self.reason = reason


class DistributedInitError(BridgeError):
    """``hlobridge.distributed.initialize`` cannot start JAX's distributed
    runtime: torchrun's environment is missing or malformed, the port is out
    of range, JAX's backend is already running, or the coordinator timed out."""


class JaxVersionError(BridgeError):
    """The installed JAX does not have the private pieces hlobridge.spmd
    relies on (``jax.export.Exported``'s fields, the portable-artifact
    serializer)."""


class ExportError(BridgeError):
    """A program cannot be exported (``hb.export``), or an artifact is
    malformed or refused when loaded."""


class ArtifactHashError(ExportError):
    """An artifact's files do not match its manifest's content hash."""


class ArtifactVersionError(ExportError):
    """An artifact was written by an incompatible format, hlobridge or producer version."""


class ServeError(BridgeError):
    """A call to a ``hlobridge serve`` server failed; ``code`` is the gRPC
    status name (``INVALID_ARGUMENT``, ``RESOURCE_EXHAUSTED``...)."""

    code: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
