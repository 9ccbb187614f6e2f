"""``hb.export(..., dynamic=...)``: ONE shape-polymorphic module in the
artifact (format ``hlobridge-artifact/2``), refined per shape on first use
by the Rust pass. Exported torch (with ``call_jax``) and JAX programs run
back at several batch sizes and sequence lengths against eager torch / JAX
on fresh random inputs (tolerance ``ATOL`` absolute); shapes that break the
constraints raise ``ShapeAssertionError`` naming the dim and the
constraint; static artifacts keep format 1; corrupted dynamic manifests are
refused by name."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from hlobridge.errors import ShapeAssertionError

ATOL = 1e-5


def _gelu_tanh(a):  # type: ignore[no-untyped-def]
    return jax.nn.gelu(a) * jnp.tanh(a)


class Hybrid(torch.nn.Module):
    """torch Linear -> JAX activation (``call_jax``) -> torch Linear, times
    a buffer. (Pallas kernels have static block shapes: not dynamic.)"""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(hb.call_jax(_gelu_tanh, torch.relu(self.fc1(x)))) * self.scale


class _Seq(torch.nn.Module):
    """Per position a Linear, then a softmax over the sequence, masked:
    rows (batch) independent, the sequence mixed."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return torch.softmax(h + mask.unsqueeze(-1), dim=1) * h


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Hybrid, Path]:
    torch.manual_seed(0)
    model = Hybrid().eval()
    path = tmp_path_factory.mktemp("dyn") / "hybrid"
    x = torch.randn(4, 16)
    art = hb.export(model, x, path=path, batch_dim=0, dynamic=True)
    assert art.example_outputs is not None
    with torch.no_grad():
        torch.testing.assert_close(art.example_outputs["output"], model(x), atol=ATOL, rtol=0)
    return model, path


def test_one_module_with_symbols_in_the_manifest(hybrid: tuple[Hybrid, Path]) -> None:
    _, path = hybrid
    m = json.loads((path / "manifest.json").read_text())
    assert m["format"] == "hlobridge-artifact/2"
    assert [f["file"] for f in m["modules"]] == ["module.mlir"]
    assert m["modules"][0]["batch"] is None
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "module.mlir",
                                                      "weights.safetensors"]
    assert m["dynamic"]["symbols"] == [{"name": "batch", "min": 2}]
    x = next(p for p in m["params"] if p["name"] == "x")
    assert x["dims"] == ["batch", 16] and x["shape"] == [4, 16]
    assert m["outputs"][0]["dims"] == ["batch", 8]
    assert "tensor<?x16xf32>" in (path / "module.mlir").read_text()
    assert m["rows_independent"] is True


def test_every_batch_size_matches_eager(hybrid: tuple[Hybrid, Path]) -> None:
    model, path = hybrid
    art = hb.export.load(path)
    sizes = [3, 1, 7, 16, 2, 3, 33]
    random.Random(1).shuffle(sizes)
    for b in sizes:
        x = torch.randn(b, 16)
        got = art.run(x=x)["output"]
        with torch.no_grad():
            torch.testing.assert_close(got, model(x), atol=ATOL, rtol=0)
    # One compiled shape per distinct size; batch 1 ran padded to the min (2).
    batches = sorted({k[[p["name"] for p in art.manifest["params"]].index("x")][0]
                      for k in art.compiled_shapes})
    assert batches == [2, 3, 7, 16, 33]


def test_batch_and_sequence_dims(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = _Seq().eval()
    x, mask = torch.randn(3, 6, 8), torch.randn(3, 6)
    dyn = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}
    hb.export(model, x, mask, path=tmp_path / "s", batch_dim=0, dynamic=dyn)
    art = hb.export.load(tmp_path / "s")
    assert {s["name"] for s in art.manifest["dynamic"]["symbols"]} == {"batch", "seq"}
    for b, s in [(2, 5), (3, 9), (1, 4), (5, 16), (2, 5)]:
        x2, m2 = torch.randn(b, s, 8), torch.randn(b, s)
        with torch.no_grad():
            torch.testing.assert_close(art.run(x=x2, mask=m2)["output"], model(x2, m2),
                                       atol=ATOL, rtol=0)
    assert len(art.compiled_shapes) == 4
    # mask and x share `seq`: a disagreement names the dim and the constraint.
    with pytest.raises(ShapeAssertionError, match="seq == 5") as e:
        art.run(x=torch.randn(2, 5, 8), mask=torch.randn(2, 6))
    assert e.value.dim == "input mask dim 1"
    # A fixed dim.
    with pytest.raises(ShapeAssertionError, match="size == 8") as e:
        art.run(x=torch.randn(2, 5, 7), mask=torch.randn(2, 5))
    assert e.value.dim == "input x dim 2"
    # seq below its range (Dynamo's: >= 2).
    with pytest.raises(ShapeAssertionError, match="seq >= 2") as e:
        art.run(x=torch.randn(2, 1, 8), mask=torch.randn(2, 1))
    assert e.value.dim == "input x dim 1"
    # Still runs.
    x3, m3 = torch.randn(4, 7, 8), torch.randn(4, 7)
    with torch.no_grad():
        torch.testing.assert_close(art.run(x=x3, mask=m3)["output"], model(x3, m3), atol=ATOL,
                                   rtol=0)


def test_jax_function_with_a_weight(tmp_path: Path) -> None:
    @jax.jit
    def f(x, w):  # type: ignore[no-untyped-def]
        return jnp.tanh(x @ w), jnp.sum(x, axis=1)

    x, w = torch.randn(3, 5), torch.randn(5, 2)
    hb.export(f, x, w, path=tmp_path / "j", weights=[1], batch_dim=0, dynamic={"x": {0: "b"}})
    art = hb.export.load(tmp_path / "j")
    assert art.manifest["dynamic"]["symbols"] == [{"name": "b", "min": 1}]
    assert [o["dims"] for o in art.manifest["outputs"]] == [["b", 2], ["b"]]
    for b in [1, 4, 9]:
        x2 = torch.randn(b, 5)
        out = art.run(x=x2)
        want = f(x2.numpy(), w.numpy())
        np.testing.assert_allclose(out["output_0"].numpy(), np.asarray(want[0]), atol=ATOL)
        np.testing.assert_allclose(out["output_1"].numpy(), np.asarray(want[1]), atol=ATOL)
    with pytest.raises(ShapeAssertionError, match="b >= 1"):
        art.run(x=torch.randn(0, 5))


def test_rows_mixing_model_is_not_padded_below_the_min(tmp_path: Path) -> None:
    def center(x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(0, keepdim=True)

    art = hb.export(center, torch.randn(4, 3), path=tmp_path / "c", batch_dim=0, dynamic=True)
    assert art.rows_independent is False
    loaded = hb.export.load(tmp_path / "c")
    x = torch.randn(5, 3)
    torch.testing.assert_close(loaded.run(x=x)["output"], center(x), atol=ATOL, rtol=0)
    with pytest.raises(ShapeAssertionError, match="not independent"):
        loaded.run(x=torch.randn(1, 3))


def test_bad_dynamic_arguments_are_refused(tmp_path: Path) -> None:
    model = Hybrid().eval()
    x = torch.randn(4, 16)
    with pytest.raises(hb.export.ExportError, match="pass batch_dim"):
        hb.export(model, x, path=tmp_path / "a", dynamic=True)
    with pytest.raises(hb.export.ExportError, match="replaces batch_sizes"):
        hb.export(model, x, path=tmp_path / "a", batch_dim=0, batch_sizes=[1, 4], dynamic=True)
    with pytest.raises(hb.export.ExportError, match="not an input"):
        hb.export(model, x, path=tmp_path / "a", dynamic={"y": {0: "b"}})
    with pytest.raises(hb.export.ExportError, match="size >= 2"):
        hb.export(model, torch.randn(1, 16), path=tmp_path / "a", batch_dim=0, dynamic=True)
    with pytest.raises(hb.export.ExportError, match="identifier"):
        hb.export(model, x, path=tmp_path / "a", dynamic={"x": {0: "a b"}})
    with pytest.raises(hb.export.ExportError, match="not a dim"):
        hb.export(model, x, path=tmp_path / "a", dynamic={"x": {2: "b"}})


def test_static_artifacts_keep_format_1(tmp_path: Path) -> None:
    art = hb.export(Hybrid().eval(), torch.randn(2, 16), path=tmp_path / "st", batch_dim=0,
                    batch_sizes=[2, 4])
    m = json.loads((tmp_path / "st" / "manifest.json").read_text())
    assert m["format"] == "hlobridge-artifact/1" and "dynamic" not in m
    assert all("dims" not in p for p in m["params"])
    assert art.content_hash == hb.export.load(tmp_path / "st").content_hash


@pytest.mark.parametrize("edit, error", [
    (lambda m: m.update(format="hlobridge-artifact/1"), hb.export.ArtifactVersionError),
    (lambda m: m["dynamic"]["symbols"][0].update(min=0), hb.export.ExportError),
    (lambda m: m["dynamic"]["symbols"][0].update(max=1), hb.export.ExportError),
    (lambda m: m["dynamic"].update(symbols=[]), hb.export.ExportError),
    (lambda m: m["dynamic"].update(symbols="batch"), hb.export.ExportError),
    (lambda m: m["params"][-1].update(dims=["nope", 16]), hb.export.ExportError),
    (lambda m: next(p for p in m["params"] if not p["weight"]).update(dims=["batch"]),
     hb.export.ExportError),
    (lambda m: next(p for p in m["params"] if not p["weight"]).update(dims=["batch", 17]),
     hb.export.ExportError),
    (lambda m: next(p for p in m["params"] if not p["weight"]).update(dims=[1.5, 16]),
     hb.export.ExportError),
    (lambda m: next(p for p in m["params"] if p["weight"]).update(dims=["batch"]),
     hb.export.ExportError),
    (lambda m: m["modules"][0].update(batch=4), hb.export.ExportError),
    (lambda m: m["modules"].append(dict(m["modules"][0])), hb.export.ExportError),
    (lambda m: m.pop("dynamic"), hb.export.ExportError),
])
def test_corrupted_dynamic_manifests_are_named_errors(hybrid: tuple[Hybrid, Path], tmp_path: Path,
                                                       edit, error) -> None:  # type: ignore[no-untyped-def]
    import shutil

    _, path = hybrid
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    m = json.loads((bad / "manifest.json").read_text())
    edit(m)
    (bad / "manifest.json").write_text(json.dumps(m, indent=2))
    with pytest.raises(error, match="manifest.json|format") as e:
        hb.export.load(bad)
    assert not isinstance(e.value, hb.export.ArtifactHashError)  # refused by the parse, by name
