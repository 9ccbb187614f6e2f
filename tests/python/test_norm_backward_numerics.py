"""Normalization gradients keep eager float32's accuracy when a channel's,
row's or group's mean is large against its spread, through whole-step
capture (``compile_train_step``) and the ``torch.compile`` backend.

A backward that sums ``g * x`` and subtracts ``mean * sum(g)`` cancels in
float32 the way the one-pass variance did in the forward
(``tests/python/test_norm_numerics.py``); the centered form sums ``g * (x -
mean)``. Batch norm's and layer norm's backward are torch's centered core
decompositions; group norm's core decomposition (like eager CPU torch's
kernel) is the cancelling one, replaced by
``hlobridge._src.dynamo.engine._group_norm_backward``. The traced step holds
no fused normalization op (torch_xla would lower ``native_batch_norm_backward``
to ``stablehlo.batch_norm_grad``).

Gradients are read from the momentum buffer of the first SGD step (``0.9 *
0 + grad``: the gradient itself), not from the weights' change, which float32
rounds to the weights' spacing (1.2e-7 for a BatchNorm weight near 1: 6e-6
relative on a gradient of 1e-2 with ``lr=1``, in any float32 implementation,
eager's included). Inputs' gradients are those of a zero parameter added to
the input. Every check compares with eager float64 on the same values and
allows ``FACTOR`` times eager float32's own error, or ``FLOOR``.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

import hlobridge as hb

OFFSET = 100.0
FACTOR = 4.0
FLOOR = 4e-6
"""Norm-relative. XLA's CPU reductions add a channel's terms in another
order than torch's pairwise sums: batch norm's bias gradient (a plain sum of
4096 terms) is 9e-7 off float64 where eager float32 is 1e-7. The cancelling
backward misses by 1.8e-4 (batch norm's weight gradient, eager 2.2e-6)."""


class _Offset(torch.nn.Module):
    """``norm(x + d)``, ``d`` a zero parameter: its gradient is the input's."""

    def __init__(self, norm: torch.nn.Module, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.norm = norm
        self.d = torch.nn.Parameter(torch.zeros(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.d)  # type: ignore[no-any-return]


def _cases() -> dict[str, tuple[torch.nn.Module, tuple[int, ...]]]:
    return {
        "batch_norm_2d": (torch.nn.BatchNorm2d(16), (16, 16, 16, 16)),
        "batch_norm_1d": (torch.nn.BatchNorm1d(64), (16, 64)),
        "layer_norm": (torch.nn.LayerNorm(64), (8, 16, 64)),
        "group_norm": (torch.nn.GroupNorm(4, 16), (4, 16, 16, 16)),
        "instance_norm": (torch.nn.InstanceNorm2d(16, affine=True), (4, 16, 8, 8)),
    }


def _loss(m: torch.nn.Module, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (m(x) * w).sum()


def _err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.detach().double() - ref).norm() / (ref.norm() or 1.0))


def _gradients(name: str) -> dict[str, tuple[torch.Tensor, ...]]:
    """Per parameter: (whole step, backend, eager float32, eager float64)."""
    torch.manual_seed(21)
    norm, shape = _cases()[name]
    with torch.no_grad():
        for p in norm.parameters():
            p.copy_(torch.rand_like(p) + 0.5)
    net = _Offset(norm, shape).train()
    x, w = torch.randn(shape) + OFFSET, torch.randn(shape)
    m32, m64, mb = copy.deepcopy(net), copy.deepcopy(net).double(), copy.deepcopy(net)
    step = hb.compile_train_step(net, _loss, hb.optim.SGD(lr=1e-3, momentum=0.9))
    step(x, w)
    state = step.state
    _loss(m32, x, w).backward()
    _loss(m64, x.double(), w.double()).backward()
    torch._dynamo.reset()
    _loss(torch.compile(mb, backend="hlobridge", dynamic=False), x, w).backward()
    return {n: (state[n], b.grad, q.grad, r.grad)  # type: ignore[misc]
            for (n, r), q, b in zip(m64.named_parameters(), m32.parameters(),
                                    mb.parameters())}


def _check(name: str, show: bool = False) -> list[str]:
    """Each gradient's error above its bound, as text."""
    bad = []
    for p, (step, backend, e32, e64) in _gradients(name).items():
        own = _err(e32, e64)
        for path, got in (("compile_train_step", step), ("backend", backend)):
            assert torch.isfinite(got).all(), f"{name} {p} ({path}): non-finite values"
            ours = _err(got, e64)
            if show:
                print(f"{name} {p} ({path}): {ours:.2g} off float64, eager float32 {own:.2g}")
            if ours > max(FACTOR * own, FLOOR):
                bad.append(f"{name} {p} ({path}): {ours:.3g} off float64, eager float32 "
                           f"{own:.3g}")
    return bad


@pytest.mark.parametrize("name", list(_cases()))
def test_gradients_match_eager_accuracy(name: str) -> None:
    bad = _check(name, show=True)
    assert not bad, "; ".join(bad)


@pytest.mark.parametrize("name", ["batch_norm_2d", "layer_norm", "group_norm"])
def test_the_step_holds_no_fused_norm_op(name: str) -> None:
    """XLA expands ``batch_norm_training``/``batch_norm_grad`` itself; the
    step is spelled out in elementwise ops and reductions instead."""
    torch.manual_seed(22)
    norm, shape = _cases()[name]
    step = hb.compile_train_step(_Offset(norm, shape), _loss, hb.optim.SGD(lr=1e-3))
    step(torch.randn(shape), torch.randn(shape))
    for graph in step.graphs:
        for prog in graph.programs.values():
            fused = set(re.findall(r"stablehlo\.batch_norm_\w+", prog.text))
            assert not fused, f"{name}: {sorted(fused)} in the step"


def _uncentered_batch_norm_backward(g: torch.Tensor, x: torch.Tensor,
                                    weight: torch.Tensor | None, running_mean: object,
                                    running_var: object, mean: torch.Tensor,
                                    invstd: torch.Tensor, train: bool, eps: float,
                                    mask: list[bool]) -> tuple[torch.Tensor, ...]:
    """Training batch norm's backward with ``sum(g * x) - mean * sum(g)``."""
    dims = [0, *range(2, x.dim())]
    shape = [1, -1] + [1] * (x.dim() - 2)
    n = x.numel() // x.shape[1]
    sum_g = g.sum(dims)
    dot = (g * x).sum(dims) - mean * sum_g
    scale = invstd if weight is None else invstd * weight
    gx = (g - (sum_g / n).reshape(shape)
          - (x - mean.reshape(shape)) * (dot * invstd * invstd / n).reshape(shape)) \
        * scale.reshape(shape)
    return gx, dot * invstd, sum_g


def test_an_uncentered_batch_norm_backward_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check sees the cancelling backward (measured: the weight gradient
    1.8e-4 off float64, eager float32 2.2e-6)."""
    from hlobridge._src.dynamo import engine

    real = engine.decompositions

    def table() -> dict[object, object]:
        t = real()
        t[torch.ops.aten.native_batch_norm_backward.default] = _uncentered_batch_norm_backward
        return t

    monkeypatch.setattr(engine, "decompositions", table)
    bad = _check("batch_norm_2d")
    print(bad)
    assert any("norm.weight (compile_train_step)" in b for b in bad), bad
    assert any("norm.weight (backend)" in b for b in bad), bad


def test_group_norm_backward_is_centered(monkeypatch: pytest.MonkeyPatch) -> None:
    """With torch's core decomposition (``sum(g * x) - mean * sum(g)``, as
    eager's kernel) put back, the whole step's group norm weight and input
    gradients are several times further from float64 (measured: 5.7e-5 and
    7.3e-7 instead of 3.2e-6 and 1.2e-7; eager float32 2.4e-5 and 5.7e-7)."""
    from torch._decomp import decomposition_table

    from hlobridge._src.dynamo import engine

    centered = _gradients("group_norm")
    monkeypatch.setattr(engine, "_group_norm_backward",
                        decomposition_table[torch.ops.aten.native_group_norm_backward.default])
    torch._dynamo.reset()
    plain = _gradients("group_norm")
    for p in ("norm.weight", "d"):
        ref = centered[p][3]
        ours, theirs = _err(centered[p][0], ref), _err(plain[p][0], ref)
        print(f"group norm {p}: centered {ours:.2g}, torch's decomposition {theirs:.2g}, "
              f"eager float32 {_err(centered[p][2], ref):.2g}")
        assert 3 * ours < theirs, f"{p}: centered {ours:.3g}, torch's decomposition {theirs:.3g}"


@pytest.mark.parametrize("shape,groups,affine,mask", [
    ((4, 16, 5, 5), 4, True, [True, True, True]),
    ((3, 6, 7), 3, True, [True, False, True]),
    ((2, 8), 2, True, [False, True, False]),
    ((2, 8, 3, 3), 8, False, [True, False, False]),
    ((2, 4, 2, 2, 2), 1, True, [True, True, True]),
])
def test_group_norm_backward_is_torchs(shape: tuple[int, ...], groups: int, affine: bool,
                                       mask: list[bool]) -> None:
    """The decomposition itself, eagerly in float64, against
    ``native_group_norm_backward``."""
    from hlobridge._src.dynamo.engine import _group_norm_backward

    torch.manual_seed(23)
    aten = torch.ops.aten
    n, c = shape[0], shape[1]
    hxw = 1
    for s in shape[2:]:
        hxw *= s
    x = torch.randn(shape, dtype=torch.float64) * 2 + 30
    g = torch.randn(shape, dtype=torch.float64)
    weight = torch.rand(c, dtype=torch.float64) + 0.5 if affine else None
    _, mean, rstd = aten.native_group_norm.default(x, weight, None, n, c, hxw, groups, 1e-5)
    want = aten.native_group_norm_backward.default(g, x, mean, rstd, weight, n, c, hxw, groups,
                                                   mask)
    got = _group_norm_backward(g, x, mean, rstd, weight, n, c, hxw, groups, mask)
    for k, (a, b) in enumerate(zip(got, want)):
        if not mask[k]:
            assert a is None
            continue
        assert a is not None and a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
