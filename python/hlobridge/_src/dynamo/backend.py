"""The ``torch.compile`` backend ``"hlobridge"`` (public as ``hlobridge.dynamo.backend``).

``torch.compile(model, backend="hlobridge")`` (registered through the
``torch_dynamo_backends`` entry point, no import needed) runs AOTAutograd on
each graph Dynamo captures; the forward and the backward graph each become
ONE StableHLO program: torch pieces lowered by an engine (torch_xla lazy
tracing), :func:`hlobridge.call_jax` nodes lowered with ``jax.jit``, stitched
by the Rust core, compiled once per input signature and run through the
PJRT plugin. See ``docs/compile_backend.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src import custom_op  # noqa: F401  (registers hlobridge::call_jax)
from hlobridge._src.dynamo.raise_through import passes_through_dynamo

__all__ = ["backend", "register"]

_counter = {"graph": 0}


def _compiler(kind: str, inputs: tuple[list[str], Any] = ([], None)
              ) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        # One CompiledGraph, or programs with torch.distributed functional
        # collectives run between them (hlobridge._src.collective_split).
        from hlobridge._src.collective_split import compile_graph as compile_split
        from hlobridge._src.dynamo.program import name_inputs

        n = _counter["graph"]
        _counter["graph"] += 1
        from hlobridge._src.dynamic import DynamicGraph, graph_is_symbolic

        if graph_is_symbolic(gm):  # dynamic=True: one module, refined per shape
            return DynamicGraph(gm, f"{kind} #{n}", inputs[0])
        graph = compile_split(gm, f"{kind} #{n}")
        name_inputs(graph, *inputs)  # input names and origin, for hb.viz
        return graph

    compile_graph.__name__ = f"hlobridge_{kind}_compiler"
    return compile_graph


@passes_through_dynamo  # an hlobridge error reaches the user by its own class
def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
    """The Dynamo backend: AOTAutograd with hlobridge forward, backward and
    inference compilers."""
    from torch._dynamo.backends.common import aot_autograd

    from hlobridge._src.dynamo.engine import decompositions as backend_decompositions

    from hlobridge._src.distributed_guard import check_backend_collectives

    # Functional collectives run between programs; those that cannot, or
    # that would need a backward, are refused before AOTAutograd traces them
    # (docs/distributed.md).
    check_backend_collectives(gm)

    # Core aten (the op set torch_xla lowers best) + training batch norm.
    decompositions = backend_decompositions()
    from hlobridge._src.dynamo.program import dynamo_input_names

    inputs = dynamo_input_names(gm)
    aot = aot_autograd(fw_compiler=_compiler("forward", inputs),
                       bw_compiler=_compiler("backward", inputs),
                       inference_compiler=_compiler("inference", inputs),
                       decompositions=decompositions)
    # Attention traced through its math formulation, which AOTAutograd
    # differentiates into plain ops (torch_xla lowers neither the fused CPU
    # flash-attention kernel nor its backward).
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from hlobridge._src.dynamic import tracing_guard

    with sdpa_kernel([SDPBackend.MATH]), tracing_guard(gm):
        return aot(gm, example_inputs, **kwargs)


def register() -> None:
    """Register the backend under the name ``"hlobridge"`` by hand (only
    needed where the package metadata lacks the entry point, e.g. an older
    editable install); does nothing if the name is known already."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "hlobridge" not in _COMPILER_FNS:
        register_backend(backend, name="hlobridge")
