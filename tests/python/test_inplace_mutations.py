"""Mutated graph inputs updated in place by the ``torch.compile`` backend
(inference graphs): the program marks each mutated input
``tf.aliasing_output`` and the hot path donates its zero-copy view, so the
new value is written into the tensor's own memory (a static KV cache is not
copied on every step). Every test compares the outputs and the mutated
inputs with eager torch, over several calls (the first runs the general
path, the later ones the native hot path), on fresh random inputs.

Tolerances: outputs and updated values rtol=1e-4/atol=1e-5 (float32, XLA
vs torch kernels); cache slots no call wrote are compared exactly.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_inplace_mutations.py -q
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from hlobridge import dynamo as hbd
from hlobridge._src.dynamo.program import CompiledGraph, compiled_graphs, graphs_compiled

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
OUT_TOL = dict(rtol=1e-4, atol=1e-5)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, **OUT_TOL, msg=lambda m: f"seed={SEED}: {m}")


def exact(a: torch.Tensor, b: torch.Tensor) -> None:
    assert torch.equal(a, b), f"seed={SEED}: max diff {(a - b).abs().max()}"


class Decoder(torch.nn.Module):
    """One attention layer over a static K/V cache held as buffers, updated
    with ``index_copy_`` at ``pos`` (the shape of Hugging Face's
    ``StaticCache`` decode step)."""

    def __init__(self, b: int = 2, h: int = 3, n: int = 16, d: int = 8) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(h * d, 3 * h * d)
        self.h, self.d = h, d
        self.register_buffer("k", torch.randn(b, h, n, d))
        self.register_buffer("v", torch.randn(b, h, n, d))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self.qkv(x).view(b, 1, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        att = (q @ self.k.transpose(-1, -2) / self.d ** 0.5).softmax(-1)
        return (att @ self.v).reshape(b, -1)


def aliases(since: int) -> list[tuple[int, int]]:
    """The aliases of the programs of the graphs compiled after the first
    ``since`` (the graphs of this test)."""
    return [a for g in compiled_graphs(since=since) for p in g.programs.values() for a in p.aliases]


def returned_inputs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on compiled graphs' calls: per call, how many outputs are graph
    inputs themselves (results written in place)."""
    counts: list[int] = []
    call = CompiledGraph.__call__

    def spy(self: CompiledGraph, *args: Any) -> Any:
        flat = args[0] if len(args) == 1 and type(args[0]) is list else args
        outs = call(self, *args)
        counts.append(sum(any(o is a for a in flat) for o in outs if o is not None))
        return outs

    monkeypatch.setattr(CompiledGraph, "__call__", spy)
    return counts


def test_static_cache_is_updated_in_place_like_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    in_place = returned_inputs(monkeypatch)
    before = graphs_compiled()
    model = Decoder().eval()
    ref = Decoder().eval()
    ref.load_state_dict(model.state_dict())
    k_ptr, v_ptr = model.k.data_ptr(), model.v.data_ptr()
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False)
    written = torch.zeros(16, dtype=torch.bool)
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(2, 24)
            pos = torch.randint(0, 16, (1,))
            written[pos] = True
            close(compiled(x, pos), ref(x, pos))
            for c, c_ref in ((model.k, ref.k), (model.v, ref.v)):
                close(c, c_ref)  # the new slots: computed by a Linear
                exact(c[:, :, ~written], c_ref[:, :, ~written])  # the others: untouched
    assert (model.k.data_ptr(), model.v.data_ptr()) == (k_ptr, v_ptr)
    assert len(aliases(before)) == 2, aliases(before)
    # The first call builds the program (general path: AOTAutograd copies);
    # the hot-path calls write both caches in place.
    assert in_place[1:] == [2, 2, 2], in_place


def test_repeated_in_place_updates_accumulate_like_eager() -> None:
    """The new value depends on the old one (read and written in one
    program), over several hot-path calls."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(0.5).add_(y)
        return x.sin() + y

    before = graphs_compiled()
    fn = torch.compile(f, backend=hbd.backend, dynamic=False)
    x = torch.randn(64, 32)
    x_ref = x.clone()
    for _ in range(4):
        y = torch.randn(64, 32)
        close(fn(x, y), f(x_ref, y))
        close(x, x_ref)
    assert aliases(before), "the mutated input was not aliased"


def test_mutated_input_returned_as_output() -> None:
    """The mutated input is also an output: eager returns the input itself."""
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.add_(y)
        return x, x * 2

    fn = torch.compile(f, backend=hbd.backend, dynamic=False)
    x = torch.randn(40, 16)
    x_ref = x.clone()
    for _ in range(3):
        y = torch.randn(40, 16)
        a, b = fn(x, y)
        ea, eb = f(x_ref, y)
        close(a, ea)
        close(b, eb)
        close(x, x_ref)
        a.add_(1)  # the output aliases the input, as in eager
        ea.add_(1)
        close(x, x_ref)


def test_unaligned_and_view_inputs_fall_back_to_the_copy() -> None:
    """A mutated input that PJRT cannot view (its data is not 64-byte
    aligned: copied, never donated) and two mutated views of one storage
    still end up with eager's values."""
    def f(a: torch.Tensor, b: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a.add_(y)
        b.mul_(y)
        return a + b

    fn = torch.compile(f, backend=hbd.backend, dynamic=False)
    base = torch.randn(2 * 48 * 8 + 1)
    a, b = base[1:1 + 48 * 8].view(48, 8), base[1 + 48 * 8:].view(48, 8)  # 4-byte offsets
    base_ref = base.clone()
    a_ref = base_ref[1:1 + 48 * 8].view(48, 8)
    b_ref = base_ref[1 + 48 * 8:].view(48, 8)
    for _ in range(3):
        y = torch.randn(48, 8)
        close(fn(a, b, y), f(a_ref, b_ref, y))
        close(base, base_ref)
    shared = torch.randn(2, 64, 16)
    shared_ref = shared.clone()
    for _ in range(3):
        y = torch.randn(64, 16)
        close(fn(shared[0], shared[1], y), f(shared_ref[0], shared_ref[1], y))
        close(shared, shared_ref)


def test_same_tensor_passed_twice() -> None:
    """One tensor as two arguments, mutated through one of them."""
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.mul_(3)
        return a + b

    fn = torch.compile(f, backend=hbd.backend, dynamic=False)
    x = torch.randn(64, 16)
    x_ref = x.clone()
    for _ in range(3):
        close(fn(x, x), f(x_ref, x_ref))
        close(x, x_ref)
