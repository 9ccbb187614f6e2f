"""``hb.viz``: drawings of the stitched programs of a ``torch.compile`` model
(torch + ``call_jax`` segments, forward and backward), of a compiled
function, and of a ``compile_train_step`` step; the files are valid (SVG
parses as XML, HTML holds an ``<svg>``, DOT is a digraph) and name the
segments and the user's argument names; a model never called raises
:class:`hlobridge.errors.NotCompiledError`.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_viz_compiled.py -q
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from hlobridge import optim
from hlobridge.errors import ArgumentError, NotCompiledError


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def jax_gelu(h: Any) -> Any:
    return 0.5 * h * (1 + jnp.tanh(0.79788 * (h + 0.044715 * h**3)))


class Hybrid(torch.nn.Module):
    """torch -> call_jax -> torch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(hb.call_jax(jax_gelu, torch.relu(self.fc1(x))))


def segment_names() -> set[str]:
    receipt = hb.last_receipt()
    assert receipt is not None
    return {s.name for s in receipt.segments}


def check(path: Path, names: set[str], args: tuple[str, ...]) -> str:
    assert path.is_file()
    text = path.read_text()
    if path.suffix == ".svg":
        assert ET.fromstring(text).tag.endswith("svg")
    elif path.suffix == ".html":
        assert "<svg" in text and text.rstrip().endswith("</html>")
        ET.fromstring(text[text.index("<svg"):text.index("</svg>") + 6])
    else:
        assert text.lstrip().startswith("digraph")
    for n in names:
        assert n in text, (n, path)
    for a in args:
        assert a in text, (a, path)
    return text


@pytest.mark.parametrize("suffix", [".svg", ".html", ".dot"])
def test_compiled_model_with_call_jax(tmp_path: Path, suffix: str) -> None:
    model = torch.compile(Hybrid(), backend="hlobridge", dynamic=False)
    x = torch.randn(4, 8)
    with torch.no_grad():
        model(x)
    names = segment_names()
    producers = {s.producer for s in hb.last_receipt().segments}  # type: ignore[union-attr]
    assert producers >= {"torch", "jax"}
    out = hb.viz(model, tmp_path / f"model{suffix}")
    assert out == tmp_path / f"model{suffix}"
    text = check(out, names, ("fc1.weight", "fc2.bias", ">x<" if suffix != ".dot" else '"x'))
    assert "%arg0" not in text


def test_forward_and_backward_graphs_in_one_page(tmp_path: Path) -> None:
    model = torch.compile(Hybrid(), backend="hlobridge", dynamic=False)
    model(torch.randn(4, 8, requires_grad=True)).sum().backward()
    text = check(hb.viz(model, tmp_path / "train.html"), set(), ("fc1.weight",))
    assert text.count("<svg") == 2
    assert "forward #" in text and "backward #" in text


class Broken(torch.nn.Module):
    """Two graphs: Dynamo breaks at the print."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        print(end="")  # graph break
        return self.fc2(h)


def test_graph_break_is_one_picture(tmp_path: Path) -> None:
    model = torch.compile(Broken(), backend="hlobridge", dynamic=False)
    other = torch.compile(Broken(), backend="hlobridge", dynamic=False)
    with torch.no_grad():
        model(torch.randn(2, 8))
        other(torch.randn(3, 8))  # another instance: not in model's drawing
    text = check(hb.viz(model, tmp_path / "broken.svg"), set(), ("fc1.weight", "fc2.weight"))
    assert len(set(re.findall(r"inference #\d+", text))) == 2 and text.count("<svg") == 1
    assert "tensor&lt;3x8xf32&gt;" not in text and "tensor&lt;2x8xf32&gt;" in text


def test_compiled_function(tmp_path: Path) -> None:
    def f(inp: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(inp @ w)

    cf = torch.compile(f, backend="hlobridge", dynamic=False)
    cf(torch.randn(3, 4), torch.randn(4, 5))
    check(hb.viz(cf, tmp_path / "f.svg"), segment_names(), ("inp", "w"))


def test_train_step(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def loss_fn(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(m(x), y)

    step = hb.compile_train_step(model, loss_fn, optim.SGD(lr=0.1))
    with pytest.raises(NotCompiledError, match="call it once"):
        hb.viz(step, tmp_path / "never.svg")
    step(torch.randn(4, 8), torch.randn(4, 2))
    check(hb.viz(step, tmp_path / "step.svg"), segment_names(), ("0.weight", "2.bias", "batch.0"))


def test_never_called_model_raises(tmp_path: Path) -> None:
    model = torch.compile(Hybrid(), backend="hlobridge", dynamic=False)
    with pytest.raises(NotCompiledError, match="call it once"):
        hb.viz(model, tmp_path / "m.svg")
    assert not (tmp_path / "m.svg").exists()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="unknown output format"):
        hb.viz(torch.compile(Hybrid(), backend="hlobridge"), tmp_path / "m.png")
    with pytest.raises(ArgumentError, match="expected a torch.compile"):
        hb.viz(42, tmp_path / "m.svg")
