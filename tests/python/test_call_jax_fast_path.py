"""The native `call_jax` fast path: which calls it serves, that it computes
the same as the general path, and that its cache follows the functions'
lifetimes.

A call is on the fast path when its receipt says ``cache == "hit"`` and it
was served without entering Python's per-function table; we tell the two
apart by clearing the Python tables (``entry_cache.fn_tables``) after the
first call: the native table still answers. Numerics are compared with torch eager on
fresh random inputs (float32, rtol=1e-5, atol=1e-6).
"""

from __future__ import annotations

import gc
import os

import jax
import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from hlobridge import _native
from hlobridge._src import entry_cache

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


@pytest.fixture
def gen() -> torch.Generator:
    hb.clear_cache()
    return torch.Generator().manual_seed(SEED)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"seed={SEED}: {m}")


def served_natively(fn, *args):
    """Call twice; before the second call hide the Python tables, so only
    the native table can serve it. Returns the second result and receipt."""
    hb.call_jax(fn, *args)
    saved = dict(entry_cache.fn_tables)
    entry_cache.fn_tables.clear()
    try:
        out = hb.call_jax(fn, *args)
        return out, hb.last_receipt(), len(entry_cache.fn_tables) == 0
    finally:
        entry_cache.fn_tables.update(saved)


def test_plain_tensor_call_is_served_natively_zero_copy(gen):
    x, y = torch.randn(33, 7, generator=gen), torch.randn(33, 7, generator=gen)
    out, r, native = served_natively(lambda a, b: jnp.sin(a) * b, x, y)
    assert native, "the second call went through the Python path"
    assert r is not None and r.cache == "hit" and r.input_copies == 0 and r.input_views == 2
    assert r.output_pointers == (out.data_ptr(),)
    close(out, torch.sin(x) * y)


def test_multiple_outputs_keep_their_structure(gen):
    x = torch.randn(5, generator=gen)
    out, r, native = served_natively(lambda a: {"s": a + 1, "p": (a * 2, a * 3)}, x)
    assert native and r.cache == "hit"
    assert set(out) == {"s", "p"} and isinstance(out["p"], tuple)
    close(out["s"], x + 1)
    close(out["p"][1], x * 3)
    assert r.output_pointers == tuple(t.data_ptr() for t in (out["p"][0], out["p"][1], out["s"]))


def test_bound_methods_are_keyed_by_instance(gen):
    class Scale:
        def __init__(self, k: float) -> None:
            self.k = k

        def apply(self, a):
            return a * self.k

    x = torch.randn(4, generator=gen)
    two, three = Scale(2.0), Scale(3.0)
    out2, _, native2 = served_natively(two.apply, x)
    out3, _, native3 = served_natively(three.apply, x)
    assert native2 and native3
    close(out2, x * 2)
    close(out3, x * 3)


@pytest.mark.parametrize("kind", ["kwargs", "static", "pytree", "strided", "grad"])
def test_other_calls_take_the_general_path_and_stay_correct(gen, kind):
    x = torch.randn(6, 4, generator=gen)
    if kind == "kwargs":
        call = lambda: hb.call_jax(lambda a, b: a - b, x, b=x * 2)  # noqa: E731
        ref = -x
    elif kind == "static":
        call = lambda: hb.call_jax(lambda a, k: a * k, x, 4.0)  # noqa: E731
        ref = x * 4
    elif kind == "pytree":
        call = lambda: hb.call_jax(lambda d: d["a"] + 1, {"a": x})  # noqa: E731
        ref = x + 1
    elif kind == "strided":
        call = lambda: hb.call_jax(lambda a: a * 2, x.T)  # noqa: E731
        ref = x.T * 2
    else:
        w = x.clone().requires_grad_(True)
        out = hb.call_jax(lambda a: a * a, w)
        out.sum().backward()
        assert out.requires_grad
        close(w.grad, 2 * x)
        return
    for _ in range(2):
        close(call(), ref)
    if kind == "strided":
        assert hb.last_receipt().input_copies == 1


def test_device_and_contiguity_are_checked_on_every_call(gen):
    f = lambda a: a + 1  # noqa: E731
    x = torch.randn(4, 4, generator=gen)
    hb.call_jax(f, x)
    # Same dtype and shape, but strided: must not be read as if dense.
    y = torch.randn(4, 8, generator=gen)[:, ::2]
    close(hb.call_jax(f, y), y + 1)
    assert hb.last_receipt().input_copies == 1
    with pytest.raises(hb.ArgumentError, match="device meta"):
        hb.call_jax(f, torch.empty(4, 4, device="meta"))


def test_x64_flag_is_part_of_the_key(gen):
    f = lambda a: a + jnp.arange(3)  # int32 or int64 constant, by the flag  # noqa: E731
    x = torch.arange(3, dtype=torch.int32)
    assert hb.call_jax(f, x).dtype == torch.int32
    with jax.enable_x64(True):
        assert hb.call_jax(f, x).dtype == torch.int64
    assert hb.call_jax(f, x).dtype == torch.int32


def test_entries_die_with_their_function(gen):
    x = torch.randn(3, generator=gen)

    def make():
        return lambda a: a * 5

    f = make()
    hb.call_jax(f, x)
    del f
    gc.collect()
    assert _native.fast_clear() == 0, "a dead function's entry outlived it"
    g = make()
    close(hb.call_jax(g, x), x * 5)
    assert _native.fast_clear() == 1


def test_registration_rejects_inconsistent_signatures(gen):
    x = torch.randn(2, generator=gen)
    exe, _ = _native.compile(jax.jit(lambda a: a).lower(jnp.zeros(2)).as_text())
    with pytest.raises(hb.ArgumentError, match="dtypes"):
        _native.fast_register(lambda a: a, False, [x.dtype], [], [(2,)], exe, None, (), "cpu")
    with pytest.raises(hb.ArgumentError, match="element type code"):
        _native.fast_register(lambda a: a, False, [x.dtype], [12345], [(2,)], exe, None, (), "cpu")
