"""``F.embedding_bag`` / ``nn.EmbeddingBag`` through the backend, forward
and backward in one program (``hlobridge/_src/dynamo/bag_lowerings.py``).

Before the decompositions, a module using ``nn.EmbeddingBag`` with
gradients failed (``UnsupportedOpError: ... aten::_embedding_bag``), and
torch_xla's own lowering read the offsets' values while tracing.

Every mode (sum, mean, max) x input form (1-D with offsets, with
``include_last_offset``, 2-D) x per-sample weights (sum) x
``padding_idx`` is compared with eager CPU float32 on fresh random inputs
with empty and all-padding bags: the output, the weight gradient and the
per-sample-weights gradient under a random upstream gradient. Tolerance:
rtol=2e-6, atol=1e-6 (the sums run in XLA's scatter order, not eager's
index order; inputs are N(0, 1), bags hold at most 12 terms; measured
``|got - want| / (1 + |want|)`` <= 1.6e-7 over 3 seeds x all cases). ``offset2bag``, ``bag_size`` and ``max_indices`` (integers)
must be equal. A tiny DLRM-like model trains 3 SGD steps against eager
(losses rtol=1e-5, parameters rtol=1e-5/atol=1e-6), with ``torch.compile``
and with :func:`hlobridge.compile_train_step`.

The seed is fresh per run and printed in failures (``HLOBRIDGE_TEST_SEED``
replays one: ``jax_compare.SEED``).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_embedding_bag.py -q
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from jax_compare import SEED, fresh  # noqa: F401  (reseeds, resets Dynamo)
from torch import nn

import hlobridge as hb

TOL: dict[str, float] = dict(rtol=2e-6, atol=1e-6)
NUM = 20  # embedding rows
DIM = 6
PAD = 3


def _close(got: torch.Tensor, want: torch.Tensor, what: str, **tol: float) -> None:
    torch.testing.assert_close(got, want, **(tol or TOL),
                               msg=lambda m: f"seed={SEED} {what}: {m}")


def _inputs(form: str, padding: bool) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
    """Indices (with padding entries and, for 1-D, empty bags) and offsets."""
    if form == "2d":
        idx = torch.randint(0, NUM, (5, 4))
        if padding:
            idx[1] = PAD  # an all-padding bag
            idx[3, 1:3] = PAD
        return idx, None, False
    n = 12
    idx = torch.randint(0, NUM, (n,))
    if padding:
        idx[torch.randperm(n)[:4]] = PAD
    # 7 bags over 12 indices: random sorted cuts, first 0, with repeats
    # (empty bags); a trailing empty bag half the time.
    cuts = torch.sort(torch.randint(0, n + 1, (6,))).values
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), cuts])
    offsets[2] = offsets[1]  # at least one empty bag
    last = form == "1d_last"
    if last:
        offsets = torch.cat([offsets, torch.tensor([n])])
    return idx, offsets, last


CASES = [(mode, form, psw, padding)
         for mode in ("sum", "mean", "max")
         for form in ("1d", "1d_last", "2d")
         for psw in ((False, True) if mode == "sum" else (False,))
         for padding in (False, True)]


def _bag(weight: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor | None,
         psw: torch.Tensor | None, mode: str, last: bool, padding: bool) -> torch.Tensor:
    return F.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=psw,
                           include_last_offset=last, padding_idx=PAD if padding else None)


@pytest.mark.parametrize("mode,form,psw,padding", CASES)
def test_forward_and_gradients_match_eager(mode: str, form: str, psw: bool,
                                           padding: bool) -> None:
    idx, offsets, last = _inputs(form, padding)
    w0 = torch.randn(NUM, DIM)
    p0 = torch.randn(idx.numel()).reshape(idx.shape) if psw else None

    def run(f: Any) -> tuple[torch.Tensor, ...]:
        w = w0.clone().requires_grad_()
        p = p0.clone().requires_grad_() if p0 is not None else None
        out = f(w, idx, offsets, p, mode, last, padding)
        (out * up).sum().backward()
        return (out.detach(), w.grad) + ((p.grad,) if p is not None else ())

    n_bags = idx.shape[0] if offsets is None else offsets.numel() - int(last)
    up = torch.randn(n_bags, DIM)
    want = run(_bag)
    got = run(torch.compile(_bag, backend="hlobridge", dynamic=False))
    for g, e, what in zip(got, want, ("output", "weight grad", "per_sample_weights grad")):
        _close(g, e, f"{mode} {form} psw={psw} padding={padding} {what}")


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [-1, PAD])
def test_all_four_outputs_match_eager(mode: int, padding_idx: int) -> None:
    """``output, offset2bag, bag_size, max_indices`` as eager's (autograd's
    formula feeds them to the backward). ``max_indices`` is unset by eager
    outside max mode and not compared there."""
    idx, offsets, _ = _inputs("1d", padding_idx >= 0)
    w = torch.randn(NUM, DIM, requires_grad=True)

    def f(w: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.aten._embedding_bag(w, idx, offsets, False, mode, False, None,
                                             False, padding_idx)

    want = f(w, idx, offsets)
    got = torch.compile(f, backend="hlobridge", dynamic=False)(w, idx, offsets)
    _close(got[0], want[0], f"mode={mode} output")
    for k in (1, 2, 3) if mode == 2 else (1, 2):
        assert torch.equal(got[k], want[k]), (SEED, k, got[k], want[k])


def test_max_mode_ties_and_empty_bags() -> None:
    """Ties keep the first row, as eager; an empty bag gives 0 and index 0."""
    w = torch.randn(NUM, DIM)
    w[7] = w[4]  # a tie between rows 4 and 7 on every feature
    idx = torch.tensor([7, 4, 4, 7, 1])
    offsets = torch.tensor([0, 2, 2, 4])

    def f(w: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.aten._embedding_bag_forward_only(w, idx, offsets, False, 2)

    want = f(w, idx, offsets)
    with torch.no_grad():
        got = torch.compile(f, backend="hlobridge", dynamic=False)(w, idx, offsets)
    assert torch.equal(got[0], want[0]) and torch.equal(got[3], want[3]), (got, want)
    assert got[3][0].tolist() == [7] * DIM and got[3][1].tolist() == [0] * DIM


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_new_offsets_reuse_the_program(mode: str) -> None:
    """Offsets are program inputs: new values of the same shape run the
    same executable and give eager's answer."""
    bag = nn.EmbeddingBag(NUM, DIM, mode=mode)
    c = torch.compile(bag, backend="hlobridge", dynamic=False)
    idx = torch.randint(0, NUM, (12,))
    for i in range(3):
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64),
                             torch.sort(torch.randint(0, 13, (4,))).values])
        bag.zero_grad()
        got = c(idx, offsets)
        got.sum().backward()
        g = bag.weight.grad.clone()
        bag.zero_grad()
        want = bag(idx, offsets)
        want.sum().backward()
        _close(got, want, f"{mode} call {i} output")
        _close(g, bag.weight.grad, f"{mode} call {i} weight grad")
        if i == 0:
            compiles = hb.stats()["compiles"]
    assert hb.stats()["compiles"] == compiles, "new offsets compiled a new program"


def test_scale_grad_by_freq_divides_by_each_rows_count() -> None:
    """As documented (and as ``F.embedding``): each row's gradient divided by
    its count in the batch. Eager CPU's embedding_bag divides by another
    row's count (``bag_lowerings.py``), so the reference is the unscaled
    eager gradient divided by the counts."""
    idx = torch.randint(0, 8, (12,))
    offsets = torch.tensor([0, 3, 3, 9])
    w0 = torch.randn(8, DIM)
    up = torch.randn(4, DIM)

    def loss(w: torch.Tensor, freq: bool) -> torch.Tensor:
        return (F.embedding_bag(idx, w, offsets, mode="mean", scale_grad_by_freq=freq) * up).sum()

    w = w0.clone().requires_grad_()
    loss(w, False).backward()
    counts = torch.bincount(idx, minlength=8).clamp(min=1)[:, None]
    want = w.grad / counts
    w = w0.clone().requires_grad_()
    torch.compile(loss, backend="hlobridge", dynamic=False)(w, True).backward()
    _close(w.grad, want, "scale_grad_by_freq weight grad")


def test_sparse_gradient_is_a_named_error() -> None:
    bag = nn.EmbeddingBag(NUM, DIM, sparse=True)
    c = torch.compile(bag, backend="hlobridge", dynamic=False)
    with pytest.raises(hb.UnsupportedOpError, match="sparse=True"):
        c(torch.randint(0, NUM, (4, 3))).sum().backward()


class TinyDLRM(nn.Module):
    """Dense MLP + three EmbeddingBags + pairwise dot interaction + top MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 4))
        self.tables = nn.ModuleList([nn.EmbeddingBag(30, 4, mode="sum"),
                                     nn.EmbeddingBag(20, 4, mode="mean", padding_idx=0),
                                     nn.EmbeddingBag(10, 4, mode="max")])
        self.top = nn.Sequential(nn.Linear(4 + 6, 8), nn.ReLU(), nn.Linear(8, 1))
        self.register_buffer("triu", torch.triu_indices(4, 4, 1), persistent=False)  # as torchrec

    def forward(self, dense: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor,
                idx2d: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        embs = [self.tables[0](idx, offsets), self.tables[1](idx2d),
                self.tables[2](idx % 10, offsets)]
        feats = torch.stack([x] + embs, dim=1)  # (B, 4, 4)
        inter = feats @ feats.transpose(1, 2)
        z = torch.cat([x, inter[:, self.triu[0], self.triu[1]]], dim=1)
        return self.top(z).squeeze(1)


def _dlrm_batch(b: int = 6) -> tuple[torch.Tensor, ...]:
    n = 3 * b
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64),
                         torch.sort(torch.randint(0, n + 1, (b - 1,))).values])
    return (torch.randn(b, 5), torch.randint(0, 30, (n,)), offsets,
            torch.randint(0, 20, (b, 3)), torch.rand(b).round())


def _loss(model: Any, dense: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor,
          idx2d: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(model(dense, idx, offsets, idx2d), y)


def _params_close(model: nn.Module, ref: nn.Module, what: str) -> None:
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        _close(p.detach(), q.detach(), f"{what} {name}", rtol=1e-5, atol=1e-6)


def test_dlrm_trains_like_eager() -> None:
    eager = TinyDLRM()
    model = copy.deepcopy(eager)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    c = torch.compile(model, backend="hlobridge", dynamic=False)
    for i in range(3):
        batch = _dlrm_batch()
        for m, o in ((c, opt), (eager, opt_e)):
            o.zero_grad()
            loss = _loss(m, *batch)
            loss.backward()
            o.step()
            if m is c:
                got = loss.detach()
        _close(got, loss.detach(), f"step {i} loss", rtol=1e-5, atol=1e-6)
        _params_close(model, eager, f"step {i}")


def test_dlrm_compile_train_step() -> None:
    eager = TinyDLRM()
    model = copy.deepcopy(eager)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = hb.compile_train_step(model, _loss, opt)
    for i in range(3):
        batch = _dlrm_batch()
        got = step(*batch)
        opt_e.zero_grad()
        want = _loss(eager, *batch)
        want.backward()
        opt_e.step()
        _close(got.detach(), want.detach(), f"step {i} loss", rtol=1e-5, atol=1e-6)
        _params_close(model, eager, f"step {i}")
    assert len(step.graphs) == 1
