"""`hlobridge.call_jax` on eager torch tensors: numerics, pytrees, dtypes,
zero-copy, caching, receipts and errors.

Inputs are fresh random tensors each run; the seed is printed in every
failure message (set HLOBRIDGE_TEST_SEED to replay). Tolerances: float32
elementwise results are compared with rtol=1e-5/atol=1e-6 against jax.jit
(jaxlib's XLA and the plugin's generate the same elementwise code) and
rtol=1e-4/atol=1e-5 against torch eager (different kernels); products are
compared with jax.jit within ``dot_atol(K)`` (the plugin runs them in
hlobridge's host GEMM kernels, jaxlib in Eigen's: a different summation
order, whose blocking also depends on the CPU's vector ISA); half precision
types with the tolerances given at each test.

Run:  .venv/bin/python -m pytest -W error tests/python/test_call_jax.py -q
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from hlobridge import _native

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype)


def close(a: torch.Tensor, b: object, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    b_t = b if isinstance(b, torch.Tensor) else torch.from_numpy(np.array(b))
    torch.testing.assert_close(a, b_t, rtol=rtol, atol=atol, msg=lambda m: f"seed={SEED}: {m}")


def dot_atol(k: int) -> float:
    """Absolute tolerance between two float32 products of length ``k`` of
    standard-normal entries summed in different orders: the worst-case
    rounding bound of recursive summation, k·2^-24·sum|x_i w_i|, with the
    sum taken at its expectation k·2/pi (about 4e-5 at k=32; observed
    differences are far smaller). It depends only on k, not on the CPU's
    kernels."""
    return k * 2.0**-24 * k * (2 / np.pi)


def jax_ref(fn, *args, **kwargs):
    """jax.jit(fn) on numpy copies of the torch inputs, outputs as numpy
    (x64 enabled when an input is 64-bit, as call_jax does)."""
    tensors = [t for t in jax.tree_util.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    x64 = any(t.dtype in (torch.float64, torch.int64, torch.complex128) for t in tensors)
    static = [k for k, v in kwargs.items() if not isinstance(v, torch.Tensor)]
    with jax.enable_x64(x64):
        a, kw = jax.tree_util.tree_map(
            lambda t: jnp.asarray(t.numpy()) if isinstance(t, torch.Tensor) else t, (args, kwargs))
        out = jax.jit(fn, static_argnames=static)(*a, **kw)
        return jax.tree_util.tree_map(np.asarray, out)


# --- numerics ---------------------------------------------------------------


def f_elementwise(x, y):
    return jnp.sin(x) * y + jnp.exp(-(x * x))


def test_elementwise_matches_jax_and_torch(gen):
    x, y = randn(gen, 7, 33), randn(gen, 7, 33)
    out = hb.call_jax(f_elementwise, x, y)
    assert isinstance(out, torch.Tensor) and out.shape == (7, 33) and out.dtype == torch.float32
    close(out, jax_ref(f_elementwise, x, y))
    close(out, torch.sin(x) * y + torch.exp(-(x * x)), rtol=1e-4, atol=1e-5)


def f_dense(x, w, b):
    return jnp.tanh(x @ w + b)


def test_matmul_matches_jax_and_torch(gen):
    x, w, b = randn(gen, 64, 32), randn(gen, 32, 16), randn(gen, 16)
    out = hb.call_jax(f_dense, x, w, b)
    close(out, jax_ref(f_dense, x, w, b), atol=dot_atol(32))
    close(out, torch.tanh(x @ w + b), rtol=1e-4, atol=dot_atol(32))


def test_pytrees_in_and_out(gen):
    def f(inp, *, scale, bias):
        a, (b, c) = inp["pair"], inp["rest"]
        return {"sum": a + b, "nested": [a * scale, (c.sum(), {"b": b + bias})], "none": None}

    inp = {"pair": randn(gen, 3, 4), "rest": (randn(gen, 3, 4), randn(gen, 5))}
    bias = randn(gen, 4)
    out = hb.call_jax(f, inp, scale=2.5, bias=bias)
    assert set(out) == {"sum", "nested", "none"} and out["none"] is None
    assert isinstance(out["nested"], list) and isinstance(out["nested"][1], tuple)
    a, b, c = inp["pair"], inp["rest"][0], inp["rest"][1]
    close(out["sum"], a + b)
    close(out["nested"][0], a * 2.5)
    close(out["nested"][1][0], c.sum(), rtol=1e-5, atol=1e-5)
    close(out["nested"][1][1]["b"], b + bias)
    r = hb.last_receipt()
    assert r is not None and r.segments[0].num_inputs == 4 and r.segments[0].num_outputs == 4


def test_static_scalars_are_part_of_the_key(gen):
    x = randn(gen, 6)

    def f(x, k):
        return x * k

    close(hb.call_jax(f, x, 2.0), x * 2.0)
    close(hb.call_jax(f, x, 3.0), x * 3.0)
    # 1, 1.0 and True hash equal but are different static values
    assert hb.call_jax(lambda x, k: x + k, torch.arange(3, dtype=torch.int32), 1).dtype == torch.int32
    xi = torch.arange(3, dtype=torch.int32)
    out_f = hb.call_jax(lambda x, k: x.astype(jnp.float32) / k if isinstance(k, float) else x // k, xi, 2.0)
    out_i = hb.call_jax(lambda x, k: x.astype(jnp.float32) / k if isinstance(k, float) else x // k, xi, 2)
    assert out_f.dtype == torch.float32 and out_i.dtype == torch.int32


@pytest.mark.parametrize(
    "dtype,rtol,atol",
    [
        (torch.bfloat16, 1e-2, 1e-2),
        (torch.float16, 1e-3, 1e-3),
        (torch.float64, 1e-12, 1e-12),
        (torch.complex64, 1e-5, 1e-6),
    ],
)
def test_float_dtypes(gen, dtype, rtol, atol):
    x, y = randn(gen, 17, dtype=dtype), randn(gen, 17, dtype=dtype)

    def f(x, y):
        return x * y + x, (x - y).sum()

    p, s = hb.call_jax(f, x, y)
    assert p.dtype == dtype and s.dtype == dtype
    ref = jax_ref(f, x.to(torch.float64 if not dtype.is_complex else dtype),
                  y.to(torch.float64 if not dtype.is_complex else dtype))
    close(p, torch.from_numpy(np.array(ref[0])).to(dtype), rtol=rtol, atol=atol)
    close(s.to(torch.float64 if not dtype.is_complex else dtype),
          torch.from_numpy(np.array(ref[1])).to(s.dtype if dtype.is_complex else torch.float64),
          rtol=rtol, atol=atol * 17)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_int_dtypes_exact(gen, dtype):
    lo, hi = (0, 100) if dtype == torch.uint8 else (-50, 50)
    x = torch.randint(lo, hi, (9, 4), generator=gen, dtype=dtype)
    y = torch.randint(1, 10, (9, 4), generator=gen, dtype=dtype)
    q, r, m = hb.call_jax(lambda x, y: (x // y, x % y, jnp.max(x, axis=0)), x, y)
    assert q.dtype == r.dtype == m.dtype == dtype
    assert torch.equal(q, torch.div(x, y, rounding_mode="floor"))
    assert torch.equal(r, torch.remainder(x, y))
    assert torch.equal(m, x.max(dim=0).values)


def test_bool_in_and_out(gen):
    x = randn(gen, 10)
    mask = x > 0
    out, cnt = hb.call_jax(lambda x, m: (jnp.where(m, x, 0.0), ~m), x, mask)
    close(out, torch.where(mask, x, torch.zeros(())))
    assert cnt.dtype == torch.bool and torch.equal(cnt, ~mask)


def test_scalar_and_empty_tensors(gen):
    s = torch.tensor(3.0)
    e = torch.zeros(0, 5)
    a, b = hb.call_jax(lambda s, e: (s * 2, e + 1), s, e)
    assert a.shape == () and float(a) == 6.0
    assert b.shape == (0, 5)


# --- zero-copy --------------------------------------------------------------


def test_outputs_alias_pjrt_buffers(gen):
    x = randn(gen, 32, 32)
    a, b = hb.call_jax(lambda x: (x + 1, x.T @ x), x)
    r = hb.last_receipt()
    assert r is not None
    assert (a.data_ptr(), b.data_ptr()) == r.output_pointers
    assert a.data_ptr() != x.data_ptr()
    # the outputs stay valid after their executable is dropped from every cache
    hb.clear_cache()
    gc.collect()
    close(a, x + 1)
    close(b, x.T @ x, rtol=1e-4, atol=1e-4)


def test_aligned_inputs_are_views(gen):
    x, y = randn(gen, 256), randn(gen, 256)
    assert x.data_ptr() % _native.VIEW_ALIGNMENT == 0 and y.data_ptr() % _native.VIEW_ALIGNMENT == 0
    before = hb.stats()
    out = hb.call_jax(lambda x, y: x * y, x, y)
    after = hb.stats()
    r = hb.last_receipt()
    assert r is not None and (r.input_views, r.input_copies) == (2, 0)
    assert after["input_views"] - before["input_views"] == 2
    assert after["input_copies"] == before["input_copies"]
    close(out, x * y)


def test_input_memory_is_read_in_place_and_released(gen):
    x = randn(gen, 64)
    base = sys.getrefcount(x)
    hb.call_jax(lambda x: x * 2, x)
    # the view's on_delete callback held a reference while PJRT used the memory
    assert sys.getrefcount(x) == base


def test_unaligned_input_is_copied_and_counted(gen):
    big = randn(gen, 65)
    x = big[1:]  # 4 bytes past a 64-byte boundary
    assert x.is_contiguous() and x.data_ptr() % _native.VIEW_ALIGNMENT != 0
    before = hb.stats()
    out = hb.call_jax(lambda x: x + 1, x)
    after = hb.stats()
    r = hb.last_receipt()
    assert r is not None and (r.input_views, r.input_copies) == (0, 1)
    assert after["input_copies"] - before["input_copies"] == 1
    assert after["input_copied_bytes"] - before["input_copied_bytes"] == 64 * 4
    close(out, x + 1)


def test_non_contiguous_input_is_copied_explicitly(gen):
    x = randn(gen, 8, 5).T
    assert not x.is_contiguous()
    before = hb.stats()["contiguous_copies"]
    out = hb.call_jax(lambda x: x * 3, x)
    assert hb.stats()["contiguous_copies"] == before + 1
    r = hb.last_receipt()
    assert r is not None and (r.input_views, r.input_copies) == (0, 1)
    close(out, x * 3)


def test_pt_to_jax_and_back_share_memory(gen):
    x = randn(gen, 16, 4)
    a = hb.pt_to_jax(x)
    assert a.unsafe_buffer_pointer() == x.data_ptr()
    back = hb.jax_to_pt(a)
    assert back.data_ptr() == x.data_ptr()
    close(back, x)


# --- caching and receipts ---------------------------------------------------


def _make_identical():
    def step(x):
        return jnp.cos(x) * 0.5 + x

    return step


def test_redefined_identical_function_hits_the_cache(gen):
    n = 40 + SEED % 50  # a shape no other test uses: the first call compiles
    x = randn(gen, n, 3)
    f1, f2 = _make_identical(), _make_identical()
    assert f1 is not f2
    hb.call_jax(f1, x)
    r1 = hb.last_receipt()
    assert r1 is not None and r1.cache == "miss" and r1.compile_time_s > 0
    out = hb.call_jax(f2, x)
    r2 = hb.last_receipt()
    assert r2 is not None and r2.cache == "content"
    assert r2.compiles == r1.compiles and r2.cache_hits == r1.cache_hits + 1
    assert r2.segments[0].fingerprint == r1.segments[0].fingerprint
    hb.call_jax(f2, x)
    r3 = hb.last_receipt()
    assert r3 is not None and r3.cache == "hit" and r3.lower_time_s == 0.0
    assert r3.compiles == r1.compiles and r3.cache_hits == r2.cache_hits + 1
    close(out, torch.cos(x) * 0.5 + x, rtol=1e-5, atol=1e-5)


def test_shape_change_recompiles(gen):
    f = _make_identical()
    hb.call_jax(f, randn(gen, 3, 100 + SEED % 50))
    r1 = hb.last_receipt()
    hb.call_jax(f, randn(gen, 3, 200 + SEED % 50))
    r2 = hb.last_receipt()
    assert r1 is not None and r2 is not None
    assert r2.cache == "miss" and r2.compiles == r1.compiles + 1


def test_receipt_fields(gen):
    x = randn(gen, 4)
    hb.call_jax(f_elementwise, x, x)
    r = hb.last_receipt()
    assert r is not None
    assert r.platform == "cpu" == hb.runtime().platform
    assert isinstance(r.compiles, int) and isinstance(r.cache_hits, int)
    assert isinstance(r.segments, list) and len(r.segments) == 1
    seg = r.segments[0]
    assert (seg.name, seg.producer) == ("f_elementwise", "jax")
    assert r.run_time_s > 0 and r.total_time_s >= r.run_time_s


def test_receipts_are_per_thread(gen):
    x = randn(gen, 4)
    seen = []

    def worker():
        seen.append(hb.last_receipt())
        hb.call_jax(lambda x: x - 1, x)
        seen.append(hb.last_receipt())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen[0] is None and seen[1] is not None


def test_concurrent_calls_from_threads(gen):
    xs = [randn(gen, 128, 128) for _ in range(4)]
    results: dict[int, torch.Tensor] = {}

    def f(x):
        return x @ x + 1.0

    hb.call_jax(f, xs[0])  # compile once up front

    def worker(i):
        for _ in range(5):
            results[i] = hb.call_jax(f, xs[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        close(results[i], x @ x + 1.0, rtol=1e-4, atol=1e-3)


# --- a torch model trained with a JAX optimizer -----------------------------


def adam_update(params, grads, m, v, t, *, lr, b1=0.9, b2=0.999, eps=1e-8):
    t = t + 1.0
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    c1, c2 = 1 - b1**t, 1 - b2**t
    params = jax.tree.map(lambda p, m, v: p - (lr / c1) * m / (jnp.sqrt(v) / jnp.sqrt(c2) + eps),
                          params, m, v)
    return params, m, v, t


def sgd_momentum_update(params, grads, buf, *, lr, momentum):
    buf = jax.tree.map(lambda b, g: momentum * b + g, buf, grads)
    return jax.tree.map(lambda p, b: p - lr * b, params, buf), buf


def make_mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))


def train_grads(model, x, y):
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def test_mlp_with_jax_adam_matches_torch_adam(gen):
    """Six Adam steps through ``call_jax``, each judged against torch's own
    ``Adam`` taking the same step from the same state (the JAX side's
    parameters, gradients, moments and step count loaded into a fresh
    optimizer). Judging from the same state keeps the comparison exact on
    every CPU: six steps compared against a separately trained copy would
    be elementwise on a chaotic quantity (Adam moves a weight whose
    gradient is near 0 by about ``lr``, in whichever direction rounding
    gives that gradient)."""
    jax_model = make_mlp(SEED)
    params = dict(jax_model.named_parameters())
    m = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    t = torch.zeros(())
    compiles0 = None
    for step in range(6):
        x, y = randn(gen, 16, 12), randn(gen, 16, 3)
        grads = train_grads(jax_model, x, y)
        ref = {n: p.detach().clone().requires_grad_() for n, p in params.items()}
        ref_opt = torch.optim.Adam(ref.values(), lr=1e-2)
        if step:
            ref_opt.load_state_dict({"state": {i: {"step": t.clone(), "exp_avg": m[n].clone(),
                                                   "exp_avg_sq": v[n].clone()}
                                               for i, n in enumerate(ref)},
                                     "param_groups": ref_opt.state_dict()["param_groups"]})
        for n, q in ref.items():
            q.grad = grads[n].clone()
        ref_opt.step()
        m_prev, v_prev = m, v
        with torch.no_grad():
            new, m, v, t = hb.call_jax(adam_update, params, grads, m, v, t, lr=1e-2)
            for n, p in params.items():
                p.copy_(new[n])
        r = hb.last_receipt()
        assert r is not None
        if step == 0:
            compiles0 = r.compiles
        else:
            assert r.cache == "hit" and r.compiles == compiles0, "one compilation for all steps"
        state = ref_opt.state_dict()["state"]
        for i, (n, q) in enumerate(ref.items()):
            # The JAX side computes the bias corrections 1 - b**t in float32
            # (torch: in float64); 1 - 0.999 is 1.3e-5 off there, relative,
            # which moves an update of about lr = 1e-2 by ~1e-7: atol lr * 5e-5.
            close(params[n].detach(), q.detach(), rtol=1e-6, atol=5e-7)
            # the moments: a few float32 roundings of the two terms summed
            # (their result can cancel to near 0, so relative to the terms)
            g = grads[n]
            moments = ((m[n], state[i]["exp_avg"], 0.9 * m_prev[n].abs() + 0.1 * g.abs()),
                       (v[n], state[i]["exp_avg_sq"], 0.999 * v_prev[n] + 0.001 * g * g))
            for got, want, terms in moments:
                bound = 4 * torch.finfo(torch.float32).eps * terms + 1e-30
                assert ((got - want).abs() <= bound).all(), (n, (got - want).abs().max())
    assert float(t) == 6.0


def test_mlp_with_jax_sgd_matches_torch_sgd_params_alias_outputs(gen):
    jax_model, ref_model = make_mlp(SEED + 1), make_mlp(SEED + 1)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=5e-2, momentum=0.9)
    buf = {n: torch.zeros_like(p) for n, p in jax_model.named_parameters()}
    for _ in range(5):
        x, y = randn(gen, 8, 12), randn(gen, 8, 3)
        grads = train_grads(jax_model, x, y)
        train_grads(ref_model, x, y)
        with torch.no_grad():
            params = {n: p.detach() for n, p in jax_model.named_parameters()}
            new, buf = hb.call_jax(sgd_momentum_update, params, grads, buf, lr=5e-2, momentum=0.9)
            ptrs = hb.last_receipt().output_pointers  # type: ignore[union-attr]
            for n, p in jax_model.named_parameters():
                p.data = new[n]  # the parameter now lives in the PJRT buffer
        ref_opt.step()
        assert {p.data_ptr() for p in jax_model.parameters()} <= set(ptrs)
        for p, q in zip(jax_model.parameters(), ref_model.parameters()):
            close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)


# --- autograd ---------------------------------------------------------------


def jax_block(x, w, b, *, eps):
    """dense + layer norm + gelu, in JAX"""
    h = x @ w + b
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return jax.nn.gelu((h - mu) / jnp.sqrt(var + eps), approximate=False)


def torch_block(x, w, b, *, eps):
    h = x @ w + b
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(h, h.shape[-1:], eps=eps))


def test_grads_flow_through_call_jax_like_torch(gen):
    torch.manual_seed(SEED)
    lin1, lin2 = torch.nn.Linear(10, 24), torch.nn.Linear(16, 1)
    w, b = torch.nn.Parameter(randn(gen, 24, 16) * 0.3), torch.nn.Parameter(randn(gen, 16) * 0.1)
    x, y = randn(gen, 8, 10), randn(gen, 8, 1)

    def loss_of(block):
        return torch.nn.functional.mse_loss(lin2(block(lin1(x), w, b, eps=1e-5)), y)

    params = [lin1.weight, lin1.bias, w, b, lin2.weight, lin2.bias]
    ref = torch.autograd.grad(loss_of(torch_block), params)
    loss = loss_of(lambda *a, **k: hb.call_jax(jax_block, *a, **k))
    r = hb.last_receipt()
    assert r is not None and r.segments[0].name == "jax_block (vjp forward)"
    got = torch.autograd.grad(loss, params)
    r = hb.last_receipt()
    assert r is not None and r.segments[0].name == "jax_block (vjp backward)"
    close(loss, loss_of(torch_block), rtol=1e-4, atol=1e-5)
    for g_got, g_ref in zip(got, ref):
        close(g_got, g_ref, rtol=1e-3, atol=1e-5)
    # the second step hits the caches for both programs
    torch.autograd.grad(loss_of(lambda *a, **k: hb.call_jax(jax_block, *a, **k)), params)
    r = hb.last_receipt()
    assert r is not None and r.cache == "hit"


def test_only_inputs_that_require_grad_are_differentiated(gen):
    x = randn(gen, 5).requires_grad_()
    c = randn(gen, 5)  # no grad
    k = torch.arange(5)  # integer: no grad

    def f(x, c, k):
        return jnp.sin(x) * c + k, (x > 0).sum()

    out, npos = hb.call_jax(f, x, c, k)
    assert out.requires_grad and not npos.requires_grad and npos.dtype == torch.int64
    (gx,) = torch.autograd.grad(out.sum(), [x])
    close(gx, torch.cos(x.detach()) * c)
    with torch.no_grad():
        plain = hb.call_jax(f, x, c, k)[0]
    assert not plain.requires_grad


def test_unused_outputs_get_zero_cotangents(gen):
    x = randn(gen, 3, 4).requires_grad_()
    a, b = hb.call_jax(lambda x: (x * 2, jnp.exp(x)), x)
    (gx,) = torch.autograd.grad(a.sum(), [x])
    close(gx, torch.full((3, 4), 2.0))
    del b


# --- errors -----------------------------------------------------------------


def test_error_hierarchy():
    for name in ["ParseError", "InvalidIrError", "StitchError", "FileError", "PluginError",
                 "PluginNotFoundError", "PluginLoadError", "PjrtError", "CompileError",
                 "ArgumentError", "DtypeError", "BufferDeletedError"]:
        assert issubclass(getattr(hb, name), hb.BridgeError), name
    assert issubclass(hb.FileError, OSError)
    assert issubclass(hb.CompileError, hb.PjrtError)
    assert issubclass(hb.DtypeError, hb.ArgumentError)
    assert issubclass(hb.PluginNotFoundError, hb.PluginError)


def test_unsupported_dtype_raises_dtype_error():
    x = torch.zeros(4, dtype=torch.float8_e4m3fn)
    with pytest.raises(hb.DtypeError, match="unsupported tensor dtype torch.float8_e4m3fn"):
        hb.call_jax(lambda x: x, x)


def test_wrong_device_raises_argument_error():
    x = torch.zeros(4, device="meta")
    with pytest.raises(hb.ArgumentError, match=r"device meta.*\.cpu\(\)"):
        hb.call_jax(lambda x: x + 1, x)


def test_complex_requires_grad_raises_argument_error(gen):
    x = randn(gen, 4, dtype=torch.complex64).requires_grad_()
    with pytest.raises(hb.ArgumentError, match="complex"):
        hb.call_jax(lambda x: x * 2, x)
    with torch.no_grad():
        close(hb.call_jax(lambda x: x * 2, x), x.detach() * 2)


def test_unhashable_static_argument_raises_argument_error(gen):
    with pytest.raises(hb.ArgumentError, match="torch.from_numpy"):
        hb.call_jax(lambda x, a: x + a, randn(gen, 3), np.ones(3, np.float32))


def test_unsupported_output_dtype_raises_dtype_error(gen):
    with pytest.raises(hb.DtypeError, match="output 0"):
        hb.call_jax(lambda x: x.astype(jnp.float8_e4m3fn), randn(gen, 3))


def test_native_compile_error_carries_function_and_code():
    with pytest.raises(hb.CompileError) as info:
        _native.compile("module {\n  func.func @main() {\n    garbage\n  }\n}\n")
    assert info.value.function == "PJRT_Client_Compile"
    assert isinstance(info.value.code, str)


def test_native_execute_argument_errors(gen):
    exe, _ = _native.compile(jax.jit(lambda a: a + 1).lower(jnp.zeros(4, jnp.float32)).as_text())
    x = randn(gen, 4)
    f32 = _native.ELEMENT_TYPES["f32"]
    with pytest.raises(hb.ArgumentError, match="expects 1, got 2"):
        _native.execute(exe, [x.data_ptr()] * 2, [(4,)] * 2, [f32] * 2, [x, x])
    with pytest.raises(hb.ArgumentError, match="shape mismatch"):
        _native.execute(exe, [x.data_ptr()], [(2,)], [f32], [x])
    with pytest.raises(hb.DtypeError, match="dtype mismatch"):
        _native.execute(exe, [x.data_ptr()], [(4,)], [_native.ELEMENT_TYPES["i32"]], [x])
    with pytest.raises(hb.ArgumentError, match="same length"):
        _native.execute(exe, [x.data_ptr()], [], [f32], [x])


def test_missing_plugin_raises_plugin_not_found_error(tmp_path):
    code = ("import hlobridge._native as n\n"
            "try:\n    n.runtime()\n"
            "except n.PluginNotFoundError as e:\n    print('OK', e)\n")
    env = dict(os.environ, HLOBRIDGE_PLUGIN=str(tmp_path / "nope.so"))
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK PJRT plugin not found") and "nope.so" in out.stdout


class _PlainSubclass(torch.Tensor):
    """A user tensor subclass holding real data (not a tracer's)."""


def test_tensor_subclass_with_real_data_runs(gen):
    """Only fake/proxied tensors are traced into an ``hlobridge::call_jax`` op
    (``jax_bridge._is_tracing``); a subclass holding real data runs."""
    x = randn(gen, 8)
    out = hb.call_jax(lambda a: a * 3 + 1, x.as_subclass(_PlainSubclass))
    close(out, x * 3 + 1)
