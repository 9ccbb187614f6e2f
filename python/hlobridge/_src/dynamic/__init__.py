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
  garbage collector paused.
"""

from __future__ import annotations

from hlobridge._src.dynamic.guard import tracing_guard
from hlobridge._src.dynamic.graph import DynamicGraph, counters, dynamic_graphs
from hlobridge._src.dynamic.lower import DynamicModule, graph_is_symbolic
from hlobridge._src.dynamic.lower import counters as lower_counters
from hlobridge._src.dynamic.refine import refine, route

__all__ = ["DynamicGraph", "DynamicModule", "counters", "dynamic_graphs", "graph_is_symbolic",
           "lower_counters", "refine", "route", "tracing_guard"]
