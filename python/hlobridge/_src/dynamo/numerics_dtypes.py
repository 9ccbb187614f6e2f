"""Numerics decompositions of dtype handling: integer/bool inputs promoted
as torch does, 16-bit ops computed in float32, float64 formulas with
float64 constants, narrow-integer ``arange``/``remainder``, and eager's
forms of ``soft_margin_loss_backward`` and the 16-bit bias gradient
(``numerics_decomp`` documents each)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src.dynamo.numerics_common import HALF, declines, inner_call

_aten = torch.ops.aten


def sign_bool(op: Any) -> Callable[..., Any]:
    """``sign``/``sgn`` of a bool tensor is the tensor (torch_xla: uint8)."""
    def decomp(x: torch.Tensor) -> Any:
        if x.dtype != torch.bool:
            return NotImplemented
        return x.clone()

    return decomp


def in_float32(op: Any) -> Callable[..., Any]:
    """``floor_divide``/``div(rounding_mode=...)``/``remainder`` of bfloat16
    and float16 tensors: torch computes them in float32 and rounds the
    result; torch_xla divided in the 16-bit type, so a quotient such as
    -5.0074 rounded to -5 before the floor (torch: -6). Here: float32
    operands, the result cast back."""
    def decomp(*args: Any, **kwargs: Any) -> Any:
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        if declines(op) or not ts or ts[0].dtype not in HALF:
            return NotImplemented
        dtype = ts[0].dtype
        up = [a.float() if isinstance(a, torch.Tensor) and a.dtype in HALF else a
              for a in args]
        with inner_call(op):
            return op(*up, **kwargs).to(dtype)

    return decomp


def int8_widened(op: Any, other: Callable[..., Any]) -> Callable[..., Any]:
    """``remainder`` of int8 tensors: torch_xla's result was uint8 (its
    values right). Here: in int32, the result cast back (exact: a remainder
    is smaller than the divisor). Other dtypes: ``other``."""
    def decomp(*args: Any, **kwargs: Any) -> Any:
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        if declines(op) or not ts or torch.result_type(*args[:2]) != torch.int8:
            return other(*args, **kwargs)
        wide = [a.to(torch.int32) if isinstance(a, torch.Tensor) else a for a in args]
        with inner_call(op):
            return op(*wide, **kwargs).to(torch.int8)

    return decomp


_SMALL_INTS = (torch.uint8, torch.int8, torch.int16, torch.int32)


def arange_small_int(start: Any, end: Any, step: Any = 1, **kwargs: Any) -> Any:
    """``arange`` with an integer ``dtype`` narrower than int64: torch
    counts and steps in int64 and casts the values (``arange(-1, 2, 2,
    dtype=uint8)`` is ``[255, 1]``); torch_xla's result had one element.
    Here: int64 first, then the cast."""
    op = _aten.arange.start_step
    dtype = kwargs.get("dtype")
    if dtype not in _SMALL_INTS or declines(op):
        return NotImplemented
    with inner_call(op):
        return op(start, end, step, **(kwargs | {"dtype": torch.int64})).to(dtype)


def repeat_empty(x: torch.Tensor, repeats: Any) -> Any:
    """``repeat`` with an empty result: zeros of its shape (torch_xla:
    ``Concatenate expects at least one argument``)."""
    reps = list(repeats)
    shape = [1] * (len(reps) - x.dim()) + list(x.shape)
    out = [s * r for s, r in zip(shape, reps)]
    if all(n != 0 for n in out):
        return NotImplemented
    return x.new_zeros(out)


def heaviside(x: torch.Tensor, values: torch.Tensor) -> Any:
    """``heaviside`` of integer/bool tensors: torch_xla returned int64 for
    int32 (and failed on bool: ``isnan`` of ``pred``). Here: ``values``
    where ``x == 0``, else ``x > 0``, in torch's result type."""
    if x.is_floating_point() or x.is_complex():
        return NotImplemented
    dtype = torch.result_type(x, values)
    if dtype == torch.bool:
        return x | values.to(torch.bool)
    return torch.where(x == 0, values.to(dtype), (x > 0).to(dtype))


def isnan_exact(x: torch.Tensor) -> Any:
    """``isnan`` of integer/bool tensors (all False; torch_xla failed to
    lower it for bool) and of complex ones (either part NaN; torch_xla
    failed to lower it: ``aten::isnan, xla_shape=pred[]``)."""
    if x.is_complex():
        return torch.isnan(torch.real(x)) | torch.isnan(torch.imag(x))
    if x.is_floating_point():
        return NotImplemented
    return torch.zeros(x.shape, dtype=torch.bool)


def atan2_promoted(a: torch.Tensor, b: torch.Tensor) -> Any:
    """``atan2`` of integer/bool tensors: torch computes in the default
    float dtype; torch_xla failed on bool (``got PRED``)."""
    if a.is_floating_point() or b.is_floating_point():
        return NotImplemented
    f = torch.get_default_dtype()
    return _aten.atan2.default(a.to(f), b.to(f))


def soft_margin_loss_backward(grad_output: torch.Tensor, x: torch.Tensor, target: torch.Tensor,
                               reduction: int = 1) -> Any:
    """``soft_margin_loss_backward`` as eager's kernel, ``-t g sigmoid(-t x)``
    (module docs), in float32 for 16-bit inputs."""
    dt = torch.result_type(grad_output, x)
    half = dt in (torch.float16, torch.bfloat16)
    c = (lambda t: t.float()) if half else (lambda t: t)
    g = -c(target) * c(grad_output) * torch.sigmoid(-c(target) * c(x))
    if reduction == 1:  # mean
        g = g / max(x.numel(), 1)
    return g.to(dt)


def conv_backward_half_bias(grad_out: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                             bias_sizes: Any, stride: Any, padding: Any, dilation: Any,
                             transposed: bool, output_padding: Any, groups: int,
                             output_mask: Any) -> Any:
    """``convolution_backward``'s bias gradient in bfloat16/float16: torch
    sums in float32; torch_xla summed in the 16-bit type (a transposed 3-D
    convolution's bias gradient was 0.19 off relative, eager 0.002). Here:
    the sum in float32, the rest from the op with the bias left out."""
    op = _aten.convolution_backward.default
    if grad_out.dtype not in HALF or not output_mask[2] or declines(op):
        return NotImplemented
    mask = [output_mask[0], output_mask[1], False]
    with inner_call(op):
        gi, gw, _ = op(grad_out, x, w, bias_sizes, stride, padding, dilation, transposed,
                       output_padding, groups, mask)
    dims = [0] + list(range(2, grad_out.dim()))
    gb = grad_out.float().sum(dims).to(grad_out.dtype)
    return gi, gw, gb


INT_TO_FLOAT = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                 "acosh", "atanh", "exp", "expm1", "log", "log2", "log10", "log1p",
                 "sqrt", "rsqrt", "erf", "erfc", "erfinv", "sigmoid", "reciprocal", "sinc",
                 "special_ndtr")
"""Unary ops that torch computes in the default float dtype for integer and
bool inputs. ``exp2``, ``lgamma``, ``digamma``, ``i0`` and the
``special_i0e/i1/i1e/ndtri/log_ndtr/erfcx`` ops are lowered by
``jax_lowerings.py``, which promotes integer inputs itself."""


def int_to_float(op: Any) -> Callable[..., Any]:
    """A unary float op of an integer/bool tensor: torch promotes to the
    default float dtype; torch_xla failed to lower it (``xla_shape=pred``)
    or kept the input's dtype (``asin`` of bool gave bool). Here: the input
    converted first."""
    def decomp(x: torch.Tensor) -> Any:
        if x.is_floating_point() or x.is_complex():
            return NotImplemented
        return op(x.to(torch.get_default_dtype()))

    return decomp


def _gelu64(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + torch.tanh(inner))
    return x * 0.5 * (1 + torch.erf(x * math.sqrt(0.5)))


FLOAT64_FORMULAS: dict[str, Callable[..., Any]] = {
    "log10": lambda x: torch.log(x) / math.log(10),
    "log2": lambda x: torch.log(x) / math.log(2),
    "gelu": _gelu64,
}
"""float64 ops whose torch_xla lowering has a float32 constant: float32
accuracy in float64 (relative error ``log10`` 2.3e-8, ``log2`` 1.3e-8,
``gelu`` 2.6e-8 and 3e-10 of its largest value; within ``assert_close``'s
float64 tolerance, found by the float64 sweep's reference error). Here:
torch's formula with float64 constants. (``hardsigmoid_backward`` differs
from eager by 3e-8 the other way: eager's CPU kernel multiplies by a
float32 ``1/6``.)"""


def float64_formula(name: str, other: Callable[..., Any] | None) -> Callable[..., Any]:
    """:data:`FLOAT64_FORMULAS`' entry for a float64 first input; ``other``
    (or the op as is) otherwise."""
    formula = FLOAT64_FORMULAS[name]

    def decomp(x: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64:
            return formula(x, *args, **kwargs)
        return other(x, *args, **kwargs) if other is not None else NotImplemented

    return decomp


def integer_power(x: Any, exponent: Any) -> Any:
    """``pow(x, 1)``, ``pow(x, 2)`` and ``pow(x, 3)`` of float32/float64
    tensors as eager's CPU kernel computes them: a copy, ``x * x`` and
    ``x * x * x`` (``pow(x, 1)`` comes from the gradient of ``x ** 2``). torch_xla lowers
    them to ``stablehlo.power``, which XLA:CPU evaluates through ``exp`` and
    ``log`` unless the exponent is 2: 3.5-6x the multiplications' time on a
    ``[1024, 3072]`` tensor (GPT-2's ``gelu_new`` raises every MLP
    activation to the third power). Other dtypes and exponents decline."""
    if (not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float64)
            or isinstance(exponent, bool) or not isinstance(exponent, (int, float))
            or exponent not in (1, 2, 3)):
        return NotImplemented
    if exponent == 1:
        return x.clone()
    square = x * x
    return square if exponent == 2 else square * x
