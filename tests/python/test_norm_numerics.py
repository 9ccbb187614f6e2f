"""Normalizations keep eager float32's accuracy when a row's or channel's
mean is large against its spread.

torch_xla lowers LayerNorm, GroupNorm and training BatchNorm with the
one-pass variance ``E[x^2] - E[x]^2``; in float32 that cancels: at mean 1000
and standard deviation 1, LayerNorm and GroupNorm outputs were 17% off and
training BatchNorm's were NaN, and ResNet-18's layer-1 gradients were 3% off
float64 after one step where eager float32 is 4e-6 off. hlobridge traces
them through torch's two-pass decompositions instead
(``hlobridge._src.dynamo.engine._accurate_norms``).

Every check compares with the same computation in float64 and allows
``FACTOR`` times eager float32's own error, or ``FLOOR`` relative to the
largest value: XLA's float32 sums run in another order than torch's
cascade sums, which costs up to ~30x eager's error (4e-5 on training
BatchNorm's input gradient) when the inputs' mean is 1000x their spread.
The one-pass variance misses by 1e-3 to NaN there. Inputs are fresh
``randn`` draws (seeded per test) shifted by ``OFFSET``.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from norm_nets import OffsetNormNet

OFFSET = 1000.0
FACTOR = 20.0
FLOOR = 1e-4


def _err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest difference relative to the reference's largest value (or
    absolute where the reference is all zeros)."""
    scale = float(ref.detach().abs().max()) or 1.0
    return float((a.detach().double() - ref.detach()).abs().max()) / scale


def _check(got: torch.Tensor, e32: torch.Tensor, e64: torch.Tensor, what: str) -> None:
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    own, ours = _err(e32, e64), _err(got, e64)
    assert ours <= max(FACTOR * own, FLOOR), (
        f"{what}: relative error {ours:.3g} vs float64; eager float32's is {own:.3g}")


def _modules() -> dict[str, tuple[torch.nn.Module, tuple[int, ...]]]:
    return {
        "layer_norm": (torch.nn.LayerNorm(64), (8, 16, 64)),
        "group_norm": (torch.nn.GroupNorm(4, 32), (4, 32, 6, 6)),
        "batch_norm_train": (torch.nn.BatchNorm2d(32), (8, 32, 6, 6)),
        "instance_norm": (torch.nn.InstanceNorm2d(32, affine=True), (4, 32, 6, 6)),
        "batch_norm_1d": (torch.nn.BatchNorm1d(64), (16, 64)),
    }


def _randomize(m: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.rand_like(p) + 0.5)


@pytest.mark.parametrize("name", list(_modules()))
def test_compiled_forward_and_backward_match_eager_accuracy(name: str) -> None:
    torch.manual_seed(11)
    m, shape = _modules()[name]
    _randomize(m)
    m.train()
    x = torch.randn(shape) + OFFSET
    w = torch.randn(shape)
    m64 = copy.deepcopy(m).double()
    m32 = copy.deepcopy(m)
    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(m), backend="hlobridge", dynamic=False)
    results = []
    for mod, inp in ((compiled, x), (m32, x), (m64, x.double())):
        xi = inp.clone().requires_grad_(True)
        out = mod(xi)
        (out * w.to(out.dtype)).sum().backward()
        results.append((out, xi.grad, [p.grad for p in mod.parameters()]))
    (o, gx, gp), (o32, gx32, gp32), (o64, gx64, gp64) = results
    _check(o, o32, o64, f"{name} output")
    _check(gx, gx32, gx64, f"{name} input gradient")
    for i, (a, b, c) in enumerate(zip(gp, gp32, gp64)):
        _check(a, b, c, f"{name} parameter {i} gradient")


def test_eval_batch_norm_keeps_the_low_bits() -> None:
    """Inference BatchNorm with running statistics near a large mean:
    ``(x - mean) * rstd``, not ``x * scale + shift``."""
    torch.manual_seed(12)
    m = torch.nn.BatchNorm2d(16)
    _randomize(m)
    with torch.no_grad():
        m.running_mean.copy_(torch.randn(16) + OFFSET)
        m.running_var.copy_(torch.rand(16) + 0.5)
    m.eval()
    x = m.running_mean[None, :, None, None] + torch.randn(8, 16, 5, 5)
    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(m), backend="hlobridge", dynamic=False)
    with torch.no_grad():
        _check(compiled(x), m(x), copy.deepcopy(m).double()(x.double()), "eval batch norm")


def test_train_step_with_offset_activations_matches_eager_accuracy() -> None:
    """Whole-step capture: one SGD step on a net whose LayerNorm sees mean
    ~1000 rows and whose BatchNorm sees inputs shifted by 1000."""
    torch.manual_seed(13)
    net = OffsetNormNet(OFFSET)
    x, y = torch.randn(8, 3, 6, 6) + OFFSET, torch.randint(0, 5, (8,))
    n32, n64 = copy.deepcopy(net), copy.deepcopy(net).double()

    def loss_fn(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(m(x), y)

    before = {k: p.detach().clone() for k, p in net.named_parameters()}
    step = hb.compile_train_step(net, loss_fn, hb.optim.SGD(lr=0.1))
    step(x, y)
    for m, xx in ((n32, x), (n64, x.double())):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss_fn(m, xx, y).backward()
        opt.step()
    for (name, p), a, b in zip(net.named_parameters(), n32.parameters(), n64.parameters()):
        # The update (lr * grad) is what the gradient decides.
        p0 = before[name]
        _check(p - p0, a - p0, b - p0.double(), f"{name}'s update")


@pytest.mark.parametrize("shape,dim,correction,keepdim", [
    ((5, 7), None, None, False), ((5, 7), [0], 0, True), ((3, 4, 5), [0, 2], 1, False),
    ((3, 4, 5), -1, 0, False), ((2, 3, 4, 5), [1, -1], 2, True), ((6,), [], None, False),
    ((), None, 0, False), ((4, 1), [1], 1, False), ((0, 3), [0], 0, False),
])
def test_shifted_var_mean_is_torchs_var_mean(shape: tuple[int, ...], dim: object,
                                             correction: object, keepdim: bool) -> None:
    """The decomposition itself, run eagerly in float64 against
    ``torch.var_mean``: same shapes, same values (NaN where torch's are)."""
    from hlobridge._src.dynamo.engine import _var_mean_shifted

    torch.manual_seed(14)
    x = torch.randn(shape, dtype=torch.float64) * 3 + 50
    got = _var_mean_shifted(x, dim, correction=correction, keepdim=keepdim)
    with warnings.catch_warnings():  # torch warns on zero degrees of freedom
        warnings.simplefilter("ignore")
        want = torch.var_mean(x, dim, correction=correction,  # type: ignore[arg-type]
                              keepdim=keepdim)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)
