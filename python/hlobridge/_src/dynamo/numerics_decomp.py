"""Decompositions that keep torch's results where torch_xla's lowering of an
op gives a silently different one (found by ``scripts/op_sweep.py``; the
sweep's results are in ``docs/op_numerics.md``).

:func:`numerics_decompositions` is merged into the backend's table
(``hlobridge._src.dynamo.engine.decompositions``). Each entry, with what the
sweep measured before (after: equal to eager torch, tested in
``tests/python/test_op_numerics.py``):

``amax``/``amin``, ``max.dim``/``min.dim``, ``max``/``min`` (no dim)
    torch_xla starts the reduction at ``-FLT_MAX`` (``+FLT_MAX``), not
    ``-inf``: a row of only ``-inf`` (a fully masked attention row) gave
    ``-3.4e38`` instead of ``-inf``. And the XLA CPU plugin compiles max/min
    with ``xla_cpu_enable_fast_min_max`` on by default, so a NaN in the
    row was dropped (``amax([3, nan, -1])`` gave 3, torch gives NaN). Here:
    the index of the extreme (below) and the value gathered at it, so
    values and indices agree with each other and with torch.

``argmax``/``argmin``, the indices of ``max.dim``/``min.dim``
    torch treats NaN as the extreme and returns the first NaN's index;
    torch_xla's reducer (``compare GE`` + ``select``) never picks a NaN
    (both rows of the sweep's NaN case had the wrong index). Here: the
    first NaN's index where a slice has one, else torch_xla's index (whose
    ties already go to the first index, as torch's).

``aminmax`` without ``dim``
    returned the input's shape ((5, 5, 5) for a (5, 5, 5) input) instead of
    0-d results. Here: ``amin`` and ``amax`` over every dimension.

``pow`` of float32/float64 tensors to the power 2 or 3
    torch_xla's ``stablehlo.power`` runs through ``exp``/``log`` on XLA:CPU
    (3.5-6x slower than multiplying; GPT-2's ``gelu_new`` cubes every MLP
    activation). Here: ``x * x (* x)``, eager's own formula for these
    exponents (bit-equal to eager).

``cumsum`` of integer/bool tensors without ``dtype``
    torch accumulates in int64 and returns int64; torch_xla accumulated in
    the input's type and returned int32 for int32 input (wrong dtype, and
    int32 overflow: ``cumsum`` of eight ``2**30`` gave negative values).
    Here: the input is widened to int64 first.

``max_pool{2,3}d_with_indices`` (also ``max_pool1d``), ``cummax``
    the indices came back as ``uint32`` (pooling) or ``int32`` (``cummax``)
    although torch, and the traced graph, say int64 (torch_xla's tensor
    reports int64; its HLO type is 32-bit). Here: the indices are added to
    an int64 zero, which makes torch_xla emit the widening convert.

Found by the OpInfo sweep (``make sweep``, #27):

``cummax`` ties, NaN and bool
    torch takes the last index of a tied running maximum and keeps NaN as
    the maximum from the first NaN on; torch_xla took the first index (an
    integer ``cummax`` of ``[0, 1, 1]`` gave indices ``[0, 1, 1]``, torch
    ``[0, 1, 2]``; the gradient went to the wrong element) and dropped NaN.
    Here: the last position where the input equals the running maximum.

``sign``/``sgn`` of bool
    came back uint8. Here: the input.

``avg_pool{2,3}d`` with ``divisor_override``
    with ``count_include_pad=False`` torch_xla divided by the window's real
    element count instead of the override (error 0.73 relative), with
    ``ceil_mode`` its extra windows were off (0.5); integer inputs differed
    in 184 of 243 values. Here: zero padding for the ceil-mode windows and
    ``count_include_pad=True`` (the same in torch when the divisor is
    overridden); integers: exact sum, truncating division.

``var``/``std``/``var_mean``/``std_mean`` of complex tensors
    torch's variance is real; torch_xla returned a complex one
    (``var_mean``), a wrong one (``std_mean``, error 0.55) or failed. Here:
    ``var(re) + var(im)``.

``mean`` of complex tensors
    torch_xla's lowering failed (``rms_norm`` and the backward of complex
    ``var``/``std`` with it). Here: the sum over the element count.

``linalg_inv_ex`` (``linalg.inv``, ``tensorinv``), ``linalg_pinv``, ``_linalg_eigh``, SVD and
log-determinant of empty matrices
    ``hlobridge._src.dynamo.linalg_numerics``: complex inverses were wrong
    (error 1.99 relative), ``inv_ex``'s ``info`` all zeros of the wrong
    shape, float64 ``pinv`` float32-accurate (2e-7); float64 ``eigh``'s
    eigenvectors too (2e-8: refined).

Ops with a ``dim`` on 0-d tensors (``sum(x, 0)``, ``cumsum``, ``max(x, 0)``,
``index_select``, ...)
    torch_xla raised ``Value out of range``: ``zero_d_dims`` wraps those
    entries (the 0-d tensors as 1-element vectors).

``div.Tensor`` and ``abs`` of complex tensors
    torch_xla's result kept the wrong torch type (``div``: float32, so
    ``gradient`` of complex64 came back float32 after a ``cat``; ``abs``:
    complex64, and ``linalg.norm`` of complex failed). Here: the quotient
    plus a complex zero; ``|z|`` from the real and imaginary parts.
    ``linalg_vector_norm`` of complex is the norm of ``|z|``.

``heaviside``, ``isnan``, ``atan2`` of integer/bool tensors; ``repeat`` to an empty result
    ``heaviside`` of int32 came back int64; bool inputs failed to lower.

``div.Scalar`` of complex tensors
    returned the real part only (``trapezoid(y, x)`` of complex inputs came
    back float32). Here: division by a 0-d tensor.

Unary float ops (``sin``, ``asin``, ``erfinv``, ``log``, ...) of integer/bool tensors
    failed to lower or kept the input dtype. Here: the input in the default
    float dtype first, as torch promotes it.

``log10``, ``log2``, ``gelu`` in float64
    float32-accurate (relative error 1e-8 to 3e-8; torch_xla's lowerings
    have float32 constants). Here: torch's formulas with float64 constants.

``linalg_vector_norm`` and ``dist`` of float16/bfloat16
    summed ``|x|^p`` in the 16-bit type (``dist(a, b, 4)`` overflowed to
    inf). Here: in float32, as torch.

``convolution_backward``'s bias gradient in bfloat16/float16
    summed in the 16-bit type (0.19 relative off). Here: in float32.

``logaddexp`` of complex tensors
    torch's decomposition's ``complex(nan, nan)`` constant made the
    generated graph code fail (``name 'nanj' is not defined``). Here: the
    NaN from a real tensor. ``isnan`` of complex tensors failed to lower:
    here, either part NaN.

``remainder`` of int8 tensors; ``arange`` with a narrow integer ``dtype``
    ``remainder`` came back uint8: here computed in int32 and cast back.
    ``arange(-1, 2, 2, dtype=uint8)`` had one element (torch: ``[255, 1]``,
    counted in int64): here int64 values, then the cast.

``_linalg_slogdet`` and ``logdet`` of complex matrices
    torch_xla's sign was ``1`` (a real sign: error 2 relative, eager 6e-9)
    and ``logdet`` lost the phase (its ``logabsdet`` is right). Here: the
    sign from pivoted elimination unrolled in the program (matrices up to
    ``COMPLEX_SIGN_MAX_N``; larger: a named error), ``logdet`` as
    ``log(sign) + logabsdet``.

``dist`` of complex tensors
    came back complex (the gradients 0.5 to 6.6 relative off). Here: the
    real norm of the difference.

``soft_margin_loss_backward``
    torch's decomposition computes ``t g (sigmoid(t x) - 1)``, which cancels
    where ``t x`` is large (float64: a gradient of 6.4e-16 came back
    1.1e-15, 0.75 relative off). Here: eager's ``-t g sigmoid(-t x)``.

``floor_divide``, ``div(rounding_mode=...)``, ``remainder`` of bfloat16/float16
    torch computes in float32; torch_xla divided in the 16-bit type
    (``-5.28 // 1.05``: -5 instead of -6). Here: in float32.

``linalg_svd`` of a batch of matrices (``linalg.svd``, ``svdvals``,
``matrix_norm('nuc')``, ``pinv``, ...)
    torch_xla's batched SVD gives the singular values the right data but a
    wrong shape to later ops: ``matrix_norm(x, 'nuc')`` of a (5, 5, 5) batch
    summed over the batch instead of over each matrix's values (error 0.87
    relative, eager 9e-8; its gradient 2.3), and torch_xla itself fails on
    ``svd(x).S.sum(-1)`` ("expected parameter 0 of size 16 but got ... 48").
    Here: one 2-D SVD per matrix of the batch, stacked (the batch is
    unrolled in the program: fine for the small batches SVD sees in models).
    Still open (docs/op_numerics.md): torch_xla ignores
    ``full_matrices=False`` (``U`` comes back (6, 6) for a (6, 4) matrix),
    so ``linalg.svd``'s reduced ``U``/``Vh`` have the wrong shape and the
    backward of SVD-based ops on non-square matrices fails to compile.

Each decomposition calls the op it replaces; a per-thread guard
(``numerics_common``) makes that inner call return ``NotImplemented`` from
the table, so the tracer records the op itself (``proxy_tensor`` falls back
to the op on ``NotImplemented``).

The decompositions live by family: ``numerics_reductions`` (extremes,
scans, pooling, variance), ``numerics_linalg`` (linear algebra and complex
arithmetic), ``numerics_dtypes`` (promotion, 16-bit and float64 forms);
this module holds the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src.dynamo import linalg_numerics
from hlobridge._src.dynamo.numerics_dtypes import (
    FLOAT64_FORMULAS, INT_TO_FLOAT, arange_small_int, atan2_promoted,
    conv_backward_half_bias, float64_formula, heaviside, in_float32, int8_widened,
    int_to_float, integer_power, isnan_exact, repeat_empty, sign_bool, soft_margin_loss_backward,
)
from hlobridge._src.dynamo.numerics_linalg import (
    abs_complex, dist_half, div_complex, div_scalar_complex, eigh, inv_ex,
    linalg_svd, logaddexp_complex, logdet_empty, slogdet, vector_norm_complex,
)
from hlobridge._src.dynamo.numerics_reductions import (
    aminmax, arg_extreme, avg_pool_divisor, complex_mean, complex_var, cummax, cumsum,
    extreme_all, extreme_dim, extreme_values, with_int64_indices, complex_var_mean,
)
from hlobridge._src.dynamo.zero_d_dims import ZERO_D_OPS, zero_d_wrap

__all__ = ["complex_var_mean", "numerics_decompositions"]

_aten = torch.ops.aten


def _or_core(mine: Callable[..., Any], core: Callable[..., Any]) -> Callable[..., Any]:
    """``mine``, falling through to torch's core decomposition of the op
    (the one this entry replaces in the backend's table) where it declines."""
    def decomp(*args: Any, **kwargs: Any) -> Any:
        out = mine(*args, **kwargs)
        return core(*args, **kwargs) if out is NotImplemented else out

    return decomp


def numerics_decompositions() -> dict[Any, Any]:
    """The table (module docs); merged into the backend's decompositions
    (an entry that replaces one of torch's core decompositions falls through
    to it where it declines)."""
    from torch._decomp import core_aten_decompositions

    core = core_aten_decompositions()
    a = _aten
    argmax, argmin = arg_extreme(a.argmax.default), arg_extreme(a.argmin.default)
    amax = extreme_values(a.amax.default, float("-inf"))
    amin = extreme_values(a.amin.default, float("inf"))
    promoted = {getattr(a, n).default: int_to_float(getattr(a, n).default)
                for n in INT_TO_FLOAT if hasattr(a, n)}
    table = promoted | {
        a.argmax.default: argmax,
        a.argmin.default: argmin,
        a.max.dim: extreme_dim(a.max.dim, argmax),
        a.min.dim: extreme_dim(a.min.dim, argmin),
        a.amax.default: amax,
        a.amin.default: amin,
        a.max.default: extreme_all(a.amax.default),
        a.min.default: extreme_all(a.amin.default),
        a.aminmax.default: aminmax,
        a.cumsum.default: cumsum,
        a.max_pool2d_with_indices.default: with_int64_indices(
            a.max_pool2d_with_indices.default, 1),
        a.max_pool3d_with_indices.default: with_int64_indices(
            a.max_pool3d_with_indices.default, 1),
        a._linalg_svd.default: linalg_svd,
        a.sign.default: sign_bool(a.sign.default),
        a.sgn.default: sign_bool(a.sgn.default),
        a.avg_pool2d.default: avg_pool_divisor(a.avg_pool2d.default, 5),
        a.avg_pool3d.default: avg_pool_divisor(a.avg_pool3d.default, 5),
        a.mean.dim: complex_mean,
        a.mean.default: complex_mean,
        a.var.correction: complex_var(a.var.correction),
        a.std.correction: complex_var(a.std.correction),
        a.var_mean.correction: complex_var(a.var_mean.correction),
        a.std_mean.correction: complex_var(a.std_mean.correction),
        a.cummax.default: cummax,
        a.linalg_inv_ex.default: inv_ex,
        a.linalg_pinv.atol_rtol_tensor: linalg_numerics.pinv,
        a._linalg_eigh.default: eigh,
        a.div.Tensor: div_complex,
        a._linalg_slogdet.default: slogdet,
        a.logdet.default: logdet_empty,
        a.abs.default: abs_complex,
        a.linalg_vector_norm.default: vector_norm_complex,
        a.dist.default: dist_half,
        a.repeat.default: repeat_empty,
        a.heaviside.default: heaviside,
        a.isnan.default: isnan_exact,
        a.atan2.default: atan2_promoted,
        a.div.Scalar: div_scalar_complex,
        a.convolution_backward.default: conv_backward_half_bias,
        a.soft_margin_loss_backward.default: soft_margin_loss_backward,
        a.logaddexp.default: logaddexp_complex,
        a.floor_divide.default: in_float32(a.floor_divide.default),
        a.div.Tensor_mode: in_float32(a.div.Tensor_mode),
        a.div.Scalar_mode: in_float32(a.div.Scalar_mode),
        a.remainder.Tensor: int8_widened(a.remainder.Tensor, in_float32(a.remainder.Tensor)),
        a.remainder.Scalar: int8_widened(a.remainder.Scalar, in_float32(a.remainder.Scalar)),
        a.arange.start_step: arange_small_int,
        a.pow.Tensor_Scalar: integer_power,
    }
    for name in FLOAT64_FORMULAS:
        op = getattr(a, name).default
        table[op] = float64_formula(name, table.get(op))
    for op in ZERO_D_OPS:  # 0-d tensors with a dim (zero_d_dims)
        table[op] = zero_d_wrap(op, table.get(op))
    return {k: _or_core(v, core[k]) if k in core else v for k, v in table.items()}
