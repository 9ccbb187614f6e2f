"""An Optax ``GradientTransformation`` as the two JAX functions
:class:`hlobridge.optim.JaxOptimizer` runs through :func:`hlobridge.call_jax`.

The transformation is passed to :func:`init` and :func:`update` as an
argument: its leaves are functions, so ``call_jax`` treats it as static
(part of the cache key) while params, grads and the state pytree are arrays.
The state keeps Optax's own structure (named tuples such as
``ScaleByAdamState``, ``EmptyState``, nested tuples of ``optax.chain``, the
``hyperparams`` dict of ``optax.inject_hyperparams``): ``call_jax`` carries
named tuples, tuples, lists and dicts both eagerly and under tracing, and
the train step holds the state as that pytree of torch tensors.

This module imports only JAX (Optax is not imported: ``tx`` is duck-typed).
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["init", "update", "is_gradient_transformation"]


def is_gradient_transformation(tx: Any) -> bool:
    """Whether ``tx`` looks like an Optax ``GradientTransformation``
    (``init`` and ``update`` callables)."""
    return callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))


def init(tx: Any, params: Any) -> Any:
    """``tx.init(params)``."""
    return tx.init(params)


def update(tx: Any, params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
    """One Optax step: ``(params + updates, new_state)`` as
    ``optax.apply_updates`` (updates cast to each parameter's dtype)."""
    updates, new_state = tx.update(grads, state, params)
    new_params = jax.tree_util.tree_map(
        lambda p, u: None if p is None else (p + u).astype(p.dtype), params, updates,
        is_leaf=lambda x: x is None)
    return new_params, new_state
