"""The per-function cache of compiled signatures (entries) that ``call_jax``
and its autograd and lazy paths look programs up in, and the Python side of
the native fast path that mirrors it.

- :func:`table` gives the dict of one function (its *owner*: the function,
  or the instance of a bound method) that maps a signature key to an
  :class:`Entry` (or, for keys with a gradient mask, an autograd plan). The
  table lives as long as its owner: a weakref callback drops it, and the
  owner's native fast-path entries, before the owner's ``id`` can be reused.
- :func:`fast_call` is the native fast path (``_native.fast_call``): it serves
  calls with plain CPU tensors from its own table, filled by
  ``_native.fast_register``, and returns :data:`MISS` when it cannot.
- After ``fork()`` the child starts with no entries: the inherited ones hold
  executables of the parent's PJRT client, which the child must never use
  or free (they are kept alive, never freed).

This module is a leaf: it imports only torch, JAX, the native module and
:mod:`hlobridge._src.receipt`.
"""

from __future__ import annotations

import os
import types
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from jax._src import config as jax_config

from hlobridge import _native
from hlobridge._src.receipt import CacheOutcome, Segment

__all__ = ["Entry", "MISS", "clear", "fast_call", "fn_tables", "table"]


@dataclass(frozen=True, slots=True)
class Entry:
    """A compiled signature of one function."""

    exe: _native.Executable
    shapes: list[tuple[int, ...]]
    codes: list[int]
    out_tree: Any
    segments: tuple[Segment, ...]
    platform: str
    outcome: CacheOutcome
    lower_s: float
    """Seconds spent lowering (for torch_xla calls: capturing and stitching)."""
    compile_s: float
    num_pending: int = 0
    """torch_xla calls: how many leading outputs are pending inputs' values."""


fn_tables: dict[int, tuple[Any, dict[Any, Any]]] = {}
"""id(owner) -> (weakref to owner, or owner itself if it cannot be weakly
referenced, {key: Entry, or an autograd plan for keys with a grad mask})."""


def table(owner: Any) -> dict[Any, Any]:
    """The signature table of ``owner`` (created empty on first use)."""
    rec = fn_tables.get(id(owner))
    if rec is not None:
        return rec[1]
    oid = id(owner)
    ref: Any

    def forget(_ref: object) -> None:
        fn_tables.pop(oid, None)
        _native.fast_forget(oid)

    try:
        ref = weakref.ref(owner, forget)
    except TypeError:
        ref = owner  # keep it alive so that its id stays unique
    entries: dict[Any, Any] = {}
    fn_tables[oid] = (ref, entries)
    return entries


def clear() -> None:
    """Forget every function's entries, in Python and in the fast path."""
    fn_tables.clear()
    _native.fast_clear()


# Compiled signatures inherited through fork(): their executables belong to
# the parent's PJRT client, which a child must never use or destroy (see
# hlobridge._native's runtime docs). Kept alive here, never freed.
_inherited_tables: list[dict[int, tuple[Any, dict[Any, Any]]]] = []


def _forget_programs_after_fork() -> None:
    """``os.register_at_fork(after_in_child=...)``: start the child with no
    compiled signatures, so that its calls compile on its own client."""
    _inherited_tables.append(dict(fn_tables))
    fn_tables.clear()


os.register_at_fork(after_in_child=_forget_programs_after_fork)

MISS = object()
"""What :func:`fast_call` returns when the fast path cannot serve a call."""
fast_call = _native.fast_call
_native.fast_init(torch.Tensor, torch.nn.Parameter, types.MethodType, torch.is_grad_enabled,
                  torch._C._from_dlpack, jax_config.enable_x64, MISS)
