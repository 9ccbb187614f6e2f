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
        from hlobridge._src.dynamo.program import CompiledGraph

        if kind == "inference" and isinstance(graph, CompiledGraph):
            graph.alias_mutated_inputs(_mutated_inputs(gm))  # updated in place
        return graph

    compile_graph.__name__ = f"hlobridge_{kind}_compiler"
    return compile_graph


def _mutated_inputs(gm: torch.fx.GraphModule) -> list[tuple[int, int]]:
    """``(output, input)`` for each graph input that AOTAutograd's inference
    graph ``gm`` returns the new data of (first outputs, in
    ``mutated_inp_runtime_indices`` order) and copies back with ``copy_``
    after the call; empty where AOTAutograd's metadata is missing or does
    not match the graph (subclasses, metadata or storage mutations)."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is None or any(type(x).__name__ == "SubclassCreationMeta"  # a tensor subclass
                           for x in getattr(meta, "subclass_inp_meta", None) or ()):
        return []
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    outs = nodes[-1].args[0] if nodes and nodes[-1].op == "output" else None
    indices = list(meta.mutated_inp_runtime_indices)
    if (not isinstance(outs, (list, tuple)) or len(placeholders) != len(meta.input_info)
            or len(outs) != len(indices) + meta.num_outputs + meta.num_intermediate_bases):
        return []
    pairs = []
    for k, i in enumerate(indices):
        info = meta.input_info[i]
        if info.mutates_data and not info.mutates_metadata and not info.mutates_storage_metadata:
            pairs.append((k, i))
    return pairs


def _refuse_sparse(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    """A named error for a graph that takes or makes a sparse tensor (COO,
    CSR, ...): programs hold dense arrays only. Before AOTAutograd, whose
    tracing of sparse tensors fails with a bare ``NotImplementedError`` (no
    sparse ``as_strided``) where gradients are on."""
    from hlobridge._src.errors import UnsupportedOpError

    def sparse(v: Any) -> bool:
        return isinstance(v, torch.Tensor) and v.layout != torch.strided

    for i, x in enumerate(example_inputs):
        if sparse(x):
            raise UnsupportedOpError(f"hlobridge backend: graph input {i} is a sparse tensor "
                                     f"({x.layout}); only dense (strided) tensors are supported")
    for node in gm.graph.nodes:
        val = node.meta.get("example_value")
        vals = val if isinstance(val, (list, tuple)) else [val]
        first = next((v for v in vals if sparse(v)), None)
        if first is not None:
            layout = first.layout
            what = getattr(node.target, "__name__", node.target)
            raise UnsupportedOpError(f"hlobridge backend: {what} ({node.op}) makes a sparse "
                                     f"tensor ({layout}); only dense (strided) tensors are "
                                     f"supported")


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
    _refuse_sparse(gm, example_inputs)

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
