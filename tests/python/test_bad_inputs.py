"""Unusual and bad inputs at ``hlobridge.call_jax``: one test per row of the
table in docs/reliability.md. Every row gets a correct result (compared with
torch eager or jax.jit on fresh random inputs) or a named ``BridgeError``
subclass whose message says what to do; an error raised by the user's own
function keeps its type and gains a note from hlobridge. After every error the
next call must still work (``_next_call_works``).

Tolerances: float32/complex64 rtol=1e-5, atol=1e-6 (same XLA kernels as
jax.jit; torch eager for elementwise ops agrees to that); float64 exact-ish
1e-12; float8 conversions are exact.

Run:  .venv/bin/python -m pytest -W error tests/python/test_bad_inputs.py -q
"""

from __future__ import annotations

import os
import warnings

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import hlobridge as hb  # noqa: E402

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"seed={SEED}: {m}")


def affine(x):
    return x * 2 + 1


def _next_call_works(gen: torch.Generator) -> None:
    x = torch.randn(3, 5, generator=gen)
    close(hb.call_jax(lambda v: jnp.sin(v) - v, x), torch.sin(x) - x)


# -- layouts and shapes -------------------------------------------------------

@pytest.mark.parametrize("view", ["transpose", "step", "expand", "offset"])
def test_strided_views_are_made_dense(gen, view):
    base = torch.randn(9, 8, generator=gen)
    x = {"transpose": lambda: base.t(), "step": lambda: base[::2, 1::3],
         "expand": lambda: base[:1].expand(5, 8),
         "offset": lambda: base.reshape(-1)[1:65]}[view]()
    before = hb.stats()["contiguous_copies"] + hb.stats()["input_copies"]
    close(hb.call_jax(affine, x), affine(x))
    assert hb.stats()["contiguous_copies"] + hb.stats()["input_copies"] > before


@pytest.mark.parametrize("shape", [(0,), (0, 3), (4, 0, 2)])
def test_zero_size(gen, shape):
    x = torch.randn(*shape, generator=gen)
    y = hb.call_jax(affine, x)
    assert y.shape == x.shape and y.dtype == x.dtype
    s = hb.call_jax(lambda v: jnp.sum(v, axis=0), x)
    close(s, x.sum(0))


def test_zero_dim(gen):
    x = torch.randn((), generator=gen)
    y = hb.call_jax(affine, x)
    assert y.shape == ()
    close(y, affine(x))
    close(hb.call_jax(affine, x), affine(x))  # twice: the native fast path too


def test_rank_8(gen):
    x = torch.randn(*([2] * 7 + [3]), generator=gen)
    close(hb.call_jax(lambda v: jnp.transpose(v, (7, 6, 5, 4, 3, 2, 1, 0)) * 3, x),
          x.permute(7, 6, 5, 4, 3, 2, 1, 0) * 3)


# -- dtypes ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_is_a_dtype_error_with_a_working_workaround(gen, name):
    dt = getattr(torch, name)
    x = torch.randn(4, 6, generator=gen).to(dt)
    with pytest.raises(hb.DtypeError, match="bitcast_convert_type") as e:
        hb.call_jax(affine, x)
    assert name in str(e.value)
    jdt = getattr(jnp, name)
    y = hb.call_jax(lambda u: jax.lax.bitcast_convert_type(u, jdt).astype(jnp.float32),
                    x.view(torch.uint8))
    close(y, x.float(), rtol=0, atol=0)
    with pytest.raises(hb.DtypeError, match=f"output 0 has dtype {name}"):
        hb.call_jax(lambda v: v.astype(jdt), torch.randn(3, generator=gen))
    _next_call_works(gen)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex(gen, dtype):
    x = torch.randn(5, 3, dtype=dtype, generator=gen)
    w = torch.randn(5, 3, dtype=dtype, generator=gen)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.complex64 else dict(rtol=1e-12, atol=1e-12)
    close(hb.call_jax(lambda a, b: a * b + jnp.conj(a), x, w), x * w + x.conj(), **tol)
    # lazy conjugate / negative views are resolved before the call
    close(hb.call_jax(affine, x.conj()), affine(x.conj().resolve_conj()), **tol)
    close(hb.call_jax(affine, torch.neg(x.conj())), affine(-x.conj().resolve_conj()), **tol)


def test_quantized_is_a_dtype_error(gen):
    q = torch.quantize_per_tensor(torch.randn(4, generator=gen), 0.1, 0, torch.quint8)
    with pytest.raises(hb.DtypeError, match="quint8"):
        hb.call_jax(affine, q)
    _next_call_works(gen)


# -- devices and layouts ------------------------------------------------------

def test_meta_tensor_is_an_argument_error(gen):
    with pytest.raises(hb.ArgumentError, match="meta"):
        hb.call_jax(affine, torch.empty(4, device="meta"))
    with pytest.raises(hb.ArgumentError, match="meta"):
        hb.call_jax(lambda a, b: a + b, torch.randn(4, generator=gen), torch.empty(4, device="meta"))
    _next_call_works(gen)


@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "nested", "nested_jagged"])
def test_sparse_and_nested_are_argument_errors(gen, kind):
    dense = torch.randn(4, 6, generator=gen)
    hb.call_jax(affine, dense)  # warm the fast path for this signature: the bad tensor must not slip through
    parts = [dense[0], dense[1, :3]]
    with warnings.catch_warnings():
        # torch's own "beta"/"prototype" notices when building these tensors
        warnings.filterwarnings("ignore", message=".*(beta state|prototype stage)", category=UserWarning)
        x = {"sparse_coo": lambda: dense.to_sparse(), "sparse_csr": lambda: dense.to_sparse_csr(),
             "nested": lambda: torch.nested.nested_tensor(parts),
             "nested_jagged": lambda: torch.nested.nested_tensor(parts, layout=torch.jagged)}[kind]()
    match = "nested" if kind.startswith("nested") else "to_dense"
    with pytest.raises(hb.ArgumentError, match=match):
        hb.call_jax(affine, x)
    _next_call_works(gen)


def test_xla_tensor_on_the_eager_path(gen):
    torch_xla = pytest.importorskip("torch_xla")
    dev = torch_xla.device()
    x = torch.randn(4, 6, generator=gen)
    y = hb.call_jax(affine, x.to(dev))
    assert y.device.type == "xla"
    close(y.cpu(), affine(x))
    with pytest.raises(hb.ArgumentError, match="same xla device"):
        hb.call_jax(lambda a, b: a + b, x.to(dev), x)
    _next_call_works(gen)


# -- autograd -------------------------------------------------------------------

def test_requires_grad_inside_no_grad(gen):
    x = torch.randn(4, 6, generator=gen, requires_grad=True)
    with torch.no_grad():
        y = hb.call_jax(affine, x)
        y2 = hb.call_jax(affine, x)  # again: may take the fast path now
    assert not y.requires_grad and not y2.requires_grad
    close(y, affine(x.detach()))
    close(y2, affine(x.detach()))
    # outside no_grad the same tensor is differentiated through jax.vjp
    z = hb.call_jax(lambda v: jnp.sum(jnp.sin(v)), x)
    z.backward()
    assert x.grad is not None
    close(x.grad, torch.cos(x.detach()))


# -- what the function returns ------------------------------------------------

def test_returns_none_and_numbers_like_jax_jit(gen):
    x = torch.randn(3, generator=gen)
    assert hb.call_jax(lambda v: None, x) is None
    i = hb.call_jax(lambda v: 3, x)
    j = np.asarray(jax.jit(lambda v: 3)(x.numpy()))
    assert i.shape == () and i.item() == 3 and str(i.dtype).endswith(str(j.dtype))
    f = hb.call_jax(lambda v: 2.5, x)
    assert f.shape == () and f.item() == 2.5
    out = hb.call_jax(lambda v: [v * 2, 1, None], x)
    close(out[0], x * 2)
    assert out[1].item() == 1 and out[2] is None


@pytest.mark.parametrize("ret,where", [
    (lambda v: "hello", "returned a str, "),
    (lambda v: {"a": v, "b": "text"}, "['b']"),
    (lambda v: (v, object()), "[1]"),
])
def test_non_array_results_are_output_errors(gen, ret, where):
    x = torch.randn(3, generator=gen)
    with pytest.raises(hb.OutputError) as e:
        hb.call_jax(ret, x)
    assert where in str(e.value) and "not an array" in str(e.value)
    assert isinstance(e.value, hb.BridgeError)
    _next_call_works(gen)


def test_user_exception_keeps_its_type_with_a_note(gen):
    class Boom(ValueError):
        pass

    def exploding(v):
        raise Boom("user boom")

    x = torch.randn(2, 3, generator=gen)
    with pytest.raises(Boom, match="user boom") as e:
        hb.call_jax(exploding, x)
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "hlobridge.call_jax" in notes and "exploding" in notes and "[2, 3]" in notes
    # nothing was cached for the failed signature: a fixed function works
    close(hb.call_jax(affine, x), affine(x))
    _next_call_works(gen)


# -- the native layer directly -------------------------------------------------

def test_native_execute_rejects_inconsistent_arguments(gen):
    from hlobridge import _native

    text = ("module { func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {"
            " return %a : tensor<4xf32> } }")
    exe, _ = _native.compile(text)
    a = torch.randn(4, generator=gen)
    f32 = _native.ELEMENT_TYPES["f32"]
    with pytest.raises(hb.ArgumentError, match="same length"):
        _native.execute(exe, [a.data_ptr()], [[4]], [f32, f32], [a])
    with pytest.raises(hb.ArgumentError, match="null data pointer"):
        _native.execute(exe, [0], [[4]], [f32], [a])
    with pytest.raises(hb.ArgumentError):
        _native.execute(exe, [a.data_ptr()], [[-4]], [f32], [a])
    with pytest.raises(hb.BridgeError):
        _native.execute(exe, [], [], [], [])
    caps = _native.execute(exe, [a.data_ptr()], [[4]], [f32], [a])[0]
    close(torch.from_dlpack(caps[0]), a)
