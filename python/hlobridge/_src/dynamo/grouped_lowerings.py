"""Lowerings for the ops of mixture-of-experts layers: ``histc`` and the
grouped matrix products (``aten._grouped_mm`` and the
``transformers::grouped_mm_fallback`` custom ops), so that MoE models
(Mixtral, Qwen2-MoE, ... through transformers' default ``grouped_mm``
experts path) compile forward and backward into ONE hlobridge program
instead of ending in ``UnsupportedOpError`` ("torch_xla has no lowering for
aten::histc").

transformers' experts forward sorts the (token, expert) pairs by expert,
counts the pairs per expert with ``torch.histc`` (float input, ``min=0``,
``max=E-1``), takes the cumulative counts as ``offs`` and multiplies with a
grouped matrix product: ``torch._grouped_mm`` where it may (bfloat16 under
``torch.compile``: torch's meta function accepts nothing else), else its
own custom op ``transformers::grouped_mm_fallback`` (float32 and float64
under ``torch.compile``), whose backward is the custom op
``transformers::grouped_mm_fallback_backward``. All of them are entries of
the backend's decomposition table (:func:`grouped_lowerings`, merged by
``jax_lowerings.jax_lowerings``), applied by AOTAutograd below autograd:
gradients are torch's own formulas (``_grouped_mm``'s backward is two more
``_grouped_mm`` calls, the fallback's its backward op), lowered here too.

- ``histc``: a JAX segment (:func:`_histc_jax`) with eager CPU's algorithm:
  edges ``min``/``max`` cast to the input dtype (the data's own min/max
  where ``min == max``, widened by torch's ``bins_edges_correction`` where
  those are equal too), values outside the edges and NaN ignored, bin
  ``trunc((x - lo) * bins / (hi - lo))`` in the input dtype (bfloat16 and
  float16 rounded after every operation with ``lax.reduce_precision``, as
  c10's scalar operators do), ``x == hi`` in the last bin; counts exact
  (int32) then cast to the input dtype. Where eager raises on the data
  (a NaN or infinity in it when the range comes from the data: "range of
  [...] is not finite") a program cannot raise: every bin is NaN instead.
  Static errors (``min > max``, an infinite range) raise eager's message.
- grouped products: ``jax.lax.ragged_dot_general`` (group sizes
  ``offs[g] - offs[g-1]``) for the three layouts with offsets; which XLA:CPU
  compiles dense: each group's rows (columns, contraction slice) masked,
  one matrix product over all groups (``G`` times the FLOPs of the
  ungrouped product, one pass, no loop). 3-d x 3-d is ``torch.bmm``.
  Layouts (torch's ``_grouped_mm_fallback``, aten's CPU kernel):

  - 2-d ``(M, K)`` x 3-d ``(G, K, N)``: rows ``offs[g-1]:offs[g]`` times
    ``mat2[g]`` -> ``(M, N)``;
  - 3-d ``(G, M, K)`` x 2-d ``(K, N)``: columns ``offs[g-1]:offs[g]`` of
    ``mat2`` times ``mat1[g]`` -> ``(M, N)``;
  - 2-d ``(M, K)`` x 2-d ``(K, N)``: contraction slice ``offs[g-1]:offs[g]``
    -> ``(G, M, N)`` (an empty group gives zeros, as eager);
  - 3-d x 3-d: ``bmm``.

  Rows (columns) past ``offs[-1]`` are zero here; eager's ``_grouped_mm``
  leaves them uninitialized (``empty``), transformers' fallback zeroes them.
  ``offs`` must be nondecreasing (cumulative counts, as torch documents);
  bfloat16/float16 products accumulate in float32 and round once, as
  eager's CPU ``mm``. ``bias`` and an ``out_dtype`` other than the input's
  are declined (``NotImplemented``: eager rejects them as well).

Docs: ``docs/jax_lowerings.md`` ("Mixture of experts"); tests:
``tests/python/test_moe_models.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["grouped_lowerings"]

aten = torch.ops.aten

_LOW = {torch.bfloat16: (8, 7), torch.float16: (5, 10)}
"""(exponent bits, mantissa bits) of the dtypes whose scalar arithmetic c10
rounds after every operation."""


def _call(name: str, fn: Callable[..., Any], *tensors: torch.Tensor, **static: Any) -> list[Any]:
    from hlobridge._src.dynamo.jax_segment import jax_segment

    return jax_segment(name, fn, *tensors, **static)


# -- histc -----------------------------------------------------------------------


def _edges_correction(lo: float, hi: float, dtype: torch.dtype) -> tuple[float, float]:
    """torch's ``bins_edges_correction`` for an empty range (static)."""
    if dtype in (torch.float32, torch.float64):
        import numpy as np

        t = np.float32 if dtype == torch.float32 else np.float64
        down = float(np.nextafter(t(lo), t(-np.inf)))
        up = float(np.nextafter(t(hi), t(np.inf)))
        return min(down, lo - 1.0), max(up, hi + 1.0)
    return lo - 1.0, hi + 1.0


def _histc_jax(x: Any, *, bins: int, lo: float, hi: float, from_data: bool,
               low: tuple[int, int] | None) -> Any:
    """JAX: ``histc`` of ``x`` (module docs). ``from_data``: the range is
    the data's min/max (``lo``/``hi`` unused); ``low``: the reduced
    precision to round to after every operation."""
    import jax
    import jax.numpy as jnp

    dt = x.dtype
    work = jnp.float32 if low is not None else dt
    flat = x.reshape(-1).astype(work)

    def rnd(v: Any) -> Any:
        return jax.lax.reduce_precision(v, *low) if low is not None else v

    bad = jnp.zeros((), bool)
    if from_data:
        left = jnp.min(flat)
        right = jnp.max(flat)
        same = left == right
        if dt in (jnp.float32, jnp.float64):
            down = jnp.minimum(jnp.nextafter(left, jnp.asarray(-jnp.inf, dt)), left - 1)
            up = jnp.maximum(jnp.nextafter(right, jnp.asarray(jnp.inf, dt)), right + 1)
        else:
            down, up = rnd(left - 1), rnd(right + 1)
        left = jnp.where(same, down, left)
        right = jnp.where(same, up, right)
        bad = ~(jnp.isfinite(left) & jnp.isfinite(right))
    else:
        left = rnd(jnp.asarray(lo, work))
        right = rnd(jnp.asarray(hi, work))
    inside = (flat >= left) & (flat <= right)
    nbins = rnd(jnp.asarray(bins, work))
    pos = rnd(rnd(rnd(flat - left) * nbins) / rnd(right - left))
    idx = jnp.clip(jnp.where(inside, pos, 0).astype(jnp.int32), 0, bins - 1)
    counts = jnp.zeros((bins,), jnp.int32).at[idx].add(inside.astype(jnp.int32))
    out = counts.astype(dt)
    return jnp.where(bad, jnp.asarray(jnp.nan, dt), out)


def _histc(x: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
    """``histc`` (module docs); integer inputs never get here (torch's meta
    function raises eager's error first)."""
    if not x.is_floating_point():
        raise RuntimeError(f"\"histogram_cpu\" not implemented for '{x.dtype}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histc: bins must be > 0, but got {bins}")
    if x.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        return NotImplemented
    lo, hi = float(min), float(max)
    from_data = lo == hi and x.numel() > 0
    if not from_data:
        if lo == hi:
            lo, hi = _edges_correction(lo, hi, x.dtype)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
        if not lo < hi:
            raise RuntimeError("torch.histc: max must be larger than min")
    if x.numel() == 0:
        return torch.zeros(bins, dtype=x.dtype, device=x.device)
    return _call("histc", _histc_jax, x, bins=int(bins), lo=lo, hi=hi, from_data=from_data,
                 low=_LOW.get(x.dtype))[0]


# -- grouped matrix products ---------------------------------------------------


def _group_sizes(offs: Any) -> Any:
    import jax.numpy as jnp

    return jnp.diff(offs, prepend=jnp.zeros((1,), offs.dtype))


def _gmm_jax(a: Any, b: Any, offs: Any, *, layout: str) -> Any:
    """JAX: the grouped product of one layout (module docs) with
    ``lax.ragged_dot_general``; bfloat16/float16 inputs are multiplied in
    float32 and rounded once."""
    import jax.numpy as jnp
    from jax import lax

    dt = a.dtype
    if dt in (jnp.bfloat16, jnp.float16):
        # Products of bfloat16/float16 values are exact in float32 (and
        # XLA:CPU has no BF16 x BF16 = F32 dot): accumulate in float32.
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    sizes = _group_sizes(offs)
    prec = lax.Precision.HIGHEST
    if layout == "2d3d":  # (M, K) x (G, K, N) -> (M, N), rows ragged
        out = lax.ragged_dot(a, b, sizes, precision=prec)
    elif layout == "3d2d":  # (G, M, K) x (K, N) -> (M, N), columns ragged
        out = lax.ragged_dot(b.T, jnp.swapaxes(a, 1, 2), sizes, precision=prec).T
    else:  # "2d2d": (M, K) x (K, N) -> (G, M, N), contraction ragged
        dn = lax.RaggedDotDimensionNumbers(
            dot_dimension_numbers=(([1], [0]), ([], [])),
            lhs_ragged_dimensions=[1], rhs_group_dimensions=[])
        out = lax.ragged_dot_general(a, b, sizes, dn, precision=prec)
    return out.astype(dt)


def _gmm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None) -> Any:
    """The grouped product of ``a`` and ``b`` (module docs)."""
    if a.dtype != b.dtype or a.dtype not in (torch.float32, torch.float64, torch.bfloat16,
                                             torch.float16):
        return NotImplemented
    if a.dim() == 3 and b.dim() == 3:
        if offs is not None:
            return NotImplemented
        return torch.bmm(a, b)
    if offs is None or offs.dim() != 1 or a.dim() not in (2, 3) or b.dim() not in (2, 3):
        return NotImplemented
    layout = f"{a.dim()}d{b.dim()}d"
    if offs.numel() == 0:
        return NotImplemented
    return _call(f"_grouped_mm.{layout}", _gmm_jax, a.contiguous(), b.contiguous(),
                 offs.to(torch.int32), layout=layout)[0]


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> Any:
    """``aten._grouped_mm`` (module docs)."""
    if bias is not None or (out_dtype is not None and out_dtype != a.dtype):
        return NotImplemented
    return _gmm(a, b, offs)


def _hf_fallback(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> Any:
    """``transformers::grouped_mm_fallback``: ``(S, K) x (E, K, N)`` with
    offsets; rows past ``offs[-1]`` zero, as its loop of ``mm``."""
    return _gmm(a, w, offs)


def _hf_fallback_backward(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor,
                          grad: torch.Tensor) -> Any:
    """``transformers::grouped_mm_fallback_backward``: ``(grad @ w[g]^T``
    per group, ``a^T @ grad`` per contraction slice)``."""
    ga = _gmm(grad, w.transpose(-2, -1), offs)
    gw = _gmm(a.t(), grad, offs)
    if ga is NotImplemented or gw is NotImplemented:
        return NotImplemented
    return ga, gw


def grouped_lowerings() -> dict[Any, Callable[..., Any]]:
    """aten overload (and transformers custom op, where transformers has
    registered it in this process) -> lowering; not cached, as
    transformers may be imported after the first compile."""
    t: dict[Any, Callable[..., Any]] = {
        aten.histc.default: _histc,
        aten._grouped_mm.default: _grouped_mm,
    }
    ns = torch.ops.transformers
    if hasattr(ns, "grouped_mm_fallback") and hasattr(ns, "grouped_mm_fallback_backward"):
        t[ns.grouped_mm_fallback.default] = _hf_fallback
        t[ns.grouped_mm_fallback_backward.default] = _hf_fallback_backward
    return t
