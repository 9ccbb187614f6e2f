"""The ``torch.compile`` backend ``"hlobridge"``: outputs and gradients
against eager torch, one stitched executable per graph, cross-seam fusion,
failure modes and the entry point.

Inputs and initial weights are fresh random each run (the seed is printed in
failure messages; set HLOBRIDGE_TEST_SEED to replay). Tolerances (float32,
XLA vs torch kernels): outputs rtol=1e-4/atol=1e-5, gradients and
parameters after optimizer steps rtol=1e-3/atol=1e-4 (sums over a batch
accumulate differently ordered rounding).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_compile_backend.py -q
"""

from __future__ import annotations

import copy
import importlib.metadata
import os
import tomllib
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from hlobridge import dynamo as hbd

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
OUT_TOL = dict(rtol=1e-4, atol=1e-5)
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)
ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def close(a: torch.Tensor, b: torch.Tensor, tol: dict[str, float]) -> None:
    torch.testing.assert_close(a, b, **tol, msg=lambda m: f"seed={SEED}: {m}")


def compare_train(model: torch.nn.Module, *inputs: torch.Tensor) -> None:
    """Forward + backward of ``model`` compiled with hlobridge vs eager."""
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False)
    out = compiled(*inputs)
    expected = ref(*inputs)
    close(out, expected, OUT_TOL)
    g = torch.randn_like(expected)
    out.backward(g)
    expected.backward(g)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        close(p.grad, q.grad, GRAD_TOL)  # type: ignore[arg-type]
    for b, c in zip(model.buffers(), ref.buffers()):
        close(b, c, GRAD_TOL)


def test_mlp_outputs_and_gradients() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32),
                              torch.nn.Tanh(), torch.nn.Linear(32, 4))
    compare_train(mlp, torch.randn(8, 16))


def test_small_cnn_outputs_and_gradients() -> None:
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    compare_train(cnn, torch.randn(4, 3, 16, 16))  # also BatchNorm's running stats


def test_cross_entropy_loss_inside_the_compiled_graph() -> None:
    """The loss compiled with the model: aten's ``sum(x, dim=[])`` (reduce
    all, from the nll_loss decomposition) must not become torch_xla's
    reduce-none, and an integer target tensor is a program input."""
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 5))
    ref = copy.deepcopy(model)

    def loss_of(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(m(x), y)

    compiled = torch.compile(lambda x, y: loss_of(model, x, y), backend=hbd.backend,
                             dynamic=False)
    x, y = torch.randn(7, 6), torch.randint(0, 5, (7,))
    loss = compiled(x, y)
    expected = loss_of(ref, x, y)
    assert loss.shape == ()
    close(loss, expected, OUT_TOL)
    loss.backward()
    expected.backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad, q.grad, GRAD_TOL)  # type: ignore[arg-type]


def test_transformer_encoder_layer_outputs_and_gradients() -> None:
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    compare_train(layer, torch.randn(2, 6, 32))


def test_transformer_encoder_layer_eval() -> None:
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True).eval()
    compare_train(layer, torch.randn(3, 5, 32))


# -- call_jax inside compiled models ------------------------------------------

def jax_act(h: Any, scale: float) -> Any:
    """A GELU-like activation written in JAX."""
    return {"y": 0.5 * h * (1 + jnp.tanh(scale * (h + 0.044715 * h**3))), "aux": jnp.sin(h)}


def torch_act(h: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
    return {"y": 0.5 * h * (1 + torch.tanh(scale * (h + 0.044715 * h**3))), "aux": torch.sin(h)}


class Hybrid(torch.nn.Module):
    """torch -> call_jax -> torch; ``act`` picks the JAX or the torch twin."""

    def __init__(self, jax: bool) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.jax = jax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(self.fc1(x))
        a = hb.call_jax(jax_act, h, scale=0.79788) if self.jax else torch_act(h, 0.79788)
        return self.fc2(a["y"] * 2 + a["aux"])


def test_call_jax_training_steps_match_eager() -> None:
    model = Hybrid(jax=True)
    ref = Hybrid(jax=False)
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        x, y = torch.randn(8, 16), torch.randn(8, 8)
        for m, o, f in ((compiled, opt, compiled), (ref, opt_ref, ref)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(f(x), y)
            loss.backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.detach(), q.detach(), GRAD_TOL)
    # Parameters are program inputs, not baked constants: the steps above
    # changed them without a recompilation.
    graphs = [g for g in hbd.compiled_graphs() if g.gm is not None]
    fw = [g for g in graphs if g.label.startswith("forward")][-1]
    assert len(fw.programs) == 1 and next(iter(fw.programs.values())).calls == 3


def test_torch_jax_torch_is_one_executable_without_graph_break() -> None:
    model = Hybrid(jax=True)
    x = torch.randn(8, 16)
    explain = torch._dynamo.explain(model)(x)
    assert explain.graph_count == 1 and explain.graph_break_count == 0
    torch._dynamo.reset()
    n0 = hbd.graphs_compiled()
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False, fullgraph=True)
    out = compiled(x)
    receipt = hb.last_receipt()
    twin = Hybrid(jax=False)
    twin.load_state_dict(model.state_dict())
    close(out, twin(x), OUT_TOL)
    out.sum().backward()
    new = hbd.compiled_graphs(since=n0)
    assert [g.label.split()[0] for g in new] == ["forward", "backward"]
    for g in new:
        assert len(g.programs) == 1  # one signature -> one executable
        prog = next(iter(g.programs.values()))
        # The computing segments only: scalar constants are counted on the
        # segment that reads them, not listed.
        assert [s.producer for s in prog.segments] == ["torch", "jax", "torch"], prog.segments
        assert all(s.engine != "constant" for s in prog.segments)
        assert {s.fingerprint for s in prog.segments} == {prog.exe.fingerprint}
    assert receipt is not None
    assert [(s.producer, s.engine) for s in receipt.segments] == [
        ("torch", "torch_xla_lazy"), ("jax", "jax.jit"), ("torch", "torch_xla_lazy")]
    assert receipt.input_copies == 0  # parameters and input used in place
    # the backward graph holds the VJP of the JAX function
    bw = next(iter(new[1].programs.values()))
    assert any(s.producer == "jax" and "(vjp)" in s.name for s in bw.segments)


def test_cross_seam_fusion() -> None:
    """The stitched program has fewer fusions than its segments compiled
    apart, and one fusion holds the torch sigmoid (torch_xla lowers it with
    ``exponential``) with the JAX ``tanh``."""
    from hlobridge import _native

    model = Hybrid(jax=True)
    with torch.no_grad():
        torch.compile(model, backend=hbd.backend, dynamic=False)(torch.randn(8, 16))
    g = hbd.compiled_graphs()[-1]
    prog = next(iter(g.programs.values()))
    fused = prog.exe.fusions
    unfused = sum(len(_native.compile(text)[0].fusions) for text in _segment_texts(prog))
    assert len(fused) < unfused, (fused, unfused)
    assert any({"exponential", "tanh"} <= set(ops) for _, _, ops in fused), fused


def _segment_texts(prog: Any) -> list[str]:
    """The segment modules of a program, compiled one by one (the unfused
    alternative)."""
    return [t for t in prog.segment_texts if "func.func public @main() " not in t]


def test_recompiles_per_input_signature() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = torch.compile(mlp, backend=hbd.backend, dynamic=False)
    with torch.no_grad():
        for n in (2, 3, 2):
            x = torch.randn(n, 4)
            close(compiled(x), mlp(x), OUT_TOL)
    assert hb.last_receipt().cache == "hit"  # type: ignore[union-attr]


# -- failure modes --------------------------------------------------------------

def test_unsupported_aten_op_is_named() -> None:
    """In eval mode without grad, the encoder layer takes torch's fused fast
    path, an op torch_xla cannot lower."""
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    # The backend's own class reaches the caller (not Dynamo's
    # BackendCompilerFailed: hlobridge._src.dynamo.raise_through).
    with torch.no_grad(), pytest.raises(hbd.UnsupportedOpError,
                                        match="aten::_transformer_encoder_layer_fwd"):
        torch.compile(layer, backend=hbd.backend, dynamic=False)(torch.randn(2, 5, 32))


def test_data_dependent_shape_is_refused() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).float().sum() + x.sum()

    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        with pytest.raises(hbd.DataDependentError):
            torch.compile(f, backend=hbd.backend, dynamic=False)(torch.randn(6))


def test_dropout_draws_from_torch_generator_like_eager() -> None:
    """Dropout's random mask is a program input drawn by torch's generator on
    every call: under the same seed the compiled model and eager torch use
    the same mask (outputs and gradients match), and a new call gets a new
    mask."""
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.4),
                                torch.nn.Linear(32, 3))
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False)
    x = torch.randn(5, 6)
    torch.manual_seed(SEED + 1)
    out = compiled(x)
    torch.manual_seed(SEED + 1)
    expected = ref(x)
    close(out, expected, OUT_TOL)
    out.sum().backward()
    expected.sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad, q.grad, GRAD_TOL)  # type: ignore[arg-type]
    with torch.no_grad():
        a, b = compiled(x), compiled(x)
    assert not torch.equal(a, b), "the same dropout mask was used twice"


def test_value_dependent_random_op_is_refused() -> None:
    """``torch.poisson(rates)`` depends on tensor values: it cannot be drawn
    outside the program, so it is refused by name."""
    fn = torch.compile(lambda p: torch.poisson(torch.exp(p)) * p, backend=hbd.backend,
                       dynamic=False)
    with pytest.raises(hbd.UnsupportedOpError, match="poisson"):
        fn(torch.randn(2, 4))


def test_in_place_update_of_an_input_matches_eager() -> None:
    """AOTAutograd functionalizes input mutation: the program returns the new
    value and it is written back after the run (documented behaviour)."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(2).add_(y)
        return x.sin()

    x, y = torch.randn(5), torch.randn(5)
    x_ref = x.clone()
    out = torch.compile(f, backend=hbd.backend, dynamic=False)(x, y)
    close(out, f(x_ref, y), OUT_TOL)
    close(x, x_ref, OUT_TOL)


# -- registration -------------------------------------------------------------

def test_entry_point_names_the_backend() -> None:
    meta = tomllib.loads((ROOT / "python" / "pyproject.toml").read_text())
    target = meta["project"]["entry-points"]["torch_dynamo_backends"]["hlobridge"]
    ep = importlib.metadata.EntryPoint("hlobridge", target, "torch_dynamo_backends")
    assert ep.load() is hbd.backend
    installed = [e for e in importlib.metadata.entry_points(group="torch_dynamo_backends")
                 if e.name == "hlobridge"]
    if not installed:  # an install older than the entry point: register by hand
        hbd.register()
    x = torch.randn(3, 4)
    lin = torch.nn.Linear(4, 2)
    with torch.no_grad():
        close(torch.compile(lin, backend="hlobridge", dynamic=False)(x), lin(x), OUT_TOL)
    assert any(s.producer == "torch" for s in hb.last_receipt().segments)  # type: ignore[union-attr]


def test_receipt_lists_computing_segments_and_counts_scalar_constants() -> None:
    """torch_xla makes some scalars (LayerNorm's eps...) parameters;
    hlobridge stitches each as a one-constant module XLA folds. The receipt
    lists only the computing segment and counts them on it."""
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16),
                            torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    with torch.no_grad():
        out = torch.compile(m, backend=hbd.backend, dynamic=False, fullgraph=True)(x)
        close(out, m(x), OUT_TOL)
    r = hb.last_receipt()
    assert r is not None
    assert [(s.producer, s.engine) for s in r.segments] == [("torch", "torch_xla_lazy")]
    assert r.segments[0].constants >= 1, r.segments
