"""``stablehlo.composite`` in the native shape refinement (issue #28).

A GELU model trained through ``torch.compile(..., backend="hlobridge",
dynamic=True)`` captures a backward module holding ``stablehlo.composite
"chlo.erf"`` (decomposition ``@chlo.erf.impl``). The native pass refines a
composite's decomposition like a called function, so such modules stay on
the native route: ``refine.counters["native"]`` counts them and
``counters["native_fallback"]`` does not move. The refined module is then
compared with jaxlib's refinement of the same module, as
``test_refine_jaxlib.py`` does: canonically equal text
(``refine_corpus.canonical``) and, through the CPU plugin on fresh random
inputs, equal outputs (float32, 1e-6 relative: the texts compile
separately). The model itself is checked against eager torch (loss and
gradients, rtol=1e-4, atol=1e-5).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_refine_composite.py -q
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import refine_corpus as rc
from hlobridge import _native
from hlobridge._src import dynamic
from hlobridge._src.dynamic import refine as R
from test_refine_jaxlib import _close, _run

TOL = dict(rtol=1e-4, atol=1e-5)
_RESULT_INFO = re.compile(r" \{jax\.result_info = \"[^\"]*\"\}")


class GeluMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.nn.functional.gelu(self.a(x)))


@pytest.fixture(scope="module")
def captured() -> tuple[dynamic.DynamicGraph, dict[str, int]]:
    """The backward graph with the composite, after two batch sizes; and
    the change in the refinement counters they caused."""
    torch._dynamo.reset()
    before = dict(R.counters)
    torch.manual_seed(0)
    m = GeluMLP()
    ref = GeluMLP()
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend="hlobridge", dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 8)
        f(x).square().sum().backward()
        ref(x).square().sum().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **TOL)
    graphs = [g for g in dynamic.dynamic_graphs()[-2:] if "stablehlo.composite" in g.text]
    torch._dynamo.reset()
    assert graphs, "the GELU backward module has no stablehlo.composite"
    return graphs[0], {k: R.counters[k] - before[k] for k in R.counters}


def test_composite_module_is_refined_natively(captured):
    g, delta = captured
    assert R.route() == "native"
    assert delta["native_fallback"] == 0, R.last_fallback
    assert delta["jaxlib"] == 0
    assert delta["native"] >= 4  # forward and backward, two shapes each
    assert len(g.programs) == 2


def test_composite_refinement_matches_jaxlib(captured):
    g, _ = captured
    rng = np.random.default_rng()
    for prog in g.programs.values():
        shapes = [list(s) for s in prog.shapes]
        ours = _native.refine_shapes(g.text, shapes)
        ref = R._refine_jaxlib(g.text, shapes)
        assert "stablehlo.composite" in ours and "?" not in ours.split("#loc")[0]
        # jaxlib's route wraps @main in a new one without the result
        # attributes (jax.result_info): those are not refinement.
        assert _RESULT_INFO.sub("", rc.canonical(ours)) == rc.canonical(ref)
        assert all(d == torch.float32 for d in g.module.dtypes)
        inputs = [("f32", rng.standard_normal(s).astype(np.float32)) for s in shapes]
        got, want = _run(ours, inputs), _run(ref, inputs)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _close(a, b, False)
