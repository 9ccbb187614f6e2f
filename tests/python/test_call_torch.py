"""``hb.call_torch`` / ``hb.torch_module``: torch functions and modules inside
JAX programs (``docs/call_torch.md``).

Every check compares with eager torch on fresh random inputs: a fresh seed
per process, printed with a failure (``HLOBRIDGE_TEST_SEED`` replays one);
the numbers must hold for any draw. Tolerances: forward outputs and
gradients of the small float32 modules within rtol=1e-5/atol=1e-5 of eager
float32 (XLA and torch sum in different orders; measured errors are ~1e-7);
the transformer block within rtol=1e-4/atol=1e-5 (softmax and LayerNorm over
64 features); the AdamW run's parameters within rtol=1e-4/atol=1e-5 after 3
steps, with ``eps=1e-3`` on both sides (with the default 1e-8 a near-zero
gradient moves its parameter by about ``lr`` whatever its last bits are, so
an elementwise check would be a coin toss between CPUs).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from hlobridge._src import call_torch as ct
from jax_compare import SEED

TOL = dict(rtol=1e-5, atol=1e-5)
BLOCK_TOL = dict(rtol=1e-4, atol=1e-5)


_RNG = np.random.default_rng(SEED)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Module initialisations draw from torch's generator: seeded too."""
    torch.manual_seed(SEED)


def rand(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


def close(got: Any, want: torch.Tensor, tol: dict[str, float]) -> None:
    torch.testing.assert_close(
        torch.from_numpy(np.array(got)), want.detach(), **tol, msg=lambda m: f"seed={SEED}: {m}"
    )


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def conv_bn() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 4))


def block() -> torch.nn.Module:
    return torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)


def torch_grads(model: torch.nn.Module, loss: Any, *xs: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss(model(*xs)).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}  # type: ignore[union-attr]


# -- forward ----------------------------------------------------------------------

@pytest.mark.parametrize("make,shape,tol", [(mlp, (5, 16), TOL), (conv_bn, (2, 3, 8, 8), TOL),
                                            (block, (2, 6, 64), BLOCK_TOL)],
                         ids=["mlp", "conv_bn", "transformer_block"])
def test_forward_inside_jit(make: Any, shape: tuple[int, ...], tol: dict[str, float]) -> None:
    model = make().eval()
    apply, params = hb.torch_module(model)
    x = rand(*shape)
    got = jax.jit(lambda p, a: jnp.tanh(apply(p, a)))(params, x)
    close(got, torch.tanh(model(torch.from_numpy(x))), tol)
    # the module itself as the function: its parameters are constants
    got = jax.jit(lambda a: hb.call_torch(model, a) * 2.0)(x)
    close(got, model(torch.from_numpy(x)) * 2.0, tol)


def test_params_share_memory_with_the_module() -> None:
    """``torch_module``'s params are DLPack views of the module's tensors
    (fresh torch CPU allocations are aligned, so JAX takes them as they are)."""
    model = mlp()
    _, params = hb.torch_module(model)
    for n, p in model.named_parameters():
        assert params[n].unsafe_buffer_pointer() == p.data_ptr(), n


def test_eager_call_outside_jit() -> None:
    model = mlp()
    x = rand(3, 16)
    close(hb.call_torch(model, x), model(torch.from_numpy(x)), TOL)
    # pytrees in and out, static arguments
    out = hb.call_torch(lambda d, k: {"y": d["a"] * k, "z": (d["b"].sum(),)},
                        {"a": x, "b": x}, 3.0)
    close(out["y"], torch.from_numpy(x) * 3.0, TOL)
    close(out["z"][0], torch.from_numpy(x).sum(), dict(rtol=1e-5, atol=1e-4))


# -- gradients ----------------------------------------------------------------------

@pytest.mark.parametrize("make,shape,tol", [(mlp, (5, 16), TOL), (conv_bn, (4, 3, 8, 8), TOL),
                                            (block, (2, 6, 64), BLOCK_TOL)],
                         ids=["mlp", "conv_bn_train", "transformer_block"])
def test_grad_matches_torch_autograd(make: Any, shape: tuple[int, ...],
                                     tol: dict[str, float]) -> None:
    model = make().train()
    apply, params = hb.torch_module(model)
    # jax.grad wants floating leaves: the buffers (BatchNorm's integer
    # num_batches_tracked) go in as a second, non-differentiated argument
    buffers = {n: params.pop(n) for n in apply.buffer_names}  # type: ignore[attr-defined]
    x = rand(*shape)

    def loss(p: Any, b: Any, a: Any) -> Any:
        return jnp.sum(jnp.sin(apply({**p, **b}, a)))

    val, grads = jax.jit(jax.value_and_grad(loss))(params, buffers, x)
    want = torch_grads(model, lambda o: torch.sin(o).sum(), torch.from_numpy(x))
    close(val, torch.sin(model(torch.from_numpy(x))).sum(), dict(rtol=1e-4, atol=1e-4))
    assert set(want) <= set(grads)
    for n, g in want.items():
        close(grads[n], g, tol)


def test_grad_wrt_input() -> None:
    x = rand(4, 5)
    g = jax.jit(jax.grad(lambda a: hb.call_torch(lambda t: (t.sin() * t).sum(), a)))(x)
    t = torch.from_numpy(x).requires_grad_()
    (t.sin() * t).sum().backward()
    close(g, t.grad, TOL)  # type: ignore[arg-type]


# -- BatchNorm buffers ------------------------------------------------------------

def test_batchnorm_buffers_returned() -> None:
    model = conv_bn().train()
    apply, params = hb.torch_module(model)
    step = jax.jit(lambda p, a: apply(p, a, mutable=True))
    for _ in range(2):
        x = rand(4, 3, 8, 8)
        out, new = step(params, x)
        params = {**params, **new}
        close(out, model(torch.from_numpy(x)), TOL)
    for n, b in model.named_buffers():
        if b.dtype.is_floating_point:
            close(params[n], b, TOL)
        else:
            assert int(params[n]) == int(b) == 2
    # eval mode: the running statistics are used and nothing changes
    model.eval()
    x = rand(2, 3, 8, 8)
    close(jax.jit(apply)(params, x), model(torch.from_numpy(x)), TOL)


# -- vmap -----------------------------------------------------------------------------

def test_vmap_recaptures_at_batched_shape() -> None:
    model = mlp()
    apply, params = hb.torch_module(model)
    xs = rand(3, 5, 16)
    got = jax.jit(jax.vmap(apply, in_axes=(None, 0)))(params, xs)
    close(got, model(torch.from_numpy(xs)), TOL)
    # per-example gradients: vmap of grad
    per = jax.jit(jax.vmap(jax.grad(lambda p, a: jnp.sum(apply(p, a) ** 2)),
                           in_axes=(None, 0)))(params, xs)
    for i in range(3):
        want = torch_grads(model, lambda o: (o ** 2).sum(), torch.from_numpy(xs[i]))
        for n, g in want.items():
            close(per[n][i], g, TOL)


# -- caching ---------------------------------------------------------------------------

def test_capture_cached_per_function_and_signature() -> None:
    model = mlp()
    apply, params = hb.torch_module(model)
    x = rand(5, 16)
    apply(params, x)
    before = ct.stats()
    apply(params, rand(5, 16))  # same signature: no trace
    jax.jit(apply)(params, rand(5, 16))  # inside jit too
    after = ct.stats()
    assert after["traces"] == before["traces"]
    assert after["hits"] >= before["hits"] + 2
    apply(params, rand(7, 16))  # new shape: one more capture
    assert ct.stats()["traces"] == before["traces"] + 1
    # a function defined again with the same body: traced, not lowered again

    def make() -> Any:
        return lambda t: torch.tanh(t) * 3

    hb.call_torch(make(), x)
    lowered = ct.stats()["lowerings"]
    hb.call_torch(make(), x)
    assert ct.stats()["lowerings"] == lowered


def test_function_and_module_are_not_kept_alive() -> None:
    import gc
    import weakref

    model = mlp()
    apply, params = hb.torch_module(model)
    jax.jit(apply)(params, rand(2, 16))

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    hb.call_torch(fn, rand(3))
    refs = [weakref.ref(model), weakref.ref(fn)]
    del model, apply, params, fn
    gc.collect()
    assert [r() for r in refs] == [None, None]


# -- fusion across the seam -------------------------------------------------------------

def _fusions(hlo: str) -> dict[str, str]:
    """Fused computations of an optimized HLO module: name -> body."""
    comps = re.split(r"\n(?=%\S+ \()", hlo)
    return {c.split(" ", 1)[0]: c for c in comps if c.startswith("%fused")}


def test_fusion_across_the_seam() -> None:
    """The torch segment is inlined: no call and no custom call remain, one
    fusion holds the torch sigmoid (``logistic``, lowered as exponentials)
    and the JAX ``tanh`` after it, and the program has fewer fusions than
    the torch and JAX parts compiled apart."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Sigmoid())
    x = rand(8, 16)

    def both(a: Any) -> Any:
        return jnp.tanh(hb.call_torch(model, a) * 3.0)

    hlo = jax.jit(both).lower(x).compile().as_text()
    assert "custom-call" not in hlo and "call(" not in hlo
    fused = _fusions(hlo)
    seam = [b for b in fused.values()
            if "call_exported" in b and re.search(r"jit\(both\)/(tanh|mul)", b)
            and "exponential" in b]
    assert seam, hlo
    torch_alone = jax.jit(lambda a: hb.call_torch(model, a)).lower(x).compile().as_text()
    jax_alone = jax.jit(lambda y: jnp.tanh(y * 3.0)).lower(rand(8, 32)).compile().as_text()
    assert len(fused) < len(_fusions(torch_alone)) + len(_fusions(jax_alone))
    close(jax.jit(both)(x), torch.tanh(model(torch.from_numpy(x)) * 3.0), TOL)


# -- composition with call_jax -------------------------------------------------------------

def test_call_jax_of_call_torch() -> None:
    model = mlp()
    x = torch.randn(4, 16)
    fn = lambda a: jnp.tanh(hb.call_torch(model, a))  # noqa: E731
    out = hb.call_jax(fn, x)
    torch.testing.assert_close(out, torch.tanh(model(x)).detach(), **TOL)
    # one program, inputs used in place: the receipt of a second call
    before = hb.last_receipt().compiles  # type: ignore[union-attr]
    x2 = torch.randn(4, 16)
    out = hb.call_jax(fn, x2)
    receipt = hb.last_receipt()
    assert receipt is not None and receipt.compiles == before and receipt.input_copies == 0
    assert len(receipt.segments) == 1
    torch.testing.assert_close(out, torch.tanh(model(x2)).detach(), **TOL)


def test_call_torch_of_call_jax() -> None:
    """A torch function calling JAX inside a JAX program: the JAX piece is
    stitched into the capture (the backend's partitioner), gradients flow
    through its registered VJP."""
    x = rand(3, 5)

    def torch_fn(t: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(jnp.sin, t) * 2 + t

    got = jax.jit(lambda a: hb.call_torch(torch_fn, a))(x)
    np.testing.assert_allclose(got, np.sin(x) * 2 + x, **TOL)
    g = jax.jit(jax.grad(lambda a: jnp.sum(hb.call_torch(torch_fn, a))))(x)
    np.testing.assert_allclose(g, np.cos(x) * 2 + 1, **TOL)


# -- training with Optax ------------------------------------------------------------------

def test_optax_adamw_matches_torch_adamw() -> None:
    optax = pytest.importorskip("optax")
    model = mlp()
    apply, params = hb.torch_module(model)
    # torch trains its own copy: params alias the module's parameters, which
    # AdamW updates in place (possibly while JAX still reads them)
    model = copy.deepcopy(model)
    ref = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, eps=1e-3)
    opt = optax.adamw(1e-2, weight_decay=0.01, eps=1e-3)
    state = opt.init(params)

    @jax.jit
    def step(p: Any, s: Any, a: Any, y: Any) -> Any:
        loss, g = jax.value_and_grad(lambda q: jnp.mean((apply(q, a) - y) ** 2))(p)
        upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s, loss

    for _ in range(3):
        x, y = rand(8, 16), rand(8, 8)
        params, state, loss = step(params, state, x, y)
        ref.zero_grad()
        want = torch.mean((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2)
        want.backward()
        ref.step()
        close(loss, want, dict(rtol=1e-5, atol=1e-6))
    for n, p in model.named_parameters():
        close(params[n], p, dict(rtol=1e-4, atol=1e-5))


# -- errors ----------------------------------------------------------------------------------

def test_named_errors_and_process_keeps_running() -> None:
    x = rand(3)
    with pytest.raises(hb.CallTorchError, match="must be a tensor"):
        hb.call_torch(lambda t: (t, "label"), x)
    with pytest.raises(hb.CallTorchError, match="not hashable"):
        hb.call_torch(lambda t, k: t, x, bytearray(b"k"))  # a static leaf must hash
    with pytest.raises(hb.BridgeError):  # data-dependent shape
        jax.jit(lambda a: hb.call_torch(lambda t: t[t > 0], a))(x)
    with pytest.raises(hb.CallTorchError, match="not callable"):
        hb.call_torch(3, x)  # type: ignore[arg-type]
    close(hb.call_torch(torch.sin, x), torch.sin(torch.from_numpy(x)), TOL)


# -- deviceless ----------------------------------------------------------------------------------

def test_compile_for_tpu_deviceless() -> None:
    model = mlp()
    apply, params = hb.torch_module(model)
    tparams = {k: torch.tensor(np.array(v)) for k, v in params.items()}
    try:
        exe = hb.compile_for("tpu:v5e", lambda p, a: jnp.tanh(apply(p, a)), tparams,
                             torch.randn(8, 16))
    except hb.AcceleratorNotInstalledError as e:
        pytest.skip(str(e))
    assert exe.fusions
