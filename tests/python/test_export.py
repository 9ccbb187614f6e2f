"""``hb.export`` / ``hb.export.load``: a hybrid model (torch + JAX +
Pallas interpret) and a JAX function exported and run back in-process,
against eager torch / ``torch.compile(backend="hlobridge")`` / JAX on fresh
random inputs; tampered or foreign artifacts are refused with named errors."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from serve_helpers import Hybrid

ATOL = 1e-5


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Hybrid, Path]:
    torch.manual_seed(0)
    model = Hybrid().eval()
    path = tmp_path_factory.mktemp("art") / "hybrid"
    x = torch.randn(4, 16)
    art = hb.export(model, x, path=path, batch_dim=0, batch_sizes=[1, 4, 8])
    with torch.no_grad():
        assert art.example_outputs is not None
        torch.testing.assert_close(art.example_outputs["output"], model(x), atol=ATOL, rtol=0)
    return model, path


def test_manifest_names_weights_inputs_and_versions(exported: tuple[Hybrid, Path]) -> None:
    _, path = exported
    m = json.loads((path / "manifest.json").read_text())
    params = {p["name"]: p for p in m["params"]}
    assert {n for n, p in params.items() if p["weight"]} == {"fc1.weight", "fc1.bias", "fc2.weight",
                                                             "fc2.bias", "scale"}
    assert params["x"] == {"name": "x", "dtype": "f32", "shape": [1, 16], "weight": False}
    assert m["outputs"] == [{"name": "output", "dtype": "f32", "shape": [1, 8]}]
    assert m["batch_dim"] == 0 and [f["batch"] for f in m["modules"]] == [1, 4, 8]
    assert set(m["producers"]) == {"torch", "torch_xla", "jax", "jaxlib"}
    assert m["hlobridge_version"] == hb.__version__
    assert m["content_hash"].startswith("sha256:")


@pytest.mark.parametrize("batch", [1, 4, 8])
def test_loaded_artifact_matches_eager_and_torch_compile(exported: tuple[Hybrid, Path], batch: int) -> None:
    model, path = exported
    art = hb.export.load(path)
    x = torch.randn(batch, 16)
    got = art.run(x=x)["output"]
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), atol=ATOL, rtol=0)
        compiled = torch.compile(model, backend="hlobridge", dynamic=False)
        torch.testing.assert_close(got, compiled(x), atol=ATOL, rtol=0)


def test_jax_function_with_a_weight(tmp_path: Path) -> None:
    @jax.jit
    def f(x, w):  # type: ignore[no-untyped-def]
        return jnp.tanh(x @ w), jnp.sum(x, axis=1)

    x, w = torch.randn(3, 5), torch.randn(5, 2)
    hb.export(f, x, w, path=tmp_path / "j", weights=[1])
    art = hb.export.load(tmp_path / "j")
    assert [p["weight"] for p in art.manifest["params"]] == [False, True]
    x2 = torch.randn(3, 5)
    out = art.run(x=x2)
    want = f(x2.numpy(), w.numpy())
    np.testing.assert_allclose(out["output_0"].numpy(), np.asarray(want[0]), atol=ATOL)
    np.testing.assert_allclose(out["output_1"].numpy(), np.asarray(want[1]), atol=ATOL)



def _double_tanh(a):  # type: ignore[no-untyped-def]
    return jnp.tanh(a) * 2


def test_torch_function_calling_jax(tmp_path: Path) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(hb.call_jax(_double_tanh, x @ y)) + 1

    x, y = torch.randn(3, 4), torch.randn(4, 5)
    art = hb.export(f, x, y, path=tmp_path / "f")
    assert [(p["name"], p["weight"]) for p in art.manifest["params"]] == [("x", False), ("y", False)]
    x2, y2 = torch.randn(3, 4), torch.randn(4, 5)
    torch.testing.assert_close(hb.export.load(tmp_path / "f").run(x=x2, y=y2)["output"], f(x2, y2),
                               atol=ATOL, rtol=0)

def test_tampered_and_foreign_artifacts_are_refused(exported: tuple[Hybrid, Path], tmp_path: Path) -> None:
    import shutil

    _, src = exported
    d = tmp_path / "copy"
    shutil.copytree(src, d)
    w = bytearray((d / "weights.safetensors").read_bytes())
    w[-1] ^= 1
    (d / "weights.safetensors").write_bytes(bytes(w))
    with pytest.raises(hb.export.ArtifactHashError):
        hb.export.load(d)
    shutil.rmtree(d)
    shutil.copytree(src, d)
    man = (d / "manifest.json").read_text()
    (d / "manifest.json").write_text(man.replace(f'"{hb.__version__}"', '"99.0.0"', 1))
    with pytest.raises(hb.export.ArtifactVersionError):
        hb.export.load(d)
    m = json.loads(man)
    m["producers"]["torch"] = "0.0.1"
    (d / "manifest.json").write_text(json.dumps(m, indent=2))
    with pytest.raises(hb.export.ArtifactVersionError, match="producer"):
        hb.export.load(d)
    # Producers not checked: the edit still breaks the hash.
    with pytest.raises(hb.export.ArtifactHashError):
        hb.export.load(d, check_producers=False)
    assert issubclass(hb.export.ExportError, hb.BridgeError)


def test_training_mode_and_bad_arguments_are_refused(tmp_path: Path) -> None:
    model = Hybrid()
    with pytest.raises(hb.export.ExportError, match="eval"):
        hb.export(model, torch.randn(2, 16), path=tmp_path / "t")
    with pytest.raises(hb.export.ExportError, match="batch_dim"):
        hb.export(model.eval(), torch.randn(2, 16), path=tmp_path / "t", batch_sizes=[1])
    with pytest.raises(hb.export.ExportError):
        hb.export(model.eval(), [1, 2], path=tmp_path / "t")


def test_rust_tch_example_matches_eager(exported: tuple[Hybrid, Path], tmp_path: Path) -> None:
    """The `tch` feature's example binary (built only with
    ``--features tch``; skipped otherwise) runs the artifact from Rust."""
    import os
    import subprocess

    import numpy as np

    exe = Path(__file__).resolve().parents[2] / "target" / "release" / "examples" / "deploy_tch"
    if not exe.is_file():
        # `make test` builds it (test-tch) and sets HLOBRIDGE_REQUIRE_TCH=1.
        assert os.environ.get("HLOBRIDGE_REQUIRE_TCH") != "1", f"{exe} was not built"
        pytest.skip("deploy_tch not built (cargo build --release -p hlobridge-deploy --features tch "
                    "--example deploy_tch)")
    model, path = exported
    x = torch.randn(3, 16)
    np.save(tmp_path / "x.npy", x.numpy())
    # libtorch of the pinned torch wheel, which the binary was linked against.
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(torch.__file__).parent / "lib")}
    r = subprocess.run([str(exe), str(path), str(tmp_path / "out"), str(tmp_path / "x.npy")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    got = torch.from_numpy(np.load(tmp_path / "out" / "output.npy"))
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), atol=ATOL, rtol=0)


def test_run_uses_the_verified_bytes_not_the_files(exported: tuple[Hybrid, Path], tmp_path: Path) -> None:
    """``Artifact.run`` after ``load`` runs what was verified: the weights
    file multiplied by 100 on disk afterwards changes nothing (and a new
    ``load`` refuses the changed file by its hash)."""
    import shutil
    import struct

    model, src = exported
    d = tmp_path / "copy"
    shutil.copytree(src, d)
    art = hb.export.load(d)
    x = torch.randn(4, 16)
    before = art.run(x=x)["output"]
    # Rewrite every f32 weight as x100, same layout and size.
    w = bytearray((d / "weights.safetensors").read_bytes())
    (n,) = struct.unpack("<Q", w[:8])
    header = json.loads(w[8:8 + n])
    for name, e in header.items():
        if name == "__metadata__" or e["dtype"] != "F32":
            continue
        b, end = e["data_offsets"]
        vals = torch.frombuffer(bytearray(w[8 + n + b:8 + n + end]), dtype=torch.float32) * 100
        w[8 + n + b:8 + n + end] = vals.numpy().tobytes()
    (d / "weights.safetensors").write_bytes(bytes(w))
    (d / "module.b4.mlir").write_text("garbage")
    after = art.run(x=x)["output"]
    torch.testing.assert_close(after, before, atol=0, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(after, model(x), atol=ATOL, rtol=0)
    with pytest.raises(hb.export.ExportError):
        hb.export.load(d)


def test_symlinks_and_devices_are_refused_unread(exported: tuple[Hybrid, Path], tmp_path: Path) -> None:
    import os
    import shutil

    _, src = exported
    d = tmp_path / "links"
    shutil.copytree(src, d)
    (d / "weights.safetensors").unlink()
    os.symlink("/dev/zero", d / "weights.safetensors")
    with pytest.raises(hb.export.ExportError, match="symbolic link"):
        hb.export.load(d)
    (d / "weights.safetensors").unlink()
    os.symlink(src / "weights.safetensors", d / "weights.safetensors")
    with pytest.raises(hb.export.ExportError, match="symbolic link"):
        hb.export.load(d)


class _Lin(torch.nn.Module):
    def __init__(self, reduce: str) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)
        self.reduce = reduce

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.reduce == "sum":
            return y.sum(0, keepdim=True)
        if self.reduce == "center":
            return y - y.mean(0, keepdim=True)
        return torch.relu(y)


def test_outputs_must_carry_the_batch_at_every_size(tmp_path: Path) -> None:
    torch.manual_seed(3)
    m = _Lin("sum").eval()
    # At batch 1 the [1, 3] output looks right; at 4 it is not [4, 3].
    with pytest.raises(hb.export.ExportError, match="does not carry the batch"):
        hb.export(m, torch.randn(1, 6), path=tmp_path / "s", batch_dim=0, batch_sizes=[1, 4])


def test_rows_mixing_models_are_recorded_and_never_batched(tmp_path: Path) -> None:
    torch.manual_seed(4)
    ok = hb.export(_Lin("relu").eval(), torch.randn(2, 6), path=tmp_path / "r", batch_dim=0,
                   batch_sizes=[1, 4])
    assert ok.rows_independent is True and "batching_refused" not in ok.manifest
    center = _Lin("center").eval()
    mixed = hb.export(center, torch.randn(2, 6), path=tmp_path / "c", batch_dim=0, batch_sizes=[1, 4])
    assert mixed.rows_independent is False
    assert "mixes rows" in mixed.manifest["batching_refused"]
    loaded = hb.export.load(tmp_path / "c")
    assert loaded.manifest["rows_independent"] is False
    # Exact batch sizes still run (no padding involved).
    x = torch.randn(4, 6)
    with torch.no_grad():
        torch.testing.assert_close(loaded.run(x=x)["output"], center(x), atol=ATOL, rtol=0)


class _NamedX(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.x = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.x


def test_an_argument_named_like_a_parameter_is_refused(tmp_path: Path) -> None:
    m = _NamedX().eval()
    with pytest.raises(hb.export.ExportError, match="'x' is both"):
        hb.export(m, torch.randn(2, 4), path=tmp_path / "n")
    # Named apart, it exports and runs.
    art = hb.export(m, torch.randn(2, 4), path=tmp_path / "n", input_names=["inp"])
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(hb.export.load(tmp_path / "n").run(inp=x)["output"], m(x))
    assert sorted(p["name"] for p in art.manifest["params"]) == ["inp", "x"]
