"""What the static and the dynamic export captures share
(:mod:`hlobridge._src.export`, :mod:`hlobridge._src.export_dynamic`): the
captured module, the manifest entry of a tensor, the recording
``"hlobridge"`` backend, and one run of a compiled module on given tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hlobridge import _native
from hlobridge._src.errors import ExportError


@dataclass
class Captured:
    """A captured module ready to export, with its run on the example inputs."""

    text: str
    params: list[dict[str, Any]]
    weights: list[tuple[str, torch.Tensor]]
    outputs: list[dict[str, Any]]
    results: list[torch.Tensor]
    """The program's outputs on the example inputs (for the caller's checks)."""
    exe: Any
    """The compiled program."""
    args: list[torch.Tensor]
    """Its arguments on the example inputs, in program order (``params``)."""


def mlir_dtype(dt: torch.dtype) -> str:
    """``dt``'s MLIR element type; :class:`ExportError` if it has none."""
    from hlobridge._src.dtypes import DTYPES

    entry = DTYPES.get(dt)
    if entry is None:
        raise ExportError(f"dtype {dt} is not supported")
    return entry[0]


def tensor_spec(name: str, t: torch.Tensor, weight: bool | None = None,
                dims: list[Any] | None = None) -> dict[str, Any]:
    """A manifest entry for ``t``; ``dims`` (dynamic artifacts): each
    dimension's size or symbol."""
    d: dict[str, Any] = {"name": name, "dtype": mlir_dtype(t.dtype), "shape": list(t.shape)}
    if weight is not None:
        d["weight"] = weight
    if dims is not None:
        d["dims"] = dims
    return d


def recording_backend(record: list[tuple[Any, list[Any]]], dynamic: bool = False) -> Callable[..., Any]:
    """The ``"hlobridge"`` backend (same decompositions, attention and
    collective checks) whose inference compiler also records each compiled
    graph and the arguments it is called with. ``dynamic``: the backend's
    dynamic path, one :class:`~hlobridge._src.dynamic.graph.DynamicGraph`
    per graph, refusing a graph whose dims the capture specialised."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        import contextlib

        from torch._dynamo.backends.common import aot_autograd
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from hlobridge._src.distributed_guard import check_fx_collectives
        from hlobridge._src.dynamo.engine import decompositions
        from hlobridge._src.dynamo.program import CompiledGraph, dynamo_input_names

        check_fx_collectives(gm)
        guard: Any = contextlib.nullcontext()
        if dynamic:
            from hlobridge._src.dynamic import DynamicGraph, graph_is_symbolic, tracing_guard

            user = dynamo_input_names(gm)[0]
            guard = tracing_guard(gm)

        def compiler(g: torch.fx.GraphModule, _ex: list[Any]) -> Any:
            if not dynamic:
                cg: Any = CompiledGraph(g, "export")
            elif not graph_is_symbolic(g):
                raise ExportError("the dims named dynamic were specialised by the capture (the "
                                  "model fixes their size); export without dynamic")
            else:
                cg = DynamicGraph(g, "export", user)

            def run(*args: Any) -> Any:
                flat = list(args[0]) if len(args) == 1 and type(args[0]) is list else list(args)
                record.append((cg, flat))
                return cg(flat)

            run._boxed_call = True  # type: ignore[attr-defined]
            return run

        def no_backward(g: torch.fx.GraphModule, _ex: list[Any]) -> Any:
            raise ExportError("export captures inference; call it under torch.no_grad()")

        aot = aot_autograd(fw_compiler=compiler, bw_compiler=no_backward, inference_compiler=compiler,
                           decompositions=decompositions())
        with sdpa_kernel([SDPBackend.MATH]), guard:
            return aot(gm, example_inputs, **kwargs)

    return backend


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` are the same view of the same memory."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype
            and a.stride() == b.stride())


def run_text_once(exe: Any, ins: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """One run of the compiled ``exe`` on ``ins``; the results copied out."""
    from torch.utils.dlpack import from_dlpack

    from hlobridge._src.dtypes import CODES

    ins = [t.contiguous() for t in ins]
    caps, *_ = _native.execute(exe, [t.data_ptr() for t in ins], [tuple(t.shape) for t in ins],
                               [CODES[t.dtype] for t in ins], list(ins))
    return [from_dlpack(c).clone() for c in caps]
