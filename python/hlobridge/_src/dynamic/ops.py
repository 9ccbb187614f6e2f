"""The aten op table the dynamic-shape lowering interprets torch graphs with:
the JAX implementation of each aten op that ``torchax`` (shipped inside the
``torch_xla`` wheel) registers.

``torchax``'s package ``__init__`` imports ``flax`` for its checkpoint
helpers, which hlobridge does not use and does not require. When ``flax``
is not installed, :func:`aten_table` imports ``torchax`` with an empty
stand-in for ``flax.training.checkpoints`` and removes the stand-in from
``sys.modules`` right after, so a later ``import flax`` is unaffected.
"""

from __future__ import annotations

import functools
import logging
import importlib.util
import sys
import threading
import types
import warnings
from typing import Any

from hlobridge._src.errors import DynamicShapeError

__all__ = ["aten_table", "lookup_op"]

_lock = threading.Lock()


@functools.cache
def aten_table() -> dict[Any, Any]:
    """``torchax``'s registry: aten op (overload or packet) -> ``Operator``."""
    with _lock:
        stubs: list[str] = []
        if "flax" not in sys.modules and importlib.util.find_spec("flax") is None:
            for name in ("flax", "flax.training", "flax.training.checkpoints"):
                sys.modules[name] = types.ModuleType(name)
                stubs.append(name)
            sys.modules["flax"].training = sys.modules["flax.training"]  # type: ignore[attr-defined]
            sys.modules["flax.training"].checkpoints = (  # type: ignore[attr-defined]
                sys.modules["flax.training.checkpoints"])
        quiet = logging.getLogger()
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # torchax logs a duplicate registration warning
        try:
            with warnings.catch_warnings():  # torchax uses deprecated JAX names
                warnings.simplefilter("ignore")
                import torchax.ops.jaten  # noqa: F401  (registers the aten ops)
                import torchax.ops.jtorch  # noqa: F401
                from torchax.ops import ops_registry
        except ImportError as e:  # pragma: no cover - torch_xla without torchax
            raise DynamicShapeError(
                f"hlobridge dynamic shapes: the aten->JAX op table (torchax, shipped with "
                f"torch_xla) cannot be imported: {e}") from e
        finally:
            quiet.setLevel(level)
            for name in stubs:
                sys.modules.pop(name, None)
            if stubs:
                sys.modules.pop("torchax.checkpoint", None)
        return ops_registry.all_aten_ops  # type: ignore[no-any-return]


def _convert_element_type(x: Any, dtype: Any) -> Any:
    from torchax.ops import mappings

    return x.astype(mappings.t2j_dtype(dtype))


def _convolution_backward(grad: Any, x: Any, w: Any, bias_sizes: Any, stride: Any,
                          padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                          groups: int, output_mask: Any) -> tuple[Any, Any, Any]:
    """``aten.convolution_backward`` (training a convolution): JAX's VJP of
    torchax's ``aten.convolution``; the bias gradient sums over all but the
    channel axis."""
    import jax
    import torch

    conv = lookup_op(torch.ops.aten.convolution.default)

    def f(a: Any, b: Any) -> Any:
        return conv(a, b, None, stride, padding, dilation, transposed, output_padding, groups)

    gx, gw = jax.vjp(f, x, w)[1](grad)
    gb = grad.sum(axis=(0, *range(2, grad.ndim))) if output_mask[2] else None
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb)


def _extras() -> dict[Any, Any]:
    """Ops the graphs hold (from the decompositions, or autograd's
    ``convolution_backward``) that torchax's table lacks."""
    import torch

    return {torch.ops.prims.convert_element_type.default: _convert_element_type,
            torch.ops.aten.convolution_backward.default: _convolution_backward}


def lookup_op(target: Any) -> Any:
    """The JAX implementation of aten op ``target`` (``None`` if none)."""
    table = aten_table()
    extra = _extras().get(target)
    if extra is not None:
        return extra
    op = table.get(target)
    if op is None:
        op = table.get(getattr(target, "overloadpacket", None))
    if op is None or not op.is_jax_function:
        return None
    return op.func
