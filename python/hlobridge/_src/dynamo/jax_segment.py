"""One JAX function as one ``hlobridge::call_jax`` node of a traced graph.

The lowering tables (``jax_lowerings.py``, ``grouped_lowerings.py``) put
JAX functions into AOTAutograd's graph through :func:`jax_segment`: the node
is registered with the machinery of :func:`hlobridge.call_jax`, becomes a
``jax.jit`` segment, and is stitched into the same program as the torch
ops around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["jax_segment"]


def jax_segment(name: str, fn: Callable[..., Any], *tensors: torch.Tensor,
                **static: Any) -> list[torch.Tensor]:
    """``fn(*arrays, **static)`` as one ``hlobridge::call_jax`` node (static
    arguments are part of the registered function's identity; ``name``
    names the segment, ``aten.<name>``)."""
    import torch.utils._pytree as pytree

    from hlobridge._src import custom_op

    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                          for k, v in static.items()))

    def main(*arrays: Any) -> Any:
        return fn(*arrays, **dict(frozen))

    main.__name__ = main.__qualname__ = f"aten.{name}"
    spec = pytree.tree_flatten((tuple(tensors), {}))[1]
    key = custom_op.register(main, spec, tuple(None for _ in tensors),
                             fn_identity=("hlobridge.jax_lowerings", name, frozen))
    out = torch.ops.hlobridge.call_jax(key, list(tensors))
    return list(out)
