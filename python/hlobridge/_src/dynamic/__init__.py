"""Dynamic shapes: one capture serves every shape (``docs/dynamic_shapes.md``).

``torch.compile(model, backend="hlobridge", dynamic=True)`` (or a dimension
Dynamo marked dynamic) hands the backend a graph with symbolic sizes. The
backend builds a :class:`~hlobridge._src.dynamic.graph.DynamicGraph`:

- :mod:`.lower`: the graph, torch ops and ``call_jax`` nodes alike, lowered
  ONCE by ``jax.export`` into one StableHLO module with ``?`` dimensions and
  the shape assertions Dynamo's value ranges imply (aten ops through the JAX
  op table of :mod:`.ops`, sizes through :mod:`.symbols`);
- :mod:`.refine`: per new input shape, that module specialised to the
  concrete shapes (native Rust pass when present, jaxlib's otherwise), then
  compiled through the compile cache;
- :mod:`.fake`: ``call_jax``'s symbolic output sizes while Dynamo traces;
- :mod:`.guard`: AOTAutograd's trace of a symbolic graph with the cyclic
  garbage collector paused;
- :mod:`.step`: ``compile_train_step(..., dynamic=...)``, the whole training
  step traced once with symbolic batch sizes onto one ``DynamicGraph``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DynamicGraph", "DynamicModule", "counters", "dynamic_graphs", "graph_is_symbolic",
           "lower_counters", "route", "tracing_guard"]

# Exported lazily: hlobridge._src.custom_op imports .fake while Dynamo
# traces, and .lower imports custom_op (no import cycle through this
# package). ``refine`` is the submodule: ``refine.refine(text, shapes)``.
_WHERE = {"DynamicGraph": ("graph", "DynamicGraph"), "counters": ("graph", "counters"),
          "dynamic_graphs": ("graph", "dynamic_graphs"),
          "DynamicModule": ("lower", "DynamicModule"),
          "graph_is_symbolic": ("lower", "graph_is_symbolic"),
          "lower_counters": ("lower", "counters"), "route": ("refine", "route"),
          "tracing_guard": ("guard", "tracing_guard")}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{where[0]}"), where[1])
