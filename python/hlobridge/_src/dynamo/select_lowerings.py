"""``kthvalue`` with eager CPU's index among tied values.

torch documents no order among tied values for ``kthvalue``, but eager CPU's
answer is a fixed function of the input: its kernel copies each slice and
runs Sedgewick's quickselect on it (median-of-three pivot moved to the
front, Hoare partition, the ``k``-th slot's original index taken at the
end; NaN counts as larger than every number and equal to another NaN).
torch_xla's lowering sorts, so on ties it returned another index than eager
(the values agree), and inductor matches eager only by calling the CPU
kernel. Here the same selection runs inside the program:

1. in torch, each slice's values become dense ``int32`` ranks (a stable
   ``sort``, a new rank where a value differs from the one before it,
   ``scatter`` back): the order and the ties of any dtype, NaN last, in a
   type JAX handles without x64;
2. a JAX segment (``hlobridge::call_jax``) runs the quickselect on the
   ranks, one row per slice (``vmap`` of nested while loops: the
   outer loop narrows ``[lo, hi]``, the inner one swaps across the pivot),
   and returns the original index left in slot ``k - 1``;
3. in torch, the value is gathered at that index.

The selection does what eager's does, swap for swap, so values and indices
are eager's on every input, ties and NaN included, for slices up to
:data:`EXACT_MAX_N` long (its cost grows faster than eager's; longer slices
keep torch_xla's lowering, whose index among ties may differ).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src.dynamo.jax_segment import jax_segment

__all__ = ["select_lowerings"]

_aten = torch.ops.aten


def _dense_ranks(rows: torch.Tensor) -> torch.Tensor:
    """``int32`` ranks of each row's values (0 for the smallest; equal
    values equal ranks; NaN above every number, all NaN equal)."""
    ordered, order = torch.sort(rows, stable=True, dim=-1)
    differs = ordered[:, 1:] != ordered[:, :-1]
    if rows.is_floating_point():
        differs = differs & ~(torch.isnan(ordered[:, 1:]) & torch.isnan(ordered[:, :-1]))
    new_rank = torch.cat([differs.new_zeros((differs.shape[0], 1)), differs], -1)
    sorted_ranks = torch.cumsum(new_rank.to(torch.int32), -1, dtype=torch.int32)
    return torch.scatter(torch.zeros_like(sorted_ranks), -1, order, sorted_ranks)


EXACT_MAX_N = 1024
"""The longest slice selected as eager does. The selection's loop state is
copied at each exchange (nested while loops), so its cost grows with
the square of the slice length (a 2-core Xeon, the selection alone: 1.1 ms
for 64 slices of 100, 62 ms for 64 of 1000, 8.8 s for 64 of 10000; eager
0.5, 1.1, 32 ms). Longer slices keep torch_xla's sort-based lowering: the
same values, and among tied values the first index in sorted order, which
may differ from eager's."""


def _quickselect(ranks: Any, *, k0: int) -> Any:
    """For each row of ``ranks`` (``[rows, n]`` int32), the original column
    that eager's quickselect leaves in slot ``k0``."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    n = ranks.shape[-1]

    def one_row(values: Any) -> Any:
        slots = jnp.arange(n, dtype=jnp.int32)

        def swap_if(v: Any, ix: Any, a: Any, b: Any, do: Any) -> tuple[Any, Any]:
            va, vb, ia, ib = v[a], v[b], ix[a], ix[b]
            v = v.at[a].set(jnp.where(do, vb, va)).at[b].set(jnp.where(do, va, vb))
            ix = ix.at[a].set(jnp.where(do, ib, ia)).at[b].set(jnp.where(do, ia, ib))
            return v, ix

        def narrow(state: Any) -> Any:
            """One pass of the outer loop on ``[lo, hi]`` (at least 3 long):
            median of three to slot ``lo``, Hoare's exchanges, the pivot to
            where the scans crossed, the side holding slot ``k0`` kept."""
            v, ix, lo, hi, _ = state
            v, ix = swap_if(v, ix, (lo + hi) >> 1, lo + 1, True)
            v, ix = swap_if(v, ix, lo + 1, hi, v[lo + 1] > v[hi])
            v, ix = swap_if(v, ix, lo, hi, v[lo] > v[hi])
            v, ix = swap_if(v, ix, lo + 1, lo, v[lo + 1] > v[lo])
            pivot = v[lo]

            def exchange(s: Any) -> Any:
                v, ix, i, j, _ = s
                i = lax.while_loop(lambda i: (i < hi) & (pivot > v[i]), lambda i: i + 1, i + 1)
                j = lax.while_loop(lambda j: (j > lo) & (v[j] > pivot), lambda j: j - 1, j - 1)
                crossed = j < i
                v, ix = swap_if(v, ix, i, j, ~crossed)
                return v, ix, i, j, crossed

            v, ix, i, j, _ = lax.while_loop(lambda s: ~s[4], exchange,
                                            (v, ix, lo + 1, hi, jnp.bool_(False)))
            v, ix = swap_if(v, ix, lo, j, True)
            lo2 = jnp.where(j <= k0, i, lo)
            hi2 = jnp.where(j >= k0, j - 1, hi)
            return v, ix, lo2, hi2, jnp.bool_(False)

        def finish(state: Any) -> Any:
            """One or two elements left: order the two, stop."""
            v, ix, lo, hi, _ = state
            v, ix = swap_if(v, ix, lo, hi, (hi == lo + 1) & (v[lo] > v[hi]))
            return v, ix, lo, hi, jnp.bool_(True)

        def step(state: Any) -> Any:
            lo, hi = state[2], state[3]
            return lax.cond(hi - lo >= 2, narrow, finish, state)

        start = (values, slots, jnp.int32(0), jnp.int32(n - 1), jnp.bool_(False))
        return lax.while_loop(lambda s: ~s[4], step, start)[1][k0]

    return jax.vmap(one_row)(ranks)


def _kthvalue(x: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    """``aten.kthvalue`` (module docs); 0-d, empty and complex inputs
    decline (torch_xla's lowering or its named error)."""
    if x.dim() == 0 or x.numel() == 0 or x.is_complex() or x.dtype == torch.bool:
        return NotImplemented
    d = dim % x.dim()
    n = x.shape[d]
    if not 1 <= k <= n or n > EXACT_MAX_N:
        return NotImplemented  # k out of range: eager's error; long: torch_xla's lowering
    moved = x.movedim(d, -1)
    rows = moved.reshape(-1, n)
    ranks = _dense_ranks(rows)
    picked = jax_segment("kthvalue", _quickselect, ranks, k0=k - 1)[0]
    index = picked.to(torch.int64).unsqueeze(-1)
    value = torch.gather(rows, -1, index)
    out_shape = moved.shape[:-1]
    value, index = value.reshape(out_shape), index.reshape(out_shape)
    if keepdim:
        value, index = value.unsqueeze(d), index.unsqueeze(d)
    return value, index


def select_lowerings() -> dict[Any, Callable[..., Any]]:
    """The entries for the backend's decomposition table."""
    return {_aten.kthvalue.default: _kthvalue}
