"""Weight gradients on the host kernel's own weight-gradient path
(``pjrt-client/src/host_kernels/conv/wgrad.rs``: GEMMs over a chunked im2col
of the input) with ``HLOBRIDGE_CONV_WGRAD=host`` / ``all`` (``xla`` keeps
XLA's convolution for the large ones; docs/host_conv.md), and the depthwise
weight gradient in both loop orders (``HLOBRIDGE_CONV_DW_WGRAD``). Every run
here has ``HLOBRIDGE_ONEDNN_LIBRARY=0``, so these are the kernel's own loops,
which run wherever oneDNN's library is missing or refuses a shape; the
oneDNN route is ``test_host_conv.py``'s and the Rust ``conv/tests/onednn.rs``.

Each case runs ``torch.nn.functional.conv2d`` and both of its gradients
through ``torch.compile(backend="hlobridge")`` (torch_xla's lowering: the
weight gradient reaches the rewrite as ``[f, b, 0, 1]x[i, o, 0, 1]->[0, 1,
b, f]``) on fresh random inputs, against float64 torch autograd (seed
printed on failure, ``HLOBRIDGE_TEST_SEED`` replays), and checks by the
``host_conv_calls`` counter that ``host`` moved the weight gradient off
XLA. The shapes are large enough (at least 2^27 multiply-adds,
output-gradient maps of at least 256 positions, more than 4 images) for the
route to apply.

Tolerance: float32 sums of K terms of magnitude ~1 in a different order
than torch's: rtol=1e-4, atol=2e-5·sqrt(K), K the longest sum (the weight
gradient's: batch × output positions, or the forward's taps × channels).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb  # noqa: F401  (registers the torch.compile backend)
from hlobridge import _native

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


def _calls() -> int:
    return int(_native.stats()["host_conv_calls"])


def _run(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: int, pad: int,
         groups: int, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
         ) -> tuple[tuple[torch.Tensor, ...], int]:
    """Forward and both gradients through hlobridge, compiled with ``env`` set (also
    set while it runs: the depthwise order is read at each call); host conv calls
    compiled."""
    torch._dynamo.reset()
    with monkeypatch.context() as m:
        for k, v in {"HLOBRIDGE_ONEDNN_LIBRARY": "0", **env}.items():
            m.setenv(k, v)

        def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return F.conv2d(x, w, None, stride, pad, 1, groups)

        c = torch.compile(f, backend="hlobridge", dynamic=False)
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        before = _calls()
        y = c(xr, wr)
        gx, gw = torch.autograd.grad(y, (xr, wr), dy)
        return (y.detach(), gx, gw), _calls() - before


def _want(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, stride: int, pad: int,
          groups: int) -> tuple[torch.Tensor, ...]:
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    y = F.conv2d(xd, wd, None, stride, pad, 1, groups)
    gx, gw = torch.autograd.grad(y, (xd, wd), dy.double())
    return y.detach(), gx, gw


def _close(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...], ks: tuple[int, ...],
           what: str) -> None:
    for name, g, wv, k in zip(("output", "input gradient", "weight gradient"), got, want, ks):
        torch.testing.assert_close(g.double(), wv, rtol=1e-4, atol=2e-5 * k**0.5,
                                   msg=lambda m, name=name: f"seed {SEED}, {what} {name}: {m}")


# (name, x shape, w shape, stride, padding, setting): every weight gradient
# here is at least 2^27 multiply-adds (XLA's by default), over at least 256
# output-gradient positions, with 8 images (oneDNN takes weight gradients of
# at most 4).
CASES = [
    ("3x3-pad1-odd", (8, 64, 25, 25), (64, 64, 3, 3), 1, 1, "host"),
    ("3x3-stride2-pad1-odd", (8, 64, 45, 45), (64, 64, 3, 3), 2, 1, "host"),
    ("3x3-pad0", (8, 64, 26, 26), (64, 64, 3, 3), 1, 0, "host"),
    ("1x1-stride2-odd", (8, 256, 33, 33), (512, 256, 1, 1), 2, 0, "host"),
    # A 1x1 over a 28x28 map: batched products by default, the host path with `all`.
    ("1x1-all", (8, 64, 28, 28), (256, 64, 1, 1), 1, 0, "all"),
]


@pytest.mark.parametrize("name,xs,ws,stride,pad,setting", CASES, ids=[c[0] for c in CASES])
def test_weight_gradient_path_matches_float64(name: str, xs: tuple[int, ...],
                                              ws: tuple[int, ...], stride: int, pad: int,
                                              setting: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(*xs, generator=g)
    w = torch.randn(*ws, generator=g) / (ws[1] * ws[2] * ws[3]) ** 0.5
    y = F.conv2d(x, w, None, stride, pad)
    dy = torch.randn(y.shape, generator=g)
    want = _want(x, w, dy, stride, pad, 1)
    got, calls = _run(x, w, dy, stride, pad, 1, {"HLOBRIDGE_CONV_WGRAD": setting}, monkeypatch)
    positions = y.shape[0] * y.shape[2] * y.shape[3]
    ks = (ws[1] * ws[2] * ws[3], ws[0] * ws[2] * ws[3], positions)
    _close(got, want, ks, f"{name} ({setting})")
    if setting == "host":
        # XLA's convolution by default: one more rewritten convolution with
        # the route (the 1x1's products count as rewritten either way; the
        # routing itself is checked in bridge/core's wgrad_host tests).
        _, base = _run(x, w, dy, stride, pad, 1, {"HLOBRIDGE_CONV_WGRAD": "xla"}, monkeypatch)
        assert calls == base + 1, f"{name}: the weight gradient did not move to the host kernel"


@pytest.mark.parametrize("order", ["rows", "elements"])
@pytest.mark.parametrize("xs,k,stride", [((2, 24, 29, 29), 3, 1), ((2, 16, 30, 30), 5, 2),
                                         ((3, 8, 7, 7), 3, 1)],
                         ids=["3x3-odd", "5x5-stride2", "3x3-7x7map"])
def test_depthwise_weight_gradient_orders_match_float64(
        order: str, xs: tuple[int, ...], k: int, stride: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(SEED)
    c = xs[1]
    x = torch.randn(*xs, generator=g)
    w = torch.randn(c, 1, k, k, generator=g) / k
    y = F.conv2d(x, w, None, stride, k // 2, 1, c)
    dy = torch.randn(y.shape, generator=g)
    want = _want(x, w, dy, stride, k // 2, c)
    # (The order is read at run time: the second order reuses the compiled
    # program, so no rewrite counter here; the Rust tests check the kernel.)
    got, _ = _run(x, w, dy, stride, k // 2, c, {"HLOBRIDGE_CONV_DW_WGRAD": order}, monkeypatch)
    positions = y.shape[0] * y.shape[2] * y.shape[3]
    _close(got, want, (k * k, k * k, positions), f"depthwise {xs} {k}x{k}/{stride} ({order})")
