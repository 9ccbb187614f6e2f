"""Mixed precision: ``torch.autocast(device_type="cpu", dtype=torch.bfloat16)``
through ``torch.compile(backend="hlobridge")`` (forward and backward) and
through :func:`hlobridge.compile_train_step` (three SGD steps), against
eager torch under the same autocast, for one model per family: an MLP, a
tiny transformer encoder, a tiny CNN with BatchNorm.

Inputs and weights are fresh random each run (seed printed on failure; set
HLOBRIDGE_TEST_SEED to replay).

Tolerances (bf16 has 8 significant bits, unit roundoff 2^-8 = 3.9e-3; XLA:CPU
rounds after every elementwise op where torch's bf16 kernels often round
once, docs/testing.md): the loss within rtol=2e-2/atol=1e-2 of eager
autocast's; gradients, parameters and buffers by the house statistical
check (``model_zoo/accuracy.py``'s ``check_statistical``, PyTorch's
``same`` with ``fp64_ref``) one precision down: eager float32 (the same
model without autocast) is the reference, eager bf16 stands alongside.
Every element within torch's bf16 default (rtol=1.6e-2, atol=1e-5) of
float32, or an RMS error from float32 within 5x (:data:`BF16_MULTIPLIER`;
8x up to 500 elements, 10x up to 10) eager bf16's own plus 5% of the
change (for a gradient: of the gradient), and the change in float32's
direction. Elementwise
distances between two bf16 computations are not compared: one rounding
flip makes them a coin toss across seeds and CPUs.

Why the share of the change: bf16 rounding flips ReLU masks (the
transformer layer's feed-forward ReLU), and each flip moves a whole row of
the layer's weight gradient; eager bf16 may flip none where hlobridge,
rounding more often, flips a few. The former rule (3x eager bf16's RMS
error plus 1% of float32's RMS) failed ``linear1.weight``'s gradient for
seed 2392542505 on this AMD EPYC with and without AVX2 emulation
(hlobridge 2.07e-4 from float32, eager bf16 2.28e-5, bound 1.15e-4; now
0.59 of the bound), and over 7 seeds under AVX2 emulation reached
0.23-1.8 of its bound. Now the worst of 14 seeds (base and
``XLA_FLAGS=--xla_cpu_max_isa=AVX2 ATEN_CPU_CAPABILITY=avx2
ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=AVX2``: the same figures) is 0.59. A
real defect still fails: hlobridge's gradients scaled by 1.1, or its
learning rate by 1.1 (0.055 for 0.05), fail every one of these tests on
seeds 2392542505 and 28757. The compiled loss must also differ from
float32's by more than float32 rounding: the program really computed in
bf16.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_autocast.py -q
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from model_zoo.accuracy import check_statistical

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
LOSS_TOL = dict(rtol=2e-2, atol=1e-2)
BF16_TOL = dict(rtol=1.6e-2, atol=1e-5)
"""torch.testing's default bfloat16 tolerance: the elementwise pass of the
statistical check (its ``atol / 10`` adds 1e-6 to the RMS bound)."""
BF16_MULTIPLIER = 5.0
"""The least RMS multiplier (``check_statistical``'s is 3 for tensors over
500 elements): hlobridge's bf16 error from float32 is 1.3-3.5x eager
bf16's by itself (XLA rounds after every elementwise op, eager's bf16
kernels often once), e.g. the transformer's ``linear1.weight`` gradient
8.7e-4 against eager bf16's 2.5e-4 (seed 28757), which 3x would leave to
the flip share alone (0.83 of that bound)."""


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(SEED)


def near(got: torch.Tensor, want: torch.Tensor, f32: torch.Tensor, what: str,
         start: torch.Tensor) -> None:
    """``got`` (hlobridge, bf16) against eager float32 (``f32``), judged as
    ``model_zoo/accuracy.py`` judges float32 training against float64, one
    precision down: eager bf16 (``want``) plays eager float32's part and
    eager float32 plays float64's. Every element within :data:`BF16_TOL` of
    float32, or hlobridge's RMS error from float32 within 3x (10x for tiny
    tensors) eager bf16's own plus ``FLIP_REL`` (5%) of the change from
    ``start`` (zeros for a gradient: the gradient itself), and the change in
    float32's direction. Elementwise distances between two bf16
    implementations are not compared: one rounding flip moves an element by
    a bf16 ulp of its neighbours' scale, and a ReLU mask flipped by bf16
    rounding moves a whole row."""
    check_statistical(got, want, f32, BF16_TOL, f"seed={SEED} {what}", start,
                      names=("eager float32", "eager bf16"), min_multiplier=BF16_MULTIPLIER)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class TinyTransformer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 32)
        self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.emb(ids)).mean(1))


class TinyCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)  # BatchNorm follows
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3)))


def _mlp_batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(8, 16), torch.randint(0, 4, (8,))


def _tf_batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, 50, (4, 6)), torch.randint(0, 4, (4,))


def _cnn_batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,))


FAMILIES: dict[str, tuple[type[torch.nn.Module], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "mlp": (MLP, _mlp_batch),
    "transformer": (TinyTransformer, _tf_batch),
    "cnn_batchnorm": (TinyCNN, _cnn_batch),
}


def loss_fn(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor,
            bf16: bool = True) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x)
    assert logits.dtype == (torch.bfloat16 if bf16 else torch.float32)
    return F.cross_entropy(logits.float(), y)


@pytest.mark.parametrize("family", FAMILIES)
def test_torch_compile_forward_and_backward_match_eager_autocast(family: str) -> None:
    cls, batch = FAMILIES[family]
    eager = cls()
    start = {n: b.detach().clone() for n, b in eager.named_buffers()}
    compiled_model = copy.deepcopy(eager)
    ref32 = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="hlobridge")
    x, y = batch()
    want = loss_fn(eager, x, y)
    want.backward()
    got = loss_fn(compiled, x, y)
    got.backward()
    f32 = loss_fn(ref32, x, y, bf16=False)
    f32.backward()
    torch.testing.assert_close(got, want, **LOSS_TOL, msg=lambda m: f"seed={SEED} loss: {m}")
    # The program really computed in bf16: a float32 program would give
    # float32's gradients to ~1e-6 relative; bf16 rounding moves them by
    # ~1e-3. Checked over every gradient together: the loss alone can land
    # within 1e-6 of float32's by chance (near-uniform logits).
    moved = max(((q.grad - r.grad).abs().max() / r.grad.abs().max().clamp_min(1e-30)).item()
                for q, r in zip(compiled_model.parameters(), ref32.parameters())
                if q.grad is not None and r.grad is not None)
    assert moved > 1e-4, (
        f"seed={SEED}: the compiled gradients equal float32's (largest relative "
        f"difference {moved:.2e}; loss {got.item()} vs f32 {f32.item()}): no bf16")
    for (n, p), q, r in zip(eager.named_parameters(), compiled_model.parameters(),
                            ref32.parameters()):
        assert q.grad is not None and q.grad.dtype == p.dtype, n
        near(q.grad, p.grad, r.grad, f"grad of {n}",  # type: ignore[arg-type]
             torch.zeros_like(q))
    for (n, b), c, r in zip(eager.named_buffers(), compiled_model.buffers(), ref32.buffers()):
        near(c, b, r, f"buffer {n}", start[n])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("where", ["inside_loss_fn", "around_the_call"])
def test_compile_train_step_matches_eager_autocast(family: str, where: str) -> None:
    cls, batch = FAMILIES[family]
    eager = cls()
    start = {n: t.detach().clone() for n, t in [*eager.named_parameters(),
                                                *eager.named_buffers()]}
    model = copy.deepcopy(eager)
    ref32 = copy.deepcopy(eager)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt32 = torch.optim.SGD(ref32.parameters(), lr=0.05, momentum=0.9)

    def plain(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
              ) -> torch.Tensor:
        return F.cross_entropy(m(x).float(), y)

    fn = loss_fn if where == "inside_loss_fn" else plain
    step = hb.compile_train_step(model, fn, opt)
    for i in range(3):
        x, y = batch()
        if where == "inside_loss_fn":
            got = step(x, y)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = step(x, y)
        for m, o, bf16 in ((eager, opt_e, True), (ref32, opt32, False)):
            o.zero_grad()
            want = loss_fn(m, x, y, bf16)
            want.backward()
            o.step()
            if bf16:
                torch.testing.assert_close(got, want.detach(), **LOSS_TOL,
                                           msg=lambda m: f"seed={SEED} step {i} loss: {m}")
    for (n, p), q, r in zip(eager.named_parameters(), model.parameters(), ref32.parameters()):
        assert q.dtype == torch.float32
        near(q, p, r, f"parameter {n}", start[n])
    for (n, b), c, r in zip(eager.named_buffers(), model.buffers(), ref32.buffers()):
        near(c, b, r, f"buffer {n}", start[n])
    assert len(step.graphs) == 1


def test_autocast_state_is_part_of_the_train_step_signature() -> None:
    """The same step called with and without an autocast context traces two
    programs (a float32 program is not reused for a bf16 call)."""
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def plain(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
              ) -> torch.Tensor:
        return F.cross_entropy(m(x).float(), y)

    step = hb.compile_train_step(model, plain, opt)
    x, y = _mlp_batch()
    step(x, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        step(x, y)
    step(x, y)
    assert len(step.graphs) == 2


def attention_like(x: torch.Tensor, w: torch.Tensor, bf16: bool = True) -> torch.Tensor:
    """Scaled scores, softmax, tanh-GELU with Python-scalar constants: under
    autocast their backward holds bf16 0-d constants (once failed: numpy
    has no bfloat16)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        h = x @ w
        s = (h @ h.transpose(-1, -2)) / 8.0**0.5
        o = torch.softmax(s, -1) @ h
        o = F.gelu(o, approximate="tanh") * 0.5 + 1.0
        o = F.layer_norm(o, (8,))
    # A weighted sum, not ``pow(2).mean()``: after a LayerNorm without affine
    # that is ~1 whatever w is, and its gradient pure rounding noise.
    return (o.float() * torch.linspace(-1.0, 1.0, 8)).sum()


def test_bf16_scalar_constants_in_the_backward() -> None:
    x, w0 = torch.randn(2, 4, 8), torch.randn(8, 8)
    w, we, w32 = (w0.clone().requires_grad_() for _ in range(3))
    got = torch.compile(attention_like, backend="hlobridge")(x, w)
    got.backward()
    want = attention_like(x, we)
    want.backward()
    attention_like(x, w32, bf16=False).backward()
    # The loss sums 64 bf16-rounded terms of magnitude <~2 (each rounded a few
    # times, 2^-8 relative): their rounding errors add up to ~0.05 (random
    # walk); 0.25 is about 5 sigma. A relative tolerance would mean nothing
    # where the sum happens to be near 0.
    torch.testing.assert_close(got, want, rtol=0.0, atol=0.25,
                               msg=lambda m: f"seed={SEED} loss: {m}")
    near(w.grad, we.grad, w32.grad, "grad of w", torch.zeros_like(w))  # type: ignore[arg-type]
