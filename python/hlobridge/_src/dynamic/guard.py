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
    sizes (see the module docs)."""
    if not graph_is_symbolic(gm) or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
