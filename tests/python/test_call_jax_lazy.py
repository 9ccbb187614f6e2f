"""`hlobridge.call_jax` on torch_xla lazy tensors: the pending torch graph and
the JAX function run as ONE executable through hlobridge's runtime.

Checked against eager torch on fresh random inputs (float32, rtol=1e-5,
atol=1e-5; the training loop after 3 steps with rtol=1e-4, atol=1e-5):
numerics, one compile holding both segments, cache hits on later steps,
zero-copy outputs, inputs written back (no second run of their graph), and
the errors.
"""

from __future__ import annotations

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch_xla = pytest.importorskip("torch_xla")
from torch_xla.utils import dlpack as xla_dlpack  # noqa: E402

import hlobridge as hb  # noqa: E402

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
DEV = torch_xla.device()
X = torch_xla._XLAC


@pytest.fixture
def gen() -> torch.Generator:
    hb.clear_cache()
    return torch.Generator().manual_seed(SEED)


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    torch.testing.assert_close(a.cpu(), b, rtol=rtol, atol=atol, msg=lambda m: f"seed={SEED}: {m}")


def act_jax(h):
    return jnp.sin(h) * jnp.exp(-0.1 * h * h)


def act_torch(h: torch.Tensor) -> torch.Tensor:
    return torch.sin(h) * torch.exp(-0.1 * h * h)


def buffer_pointer(t: torch.Tensor) -> int:
    return torch.from_dlpack(xla_dlpack.to_dlpack(t)).data_ptr()


def is_device_data(t: torch.Tensor) -> bool:
    return X._get_tensors_xla_device_data_node([t])[0] == [X._xla_get_tensor_id(t)]


def test_lazy_graph_and_jax_run_as_one_program(gen):
    for step in range(3):
        x, w = torch.randn(8, 16, generator=gen), torch.randn(16, 4, generator=gen)
        h = torch.relu(x.to(DEV) @ w.to(DEV)) * 1.5
        a = hb.call_jax(act_jax, h)
        r = hb.last_receipt()
        assert r is not None
        assert [(s.name, s.producer) for s in r.segments] == [
            ("torch_xla lazy graph", "torch"), ("act_jax", "jax")]
        assert r.cache == ("miss" if step == 0 else "hit"), step
        assert a.device.type == "xla"
        ref_h = torch.relu(x @ w) * 1.5
        close(a, act_torch(ref_h))
        # Later torch ops continue lazily on the result.
        close((a * 2).sum(0), (act_torch(ref_h) * 2).sum(0))


def test_one_compile_for_the_whole_loop_and_cache_hits_after():
    hb.clear_cache()
    hb.reset_stats()
    g = torch.Generator().manual_seed(SEED + 1)
    for _ in range(3):
        x = torch.randn(5, 3, generator=g)
        y = hb.call_jax(act_jax, torch.tanh(x.to(DEV)) + 1)
        close(y, act_torch(torch.tanh(x) + 1))
    st = hb.stats()
    assert st["compiles"] == 1 and st["cache_hits"] == 2, st


def test_outputs_alias_pjrt_buffers_and_inputs_are_written_back(gen):
    x = torch.randn(4, 4, generator=gen)
    h = x.to(DEV) * 3
    assert not is_device_data(h)
    out = hb.call_jax(lambda a: (a + 1, a.sum()), h)
    r = hb.last_receipt()
    assert r.output_pointers == tuple(buffer_pointer(t) for t in out)
    # h now holds the program's value: its graph will not run again.
    assert is_device_data(h)
    close(h, x * 3)
    close(out[0], x * 3 + 1)
    close(out[1], (x * 3).sum(), rtol=1e-5, atol=1e-4)


def test_device_data_inputs_need_no_torch_segment(gen):
    x, y = torch.randn(6, generator=gen), torch.randn(6, generator=gen)
    xd, yd = x.to(DEV), y.to(DEV)
    out = hb.call_jax(lambda a, b: a * b - a, xd, yd)
    r = hb.last_receipt()
    assert [s.producer for s in r.segments] == ["jax"]
    close(out, x * y - x)


def test_mixed_duplicated_pytree_and_static_arguments(gen):
    x, w = torch.randn(3, 5, generator=gen), torch.randn(5, generator=gen)
    xd, wd = x.to(DEV), w.to(DEV)
    h = xd * wd  # pending, and used twice; wd is device data and also a graph leaf

    def f(tree, scale):
        return {"y": tree["a"] + tree["b"] * scale, "w": tree["w"] * 2}

    out = hb.call_jax(f, {"a": h, "b": h, "w": wd}, 0.5)
    assert set(out) == {"y", "w"}
    close(out["y"], x * w * 1.5)
    close(out["w"], w * 2)
    assert [s.producer for s in hb.last_receipt().segments] == ["torch", "jax"]


def test_training_loop_torch_xla_grads_with_jax_momentum_update(gen):
    """A torch MLP on lazy tensors; its forward, backward and a JAX momentum
    SGD update are ONE program per step. Compared with eager torch and the
    same update written in torch."""
    lr, beta = 0.05, 0.9

    def sgd(params, grads, moms):
        new_m = jax.tree_util.tree_map(lambda m, g: beta * m + g, moms, grads)
        new_p = jax.tree_util.tree_map(lambda p, m: p - lr * m, params, new_m)
        return new_p, new_m

    w1, w2 = torch.randn(8, 16, generator=gen) * 0.3, torch.randn(16, 1, generator=gen) * 0.3
    data = [(torch.randn(32, 8, generator=gen), torch.randn(32, 1, generator=gen))
            for _ in range(3)]
    # Eager reference.
    ref = [w1.clone().requires_grad_(True), w2.clone().requires_grad_(True)]
    ref_m = [torch.zeros_like(w1), torch.zeros_like(w2)]
    for x, y in data:
        loss = ((torch.tanh(x @ ref[0]) @ ref[1] - y) ** 2).mean()
        grads = torch.autograd.grad(loss, ref)
        with torch.no_grad():
            for i in range(2):
                ref_m[i] = beta * ref_m[i] + grads[i]
                ref[i] -= lr * ref_m[i]
    # torch_xla + hlobridge.
    params = [w1.to(DEV).requires_grad_(True), w2.to(DEV).requires_grad_(True)]
    moms = [torch.zeros_like(w1).to(DEV), torch.zeros_like(w2).to(DEV)]
    compiles = []
    for x, y in data:
        loss = ((torch.tanh(x.to(DEV) @ params[0]) @ params[1] - y.to(DEV)) ** 2).mean()
        grads = list(torch.autograd.grad(loss, params))
        with torch.no_grad():
            new_p, moms = hb.call_jax(sgd, [p.detach() for p in params], grads, moms)
        params = [p.requires_grad_(True) for p in new_p]
        r = hb.last_receipt()
        assert [s.producer for s in r.segments] == ["torch", "jax"]
        compiles.append(r.cache)
    assert compiles[0] in ("miss", "content") and compiles[1:] == ["hit", "hit"], compiles
    for got, want in zip(params, ref):
        close(got.detach(), want.detach(), rtol=1e-4, atol=1e-5)


def test_mixing_devices_is_an_argument_error(gen):
    with pytest.raises(hb.ArgumentError, match="same xla device"):
        hb.call_jax(lambda a, b: a + b, torch.ones(2).to(DEV) * 2, torch.ones(2))


def test_gradients_on_lazy_tensors_are_refused_clearly(gen):
    w = torch.ones(3).to(DEV).requires_grad_(True)
    with pytest.raises(hb.ArgumentError, match="lazy tensors are not supported"):
        hb.call_jax(act_jax, w * 2)
