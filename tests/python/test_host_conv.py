"""Convolutions on the CPU plugin through hlobridge's host convolution
kernel (``hlobridge_conv``, an XLA FFI custom call: im2col plus the host
GEMM, see ``pjrt-client/src/host_kernels/conv.rs`` and
``bridge/core/src/lower/host_conv.rs``).

Every case runs a convolution and both of its gradients (input and weight:
convolutions with lhs dilation, window reversal, swapped batch/feature
dimensions) through ``hb.call_jax`` with ``jax.lax.conv_general_dilated``,
or through ``torch.compile(backend="hlobridge")`` (torch_xla's lowering),
and compares them with torch eager (``torch.nn.functional.conv{1,2,3}d``
and autograd) on fresh random inputs (seed printed on failure,
``HLOBRIDGE_TEST_SEED`` replays). It also checks that the kernel was used
(the ``host_conv_calls`` counter), and that ``HLOBRIDGE_HOST_CONV=0`` keeps
convolutions with XLA.

Tolerance: float32 sums of K = taps·Cin/groups terms of magnitude ~1, in a
different order than torch's: rtol=1e-4, atol=2e-5·sqrt(K) (K is the
longest sum in the case: the weight gradient sums over batch × output
positions).
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from hlobridge import _native

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def conv_calls() -> int:
    return _native.stats()["host_conv_calls"]


def close(got: torch.Tensor, want: torch.Tensor, k: int, what: str) -> None:
    torch.testing.assert_close(got, want, rtol=1e-4, atol=2e-5 * k**0.5,
                               msg=lambda m: f"seed {SEED}, {what}: {m}")


# (name, input shape NC..., weight shape OI..., stride, padding, dilation, groups)
CASES = [
    ("3x3", (4, 8, 10, 10), (16, 8, 3, 3), 1, 1, 1, 1),
    ("3x3-stride2", (4, 8, 11, 9), (16, 8, 3, 3), 2, 1, 1, 1),
    ("7x7-stride2-pad3", (2, 3, 20, 20), (16, 3, 7, 7), 2, 3, 1, 1),
    ("1x1-stride2", (4, 16, 8, 8), (32, 16, 1, 1), 2, 0, 1, 1),
    ("3x3-dilation2", (2, 8, 12, 12), (8, 8, 3, 3), 1, 2, 2, 1),
    ("asymmetric", (2, 6, 9, 13), (10, 6, 2, 4), (2, 3), (1, 2), (2, 1), 1),
    ("small-spatial", (8, 64, 2, 2), (64, 64, 3, 3), 1, 1, 1, 1),
    ("1x1-image", (8, 64, 1, 1), (96, 64, 3, 3), 1, 1, 1, 1),
    ("groups2", (2, 8, 9, 9), (12, 4, 3, 3), 1, 1, 1, 2),
    ("depthwise", (4, 16, 10, 10), (16, 1, 3, 3), 1, 1, 1, 16),
    ("depthwise-x2-stride2", (2, 8, 11, 11), (16, 1, 5, 5), 2, 2, 1, 8),
    ("conv1d", (4, 8, 40), (16, 8, 5), 2, 2, 1, 1),
    ("conv3d", (2, 4, 6, 7, 5), (8, 4, 3, 3, 2), 1, 1, 1, 1),
]


def _tuple(v: int | tuple[int, ...], n: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, tuple) else (v,) * n


def _jax_conv(nsp: int, stride, padding, dilation, groups):
    dims = "NC" + "DHW"[3 - nsp:]
    spec = (dims, "OI" + dims[2:], dims)

    def f(x, w):
        return jax.lax.conv_general_dilated(
            x, w, window_strides=stride, padding=[(p, p) for p in padding],
            rhs_dilation=dilation, dimension_numbers=spec, feature_group_count=groups,
            precision=jax.lax.Precision.HIGHEST)
    return f


def _torch_conv(nsp: int):
    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_convolution_and_its_gradients_match_torch(case) -> None:
    _, xs, ws, stride, padding, dilation, groups = case
    nsp = len(xs) - 2
    stride, padding, dilation = (_tuple(v, nsp) for v in (stride, padding, dilation))
    g = gen()
    x = torch.randn(*xs, generator=g, requires_grad=True)
    w = torch.randn(*ws, generator=g, requires_grad=True)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    want = _torch_conv(nsp)(xr, wr, stride=stride, padding=padding, dilation=dilation,
                            groups=groups)
    dy = torch.randn(want.shape, generator=g)
    want.backward(dy)

    fn = _jax_conv(nsp, stride, padding, dilation, groups)
    before = conv_calls()
    got = hb.call_jax(fn, x, w)
    got.backward(dy)
    taps_in = ws[1] * int(torch.tensor(ws[2:]).prod())
    k = max(taps_in, xs[0] * int(torch.tensor(want.shape[2:]).prod()), ws[0] // groups)
    close(got.detach(), want.detach(), k, "forward")
    close(x.grad, xr.grad, k, "input gradient")
    close(w.grad, wr.grad, k, "weight gradient")
    expected = 3
    assert conv_calls() - before >= expected, (
        f"{conv_calls() - before} convolutions were compiled as host calls, expected {expected}")


def test_nhwc_and_hwio_layouts_are_read_in_place() -> None:
    g = gen()
    x = torch.randn(4, 9, 9, 12, generator=g)
    w = torch.randn(3, 3, 12, 20, generator=g)

    def f(x, w):
        return jax.lax.conv_general_dilated(
            x, w, (1, 2), [(1, 1), (2, 0)], dimension_numbers=("NHWC", "HWIO", "NHWC"),
            precision=jax.lax.Precision.HIGHEST)

    before = conv_calls()
    got = hb.call_jax(f, x, w)
    # torch has no asymmetric padding argument: pad explicitly.
    xp = F.pad(x.permute(0, 3, 1, 2), (2, 0, 1, 1))
    want = F.conv2d(xp, w.permute(3, 2, 0, 1), stride=(1, 2)).permute(0, 2, 3, 1)
    close(got, want, 9 * 12, "NHWC forward")
    assert conv_calls() > before


def test_lhs_dilation_and_reversal_match_a_transposed_convolution() -> None:
    # conv_transpose2d is a convolution with lhs dilation and a reversed
    # window: jax spells it with lhs_dilation directly.
    g = gen()
    x = torch.randn(2, 8, 5, 6, generator=g)
    w = torch.randn(8, 6, 3, 3, generator=g)  # torch: [in, out, kh, kw]

    def f(x, w):
        wk = jnp.flip(w, (2, 3)).transpose(1, 0, 2, 3)  # OIHW, reversed
        return jax.lax.conv_general_dilated(
            x, wk, (1, 1), [(1, 2), (1, 2)], lhs_dilation=(2, 2),
            dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=jax.lax.Precision.HIGHEST)

    before = conv_calls()
    got = hb.call_jax(f, x, w)
    want = F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)
    close(got, want, 9 * 8, "transposed convolution")
    assert conv_calls() > before


def test_f64_convolution_matches_torch() -> None:
    g = gen()
    x = torch.randn(2, 6, 8, 8, generator=g, dtype=torch.float64)
    w = torch.randn(10, 6, 3, 3, generator=g, dtype=torch.float64)
    before = conv_calls()
    got = hb.call_jax(_jax_conv(2, (1, 1), (1, 1), (1, 1), 1), x, w)  # x64: 64-bit inputs
    want = F.conv2d(x, w, padding=1)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10,
                               msg=lambda m: f"seed {SEED}: {m}")
    assert conv_calls() > before


class _Block(torch.nn.Module):
    """A ResNet basic block with a strided downsample and a depthwise
    stage (MobileNet/ConvNeXt), ending at small spatial sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)
        self.dw = torch.nn.Conv2d(16, 16, 5, padding=2, groups=16)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.down = torch.nn.Conv2d(8, 32, 1, stride=4)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.c1(x)))
        h = self.dw(h)
        h = self.c3(torch.relu(self.c2(h))) + self.down(x)
        return self.fc(h.mean((2, 3)))


def test_torch_compile_training_matches_eager() -> None:
    torch._dynamo.reset()
    g = gen()
    torch.manual_seed(SEED)
    model = _Block()
    ref = _Block()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 8, 8, 8, generator=g)
    before = conv_calls()
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    loss = compiled(x).square().mean()
    loss.backward()
    want = ref(x).square().mean()
    want.backward()
    close(loss.detach(), want.detach(), 1, "loss")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p.grad, q.grad, 8 * 9 * 16, f"gradient of {name}")
    assert conv_calls() - before >= 5, "the block's convolutions did not use the host kernel"


def test_host_conv_off_keeps_convolutions_with_xla() -> None:
    code = (
        "import torch, jax, hlobridge as hb\n"
        "from hlobridge import _native\n"
        "f = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), 'SAME')\n"
        "hb.call_jax(f, torch.randn(2, 8, 8, 8), torch.randn(8, 8, 3, 3))\n"
        "print(_native.stats()['host_conv_calls'])\n"
    )
    env = dict(os.environ, HLOBRIDGE_HOST_CONV="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0"


class _WideBlock(torch.nn.Module):
    """Convolutions whose weight gradients are large enough that XLA's
    convolution would take them (at least 2²⁷ multiply-adds): with oneDNN's
    library they run as oneDNN backward-weights convolutions instead, and
    the training program's forward convolutions and input gradients as its
    forward and backward-data ones."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.c2 = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.c3 = torch.nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.c2(torch.relu(self.c1(x)))) + x
        return self.c3(h).square().mean()


def test_onednn_weight_gradients_match_eager() -> None:
    lib = os.environ.get("HLOBRIDGE_ONEDNN_LIBRARY", "").strip().lower()
    if lib in ("", "0", "false", "off", "no"):
        pytest.skip("no oneDNN library in this environment (requirements.txt installs it)")
    torch._dynamo.reset()
    torch.manual_seed(SEED)
    model, ref = _WideBlock(), _WideBlock()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 64, 32, 32, generator=gen())
    before = _native.stats()["onednn_weight_gradients"]
    data_before = _native.stats()["onednn_data_convolutions"]
    loss = torch.compile(model, backend="hlobridge", dynamic=False)(x)
    loss.backward()
    want = ref(x)
    want.backward()
    close(loss.detach(), want.detach(), 1, "loss")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        # The weight gradient sums over batch × output positions.
        close(p.grad, q.grad, 4 * 32 * 32, f"gradient of {name}")
    assert _native.stats()["onednn_weight_gradients"] - before >= 2, _native.stats()
    # The forward graph returns the activations its backward reads, so it
    # is lowered as a training program: its three convolutions run on the
    # library too, and so do the input gradients (c3's strided one as a
    # backward-data convolution).
    assert _native.stats()["onednn_data_convolutions"] - data_before >= 5, _native.stats()
