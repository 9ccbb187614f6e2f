"""Convolutions on the CPU plugin's oneDNN convolution (``__onednn$convolution``,
written by the host lowering, ``bridge/core/src/lower/host_conv/onednn.rs``;
docs/host_conv.md).

Each case is a JAX convolution exported to StableHLO, compiled by the
compile service (which must route it to oneDNN, or not, as stated) and run
on fresh random inputs against torch in float64. The tolerance is float32
accumulation (``2e-6 * sqrt(K)`` relative to the output's scale, K the
multiply-adds per output): a bf16 or tf32 down-conversion inside oneDNN
(``ONEDNN_DEFAULT_FPMATH_MODE``) would be 10-1000 times larger. Also:
``HLOBRIDGE_ONEDNN_CONV=0`` keeps the host kernel, a program with oneDNN
calls is not written to the disk cache (the plugin cannot serialize it) and
``compile_for("cpu")``, which serializes, still works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

from hlobridge import _native

from onednn_helpers import check_accumulation, run_f32

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
ONEDNN = "__onednn$convolution"

# (name, x shape NC..., w shape OI..., stride, padding (lo, hi) per dim, dilation, groups, oneDNN?)
CASES = [
    ("3x3", (4, 8, 10, 10), (16, 8, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, True),
    ("7x7-stride2-pad3", (2, 3, 20, 20), (16, 3, 7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1), 1, True),
    ("1x1-stride2", (4, 16, 8, 8), (32, 16, 1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1, True),
    ("3x3-dilation2", (2, 8, 12, 12), (8, 8, 3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 1, True),
    ("asymmetric", (2, 6, 9, 13), (10, 6, 2, 4), (2, 3), ((1, 0), (2, 1)), (2, 1), 1, True),
    ("groups2", (2, 8, 9, 9), (12, 4, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2, True),
    ("conv1d", (4, 8, 40), (16, 8, 5), (2,), ((2, 2),), (1,), 1, True),
    ("conv3d", (2, 4, 6, 7, 5), (8, 4, 3, 3, 2), (1, 1, 1), ((1, 1), (1, 1), (1, 0)), (1, 1, 1), 1, True),
    # Depthwise (every window since rewrite version 6's channels-last calls).
    ("depthwise", (4, 16, 10, 10), (16, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 16, True),
    # Left to the host kernel: a window larger than the result.
    ("small-spatial", (8, 64, 2, 2), (64, 64, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, False),
]


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def _stablehlo(xs, ws, stride, padding, dilation, groups, nhwc=False) -> str:
    nsp = len(xs) - 2
    sp = "DHW"[3 - nsp:]
    spec = (("N" + sp + "C", sp + "IO", "N" + sp + "C") if nhwc else
            ("NC" + sp, "OI" + sp, "NC" + sp))

    def f(x, w):
        return jax.lax.conv_general_dilated(
            x, w, window_strides=stride, padding=list(padding), rhs_dilation=dilation,
            dimension_numbers=spec, feature_group_count=groups,
            precision=jax.lax.Precision.HIGHEST)

    if nhwc:
        xs = (xs[0], *xs[2:], xs[1])
        ws = (*ws[2:], ws[1], ws[0])
    args = (jax.ShapeDtypeStruct(xs, jnp.float32), jax.ShapeDtypeStruct(ws, jnp.float32))
    return jax.jit(f).lower(*args).as_text()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_against_float64(case) -> None:
    name, xs, ws, stride, padding, dilation, groups, onednn = case
    exe, _ = _native.compile(_stablehlo(xs, ws, stride, padding, dilation, groups))
    assert (exe.host_kernels.get(ONEDNN, 0) == 1) == onednn, exe.host_kernels
    g = _gen()
    x = torch.randn(xs, generator=g)
    w = torch.randn(ws, generator=g)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(xs) - 2]
    # torch pads symmetrically: pad the input by hand.
    pads = [p for lo_hi in reversed(padding) for p in lo_hi]
    want = conv(F.pad(x.double(), pads), w.double(), stride=stride, dilation=dilation, groups=groups)
    k = ws[1] * int(torch.tensor(ws[2:]).prod())
    check_accumulation(run_f32(exe, x, w), want, k, f"seed {SEED}, {name}")


def test_channels_last_operands() -> None:
    """NHWC / HWIO dimension numbers: the config names the permuted dims."""
    xs, ws = (2, 8, 9, 9), (16, 8, 3, 3)
    exe, _ = _native.compile(_stablehlo(xs, ws, (2, 1), ((1, 1), (0, 2)), (1, 1), 1, nhwc=True))
    assert exe.host_kernels.get(ONEDNN) == 1, exe.host_kernels
    g = _gen()
    x = torch.randn(xs, generator=g)
    w = torch.randn(ws, generator=g)
    want = F.conv2d(F.pad(x.double(), [0, 2, 1, 1]), w.double(), stride=(2, 1))
    got = run_f32(exe, x.permute(0, 2, 3, 1), w.permute(2, 3, 1, 0)).permute(0, 3, 1, 2)
    check_accumulation(got, want, 72, f"seed {SEED}, nhwc")


def _child(code: str, **env: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


_PROGRAM = textwrap.dedent(f"""
    import jax, jax.numpy as jnp
    from hlobridge import _native
    f = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME")
    text = jax.jit(f).lower(jax.ShapeDtypeStruct((2, 8, 12, 12), jnp.float32),
                            jax.ShapeDtypeStruct((16, 8, 3, 3), jnp.float32)).as_text()
""")


def test_switch_off_keeps_the_host_kernel() -> None:
    out = _child(_PROGRAM + "exe, _ = _native.compile(text); print(sorted(exe.host_kernels))",
                 HLOBRIDGE_ONEDNN_CONV="0")
    assert out == "['hlobridge_conv']", out


def test_not_written_to_the_disk_cache(tmp_path) -> None:
    code = _PROGRAM + ("exe, _ = _native.compile(text); i = _native.compile_cache_info(); "
                       "print(exe.host_kernels.get('__onednn$convolution'), i['disk_writes'], exe.from_disk_cache)")
    for _ in range(2):
        out = _child(code, HLOBRIDGE_CACHE="1", HLOBRIDGE_CACHE_DIR=str(tmp_path))
        assert out == "1 0 False", out


def test_compile_for_cpu_serializes_without_onednn() -> None:
    out = _child(_PROGRAM + ("r = _native.compile_for_target('cpu', text); "
                             "print(sorted(k for k, _ in r['custom_calls']))"))
    # Lowered again without the oneDNN route: the host kernel, no oneDNN call.
    assert "hlobridge_conv" in out and "onednn" not in out, out


# Forward and both gradients in one program, as the training step needs them:
# (name, x shape, w shape, stride, padding, dilation, groups, oneDNN calls).
# The oneDNN calls: the forward; stride-1 input gradients; the weight
# gradient of a stem (<= 4 input channels, stride <= 2); a strided 1x1's
# input gradient (1x1 call + spreading pad); depthwise only from 7x7 (a
# program with backward convolutions keeps rewrite version 5's routing).
GRAD_CASES = [
    ("3x3", (2, 8, 10, 10), (16, 8, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, 2),
    ("stem-7x7-stride2", (2, 3, 32, 32), (16, 3, 7, 7), (2, 2), ((3, 3), (3, 3)), (1, 1), 1, 2),
    ("stem-3x3-stride2-odd", (2, 3, 33, 31), (8, 3, 3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1, 2),
    ("1x1-stride2", (2, 16, 14, 14), (32, 16, 1, 1), (2, 2), ((0, 0), (0, 0)), (1, 1), 1, 2),
    ("1x1-stride2-odd-padded", (2, 16, 15, 13), (24, 16, 1, 1), (2, 3), ((1, 0), (2, 1)), (1, 1), 1, 2),
    ("3x3-stride2", (2, 8, 14, 14), (16, 8, 3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 1, 1),
    ("grouped-3x3", (2, 8, 9, 9), (12, 4, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2, 2),
    ("dilated-3x3", (2, 8, 12, 12), (8, 8, 3, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 1, 2),
    ("asymmetric", (2, 6, 11, 13), (10, 6, 2, 4), (1, 1), ((1, 0), (2, 1)), (1, 1), 1, 2),
    ("depthwise-7x7", (2, 16, 12, 12), (16, 1, 7, 7), (1, 1), ((3, 3), (3, 3)), (1, 1), 16, 2),
    ("depthwise-3x3", (2, 16, 12, 12), (16, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 16, 0),
]


def _stablehlo_grads(xs, ws, stride, padding, dilation, groups) -> str:
    def conv(x, w):
        return jax.lax.conv_general_dilated(
            x, w, window_strides=stride, padding=list(padding), rhs_dilation=dilation,
            dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups,
            precision=jax.lax.Precision.HIGHEST)

    def f(x, w, dy):
        y, vjp = jax.vjp(conv, x, w)
        dx, dw = vjp(dy)
        return y, dx, dw

    ys = jax.eval_shape(conv, jax.ShapeDtypeStruct(xs, jnp.float32),
                        jax.ShapeDtypeStruct(ws, jnp.float32)).shape
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in (xs, ws, ys)]
    return jax.jit(f).lower(*args).as_text()


def _library() -> bool:
    """Whether oneDNN's library is found (the package points
    ``HLOBRIDGE_ONEDNN_LIBRARY`` at it on import)."""
    lib = os.environ.get("HLOBRIDGE_ONEDNN_LIBRARY", "").strip().lower()
    return lib not in ("", "0", "false", "off", "no")


@pytest.mark.parametrize("route", ["onednn-gradients", "auto"])
@pytest.mark.parametrize("case", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_forward_and_gradients_against_float64(case, route, monkeypatch) -> None:
    """A training program's three convolutions. ``onednn-gradients`` keeps
    its forward-form ones on the plugin's thunk (``calls``); ``auto`` with
    oneDNN's library sends them to the host kernel, which runs them on the
    library, and only a stem's weight gradient stays on the thunk."""
    name, xs, ws, stride, padding, dilation, groups, calls = case
    monkeypatch.setenv("HLOBRIDGE_CONV_WGRAD", route)
    exe, _ = _native.compile(_stablehlo_grads(xs, ws, stride, padding, dilation, groups))
    if route == "auto" and _library():
        calls = int(name.startswith("stem"))
        assert exe.host_kernels.get("hlobridge_conv", 0) + calls == 3, exe.host_kernels
    assert exe.host_kernels.get(ONEDNN, 0) == calls, exe.host_kernels
    g = _gen()
    x = torch.randn(xs, generator=g, dtype=torch.float64)
    w = torch.randn(ws, generator=g, dtype=torch.float64)
    pads = [p for lo_hi in reversed(padding) for p in lo_hi]
    xp = F.pad(x, pads).requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    y = F.conv2d(xp, wr, stride=stride, dilation=dilation, groups=groups)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64)
    dxp, dw = torch.autograd.grad(y, (xp, wr), dy)
    # Undo the hand padding: the gradient of the unpadded input (a negative
    # pad crops).
    dx = F.pad(dxp, [-p for p in pads])
    arrays = [x.float().contiguous(), w.float().contiguous(), dy.float().contiguous()]
    outs, *_ = _native.execute(exe, [a.data_ptr() for a in arrays], [list(a.shape) for a in arrays],
                               [_native.ELEMENT_TYPES["f32"]] * 3, arrays)
    got = [torch.from_dlpack(o) for o in outs]
    taps = ws[2] * ws[3]
    k_fwd = ws[1] * taps
    k_dx = ws[0] // groups * taps
    k_dw = xs[0] * y.shape[2] * y.shape[3]
    check_accumulation(got[0], y.detach(), k_fwd, f"seed {SEED}, {name} forward")
    check_accumulation(got[1], dx, k_dx, f"seed {SEED}, {name} input gradient")
    check_accumulation(got[2], dw, k_dw, f"seed {SEED}, {name} weight gradient")


def test_host_kernels_next_to_channels_last_calls() -> None:
    """An inference block: a 1x1 convolution (a oneDNN call whose input and
    result are pinned channels-last), ReLU, then a 3x3 convolution (oneDNN,
    channels-last) and a depthwise 3x3 with a reversed window, which runs on
    the host kernel. The host kernel reads its buffers row-major, whatever
    layout XLA picks for the ReLU between (the lowering pins row-major
    layouts on host-kernel calls; without that, a host kernel next to such
    calls read channels-last data as row-major: MobileNetV3-L's training
    step computed wrong gradients before training programs were left out of
    the channels-last layouts). Against float64 torch."""

    def t(s):
        return "tensor<" + "x".join(map(str, s)) + "xf32>"

    xs, w1s, w2s, w3s, ys = (2, 8, 12, 12), (16, 8, 1, 1), (16, 1, 3, 3), (24, 16, 3, 3), (2, 16, 12, 12)
    y3s = (2, 24, 12, 12)
    win = "window = {stride = [1, 1], pad = [[1, 1], [1, 1]]"
    text = f"""func.func public @main(%x: {t(xs)}, %w1: {t(w1s)}, %w2: {t(w2s)}, %w3: {t(w3s)}) -> ({t(ys)}, {t(y3s)}) {{
  %0 = stablehlo.convolution(%x, %w1) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {{stride = [1, 1]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({t(xs)}, {t(w1s)}) -> {t(ys)}
  %z = stablehlo.constant dense<0.000000e+00> : {t(ys)}
  %1 = stablehlo.maximum %0, %z : {t(ys)}
  %2 = stablehlo.convolution(%1, %w2) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], {win}, reverse = [true, true]}} {{batch_group_count = 1 : i64, feature_group_count = 16 : i64}} : ({t(ys)}, {t(w2s)}) -> {t(ys)}
  %3 = stablehlo.convolution(%1, %w3) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], {win}}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({t(ys)}, {t(w3s)}) -> {t(y3s)}
  return %2, %3 : {t(ys)}, {t(y3s)}
}}"""
    exe, _ = _native.compile(text)
    assert exe.host_kernels.get(ONEDNN, 0) == 2 and exe.host_kernels.get("hlobridge_conv") == 1, \
        exe.host_kernels
    gen = _gen()
    x, w1, w2, w3 = (torch.randn(s, generator=gen, dtype=torch.float64) for s in (xs, w1s, w2s, w3s))
    h = F.relu(F.conv2d(x, w1))
    want2 = F.conv2d(h, w2.flip(-1, -2), padding=1, groups=16)
    want3 = F.conv2d(h, w3, padding=1)
    got = _run_all(exe, x, w1, w2, w3)
    # K: multiply-adds per output (the 1x1 convolution's 8 channels folded in).
    check_accumulation(got[0], want2, 9 * 8, f"seed {SEED}, reversed depthwise on the host kernel")
    check_accumulation(got[1], want3, 9 * 16 * 8, f"seed {SEED}, 3x3 on oneDNN")


def _run_all(exe, *arrays: torch.Tensor) -> list[torch.Tensor]:
    arrays = tuple(a.float().contiguous() for a in arrays)
    outs, *_ = _native.execute(exe, [a.data_ptr() for a in arrays], [list(a.shape) for a in arrays],
                               [_native.ELEMENT_TYPES["f32"]] * len(arrays), list(arrays))
    return [torch.from_dlpack(o) for o in outs]


@pytest.mark.parametrize("hw", [28, 7])
def test_1x1_weight_gradient_as_batched_products(hw: int) -> None:
    """torch_xla's 1x1 weight gradient (``[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]``):
    from 28x28 maps a per-image ``dot_general`` summed over images (no
    convolution call left), below that a convolution; against float64 torch."""
    n, c, o = 3, 16, 24

    def t(s):
        return "tensor<" + "x".join(map(str, s)) + "xf32>"

    xs, dys, ws = (n, c, hw, hw), (n, o, hw, hw), (1, 1, c, o)
    text = f"""func.func public @main(%x: {t(xs)}, %dy: {t(dys)}) -> {t(ws)} {{
  %0 = stablehlo.convolution(%x, %dy) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f], window = {{stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({t(xs)}, {t(dys)}) -> {t(ws)}
  return %0 : {t(ws)}
}}"""
    exe, _ = _native.compile(text)
    assert (not exe.host_kernels) == (hw == 28), exe.host_kernels
    g = _gen()
    x = torch.randn(xs, generator=g)
    dy = torch.randn(dys, generator=g)
    w = torch.zeros(o, c, 1, 1, dtype=torch.float64)
    want = torch.ops.aten.convolution_backward(dy.double(), x.double(), w, None, [1, 1], [0, 0], [1, 1],
                                               False, [0, 0], 1, [False, True, False])[1]
    check_accumulation(run_f32(exe, x, dy), want.permute(2, 3, 1, 0), n * hw * hw,
                       f"seed {SEED}, 1x1 weight gradient @{hw}")


def _bn_block(groups: int) -> tuple[str, list[tuple[int, ...]]]:
    """Inference block as the bridge captures eval BatchNorm: conv (3x3,
    ``groups``) -> ``(y - mean) * rsqrt(var + eps) * gamma + beta`` ->
    ReLU -> 1x1 conv -> the same BatchNorm form -> + residual -> ReLU, then
    a 1x1 conv with a bias add read only by a last 1x1 conv."""

    def t(s):
        return "tensor<" + "x".join(map(str, s)) + "xf32>"

    n, c, hw = 2, 16, 10
    xs, w1s, w2s, w3s, w4s, vs = (n, c, hw, hw), (c, c // groups, 3, 3), (c, c, 1, 1), (c, c, 1, 1), \
        (c, c, 1, 1), (c,)
    ys, v = t(xs), t(vs)

    def bn(y: str, k: int) -> str:
        return f"""  %mb{k} = stablehlo.broadcast_in_dim %m{k}, dims = [1] : ({v}) -> {ys}
  %s{k} = stablehlo.subtract {y}, %mb{k} : {ys}
  %ve{k} = stablehlo.add %var{k}, %eps : {v}
  %rs{k} = stablehlo.rsqrt %ve{k} : {v}
  %rb{k} = stablehlo.broadcast_in_dim %rs{k}, dims = [1] : ({v}) -> {ys}
  %n{k} = stablehlo.multiply %s{k}, %rb{k} : {ys}
  %gb{k} = stablehlo.broadcast_in_dim %g{k}, dims = [1] : ({v}) -> {ys}
  %a{k} = stablehlo.multiply %n{k}, %gb{k} : {ys}
  %bb{k} = stablehlo.broadcast_in_dim %b{k}, dims = [1] : ({v}) -> {ys}
  %bn{k} = stablehlo.add %a{k}, %bb{k} : {ys}
"""

    def conv(out: str, x: str, w: str, ws: tuple[int, ...], pad: int, g: int) -> str:
        return (f"  {out} = stablehlo.convolution({x}, {w}) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], "
                f"window = {{stride = [1, 1], pad = [[{pad}, {pad}], [{pad}, {pad}]]}} {{batch_group_count = 1 : i64, "
                f"feature_group_count = {g} : i64}} : ({ys}, {t(ws)}) -> {ys}\n")

    params = ", ".join(f"%m{k}: {v}, %var{k}: {v}, %g{k}: {v}, %b{k}: {v}" for k in (1, 2))
    text = (f"func.func public @main(%x: {ys}, %w1: {t(w1s)}, %w2: {t(w2s)}, %w3: {t(w3s)}, %w4: {t(w4s)}, "
            f"%bias: {v}, {params}) -> ({ys}, {ys}) {{\n"
            f"  %eps = stablehlo.constant dense<9.99999974E-6> : {v}\n"
            f"  %z = stablehlo.constant dense<0.000000e+00> : {ys}\n"
            + conv("%c1", "%x", "%w1", w1s, 1, groups) + bn("%c1", 1)
            + f"  %r1 = stablehlo.maximum %bn1, %z : {ys}\n"
            + conv("%c2", "%r1", "%w2", w2s, 0, 1) + bn("%c2", 2)
            + f"  %res = stablehlo.add %bn2, %x : {ys}\n  %r2 = stablehlo.maximum %res, %z : {ys}\n"
            + conv("%c3", "%r2", "%w3", w3s, 0, 1)
            + f"  %bias_b = stablehlo.broadcast_in_dim %bias, dims = [1] : ({v}) -> {ys}\n"
            + f"  %c3b = stablehlo.add %c3, %bias_b : {ys}\n"
            + conv("%c4", "%c3b", "%w4", w4s, 0, 1)
            + f"  return %r2, %c4 : {ys}, {ys}\n}}")
    return text, [xs, w1s, w2s, w3s, w4s, vs] + [vs] * 8


@pytest.mark.parametrize("groups", [1, 16], ids=["dense", "depthwise"])
@pytest.mark.parametrize("mode", ["fuse", "1"])
def test_fused_epilogues_against_float64(groups: int, mode: str, monkeypatch) -> None:
    """``HLOBRIDGE_ONEDNN_CONV=fuse`` (rewrite version 7) folds each
    channels-last call's epilogue into its oneDNN post-ops (BatchNorm into
    scaled weights and a bias, the residual add, ReLU; a bias add read only
    by another call); the default leaves them to XLA. Both results against
    float64 torch; K is the multiply-adds along each result's path."""
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_CONV", mode)
    text, shapes = _bn_block(groups)
    exe, _ = _native.compile(text)
    assert exe.host_kernels.get(ONEDNN) == 4, exe.host_kernels
    g = _gen()
    x, w1, w2, w3, w4, bias, *bn = (torch.randn(s, generator=g, dtype=torch.float64) for s in shapes)
    bn[1], bn[5] = bn[1].abs() + 0.5, bn[5].abs() + 0.5  # variances

    def batch_norm(y, m, var, gamma, beta):
        return F.batch_norm(y, m, var, gamma, beta, training=False, eps=1e-5)

    r1 = F.relu(batch_norm(F.conv2d(x, w1, padding=1, groups=groups), *bn[:4]))
    r2 = F.relu(batch_norm(F.conv2d(r1, w2), *bn[4:]) + x)
    c4 = F.conv2d(F.conv2d(r2, w3) + bias.view(1, -1, 1, 1), w4)
    got = _run_all(exe, x, w1, w2, w3, w4, bias, *bn)
    k = 9 * 16 // groups + 16
    check_accumulation(got[0], r2, k, f"seed {SEED}, conv-BN-ReLU-conv-BN-add-ReLU")
    check_accumulation(got[1], c4, k + 32, f"seed {SEED}, conv+bias-conv")
