"""AOTAutograd's trace of a graph with symbolic sizes, with Python's cyclic
garbage collector paused.

While AOTAutograd traces a graph with symbolic sizes and ``call_jax`` nodes
(forward, and the joint forward-backward of training), Python's cyclic
collector can clear the Python object of a live fake or functional tensor
(``tp_clear`` empties its ``__dict__``; torch then resurrects the object
for the C++ tensor that still lives): the trace fails with
``'FakeTensor' object has no attribute 'fake_mode'`` or ``'FunctionalTensor'
object has no attribute 'elem'``, depending on when a collection runs.
Pausing the collector for the trace avoids it; graphs
with static shapes are traced as before.

The frame Dynamo compiles for such a graph also gets Python shape guards
(``torch._dynamo.config.enable_cpp_symbolic_shape_guards`` off until that
compile ends, then restored): the C++ form costs a C++ compile plus
inductor's vector-ISA probe (three ``python -c "import torch"``
subprocesses), many seconds of a first call, to save microseconds per call
in a guard check next to a program that runs for milliseconds.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import torch

from hlobridge._src.dynamic.lower import graph_is_symbolic

__all__ = ["tracing_guard"]


@contextlib.contextmanager
def tracing_guard(gm: torch.fx.GraphModule) -> Iterator[None]:
    """Pause the cyclic collector while tracing ``gm`` if it has symbolic
    sizes, and give the frame Python shape guards (see the module docs)."""
    if not graph_is_symbolic(gm):
        yield
        return
    _python_shape_guards()
    with paused_gc():
        yield


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic collector paused while something is traced
    symbolically (see the module docs: it can clear a live fake tensor's
    ``__dict__`` mid-trace)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_saved: dict[str, bool] = {}


def _restore_shape_guards(_args: object) -> None:
    if "cpp" in _saved:
        torch._dynamo.config.enable_cpp_symbolic_shape_guards = _saved.pop("cpp")


def _python_shape_guards() -> None:
    """Python shape guards for the frame Dynamo is compiling (see the module
    docs); Dynamo's end-of-compile callback restores the setting."""
    from torch._dynamo import callback_handler
    from torch._guards import CompileContext

    if CompileContext.try_get() is None or "cpp" in _saved:
        return  # not inside a Dynamo compile, or set for it already
    if _restore_shape_guards not in callback_handler.end_callbacks:  # torch._dynamo.reset() clears
        callback_handler.register_end_callback(_restore_shape_guards)
    _saved["cpp"] = torch._dynamo.config.enable_cpp_symbolic_shape_guards
    torch._dynamo.config.enable_cpp_symbolic_shape_guards = False
