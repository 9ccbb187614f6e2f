"""The ``torch.compile`` backend ``"hlobridge"``:
``torch.compile(model, backend="hlobridge")`` finds :func:`backend` through the
``torch_dynamo_backends`` entry point. The implementation is in
``hlobridge/_src/dynamo/`` (see ``docs/compile_backend.md``)."""

from __future__ import annotations

from hlobridge._src.dynamo.backend import backend, register
from hlobridge._src.dynamo.program import (
    CompiledGraph,
    StitchedSegment,
    compiled_graphs,
    graphs_compiled,
)
from hlobridge._src.errors import (
    CollectiveNotSupportedError,
    CompileBackendError,
    DataDependentError,
    DistributedNotSupportedError,
    InputMutationError,
    UnsupportedOpError,
)

__all__ = [
    "CollectiveNotSupportedError",
    "CompileBackendError",
    "CompiledGraph",
    "DataDependentError",
    "DistributedNotSupportedError",
    "InputMutationError",
    "StitchedSegment",
    "UnsupportedOpError",
    "backend",
    "compiled_graphs",
    "graphs_compiled",
    "register",
]
