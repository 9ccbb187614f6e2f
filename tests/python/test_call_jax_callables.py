"""Every callable :func:`hlobridge.call_jax` accepts eagerly also works under
``torch.compile(..., fullgraph=True)`` with the hlobridge backend: lambdas,
nested ``def`` functions and closures made inside or outside the compiled
region, bound methods, ``jax.jit``-wrapped functions, ``jnp`` functions and
``functools.partial``. A closure's captured values are part of the key (two
closures over different constants never share a program, and rebinding a
name to another closure recompiles), retracing the same nested function
reuses its compiled program, and a function that closes over a torch
tensor gets :class:`hlobridge.CapturedTensorError` with the fix.

Inputs are fresh random each run (the seed is printed in failure messages;
set HLOBRIDGE_TEST_SEED to replay). Results are compared with the same
function run by JAX on the same inputs (float32, XLA CPU on both sides):
rtol=1e-5, atol=1e-6.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_call_jax_callables.py -q
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import pytest
import torch

import hlobridge as hb
from hlobridge._src import custom_op
from jax_compare import close, fresh, jax_ref  # noqa: F401 (fresh: autouse fixture)


def compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    return torch.compile(fn, backend="hlobridge", fullgraph=True)


def make_scale(c: float) -> Callable[[jax.Array], jax.Array]:
    def scale(x: jax.Array) -> jax.Array:
        return jnp.sin(x) * c
    return scale


class Shift:
    def __init__(self, c: float) -> None:
        self.c = c

    def apply(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(x) + self.c


@jax.jit
def jitted_gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x)


def axpy(a: float, x: jax.Array, y: jax.Array) -> jax.Array:
    return a * x + y


OUTSIDE: dict[str, Callable[..., Any]] = {
    "lambda": lambda x: jnp.exp(x) - 1.0,
    "closure": make_scale(2.5),
    "bound_method": Shift(0.75).apply,
    "jax_jit": jitted_gelu,
    "jax_jit_of_lambda": jax.jit(lambda x: jnp.cos(x) * x),
    "jnp_function": jnp.tanh,
    "partial_of_jnp": functools.partial(jnp.multiply, 7.0),
    "partial_with_keyword": functools.partial(axpy, 3.0, y=1.0),
}


@pytest.mark.parametrize("kind", list(OUTSIDE))
def test_callable_from_outside_the_compiled_region(kind: str) -> None:
    f = OUTSIDE[kind]

    @compiled
    def run(x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(f, x * 1.5) + 1.0

    x = torch.randn(5, 7)
    close(run(x), jax_ref(f, x * 1.5) + 1.0, kind)
    close(hb.call_jax(f, x), jax_ref(f, x), f"{kind} eager")


def test_lambda_and_nested_def_made_inside_the_compiled_region() -> None:
    @compiled
    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        def inner(a: jax.Array, b: jax.Array) -> jax.Array:
            return jnp.cos(a) * b
        u = hb.call_jax(inner, x, y)
        return hb.call_jax(lambda a: a * a - 0.5, u)

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    want = jax_ref(lambda a, b: (jnp.cos(a) * b) ** 2 - 0.5, x, y)
    close(run(x, y), want, "nested def then lambda")


def test_closure_over_module_attribute_made_inside_the_compiled_region() -> None:
    class M(torch.nn.Module):
        def __init__(self, c: float) -> None:
            super().__init__()
            self.c = c
            self.lin = torch.nn.Linear(6, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            c = self.c
            return hb.call_jax(lambda h: jnp.tanh(h) * c, self.lin(x))

    m = M(3.0)
    x = torch.randn(3, 6)
    with torch.no_grad():
        want = jax_ref(lambda h: jnp.tanh(h) * 3.0, m.lin(x))
        close(compiled(m)(x), want, "closure over self.c")


def test_two_closures_over_different_constants_never_share_a_program() -> None:
    f2, f3 = make_scale(2.0), make_scale(3.0)

    @compiled
    def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return hb.call_jax(f2, x), hb.call_jax(f3, x)

    x = torch.randn(8)
    a, b = run(x)
    close(a, jax_ref(f2, x), "closure over 2.0")
    close(b, jax_ref(f3, x), "closure over 3.0")

    # Nested closures over a value that changes between calls.
    @compiled
    def run_c(x: torch.Tensor, c: float) -> torch.Tensor:
        return hb.call_jax(lambda a: a * c, x)

    close(run_c(x, 2.0), x * 2.0, "nested closure c=2")
    close(run_c(x, 5.0), x * 5.0, "nested closure c=5")
    close(run_c(x, 2.0), x * 2.0, "nested closure c=2 again")


def test_rebinding_a_global_to_another_closure_recompiles() -> None:
    holder = {"f": make_scale(2.0)}

    def run(x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(holder["f"], x)

    c = compiled(run)
    x = torch.randn(6)
    close(c(x), jax_ref(make_scale(2.0), x), "first closure")
    holder["f"] = make_scale(4.0)  # same code, other captured value
    close(c(x), jax_ref(make_scale(4.0), x), "rebound closure")


def test_retracing_a_nested_function_reuses_its_key_and_program() -> None:
    def run(x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(lambda a: jnp.sqrt(jnp.abs(a)) + 0.25, x)

    x = torch.randn(9)
    close(compiled(run)(x), jax_ref(lambda a: jnp.sqrt(jnp.abs(a)) + 0.25, x), "first trace")
    keys = len(custom_op._by_key)
    compiles = hb.stats()["compiles"]
    torch._dynamo.reset()
    close(compiled(run)(x), jax_ref(lambda a: jnp.sqrt(jnp.abs(a)) + 0.25, x), "retrace")
    assert len(custom_op._by_key) == keys, "retracing registered the same function again"
    assert hb.stats()["compiles"] == compiles, "retracing compiled the same program again"


def test_gradients_flow_through_a_nested_lambda() -> None:
    x = torch.randn(4, 3, requires_grad=True)

    @compiled
    def run(x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(lambda a: jnp.sin(a) * a, x).sum()

    run(x).backward()
    assert x.grad is not None
    want = jax_ref(jax.grad(lambda a: (jnp.sin(a) * a).sum()), x.detach())
    close(x.grad, want, "grad")


def test_closing_over_a_torch_tensor_is_a_named_error_with_the_fix() -> None:
    t = torch.randn(4)
    x = torch.randn(4)

    def bad(a: jax.Array) -> jax.Array:
        return a + t  # type: ignore[operator]

    with pytest.raises(hb.CapturedTensorError, match=r"closes over a torch.Tensor .*'t'.*argument"):
        hb.call_jax(bad, x)
    # Under torch.compile the same class reaches the user, not Dynamo's
    # InternalTorchDynamoError (hlobridge._src.dynamo.raise_through), and it
    # still pickles as the public class.
    with pytest.raises(hb.CapturedTensorError, match=r"closes over a torch.Tensor .*'t'.*argument"
                       ) as info:
        compiled(lambda a: hb.call_jax(bad, a))(x)
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is hb.CapturedTensorError and str(again) == str(info.value)
    torch._dynamo.reset()
    with pytest.raises(hb.CapturedTensorError, match=r"'b'"):
        compiled(lambda a, b: hb.call_jax(lambda u: u * b, a))(x, t)
    # The fix works: pass the tensor as an argument.
    close(hb.call_jax(lambda a, b: a + b, x, t), x + t, "tensor as an argument")
    assert issubclass(hb.CapturedTensorError, hb.ArgumentError)
