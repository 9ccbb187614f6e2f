"""One compile service for every front end (issue 23): one exported hybrid
model, run through ``hlobridge serve`` (Python client), the Rust runtime
(``hlobridge-deploy``'s ``deploy_tch`` example, when built),
``Artifact.run``, ``hlobridge run`` on the exported module with ``.npy``
inputs, and ``torch.compile(backend="hlobridge")``, gives bitwise identical
outputs, and each path's log or receipt names the same host kernels.

The model is GEMM- and convolution-heavy on the torch side (two 3x3
convolutions and a 1024x64 linear layer at batch 8, all above the host
kernels' size thresholds) with a JAX part through ``hb.call_jax``. Batch 8 is
the artifact's only batch size, so no path pads.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from harness import binary_cmd, find_binary
from hlobridge import _native
from serve_helpers import start_server

BATCH = 8
SERVICE_LOGGER = "hlobridge.hlobridge_compile"


def _jax_part(h):  # type: ignore[no-untyped-def]
    return jnp.tanh(h) * 0.5 + jax.nn.gelu(h)


class Net(torch.nn.Module):
    """conv -> relu -> conv -> JAX (tanh, gelu) -> linear -> relu -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc1 = torch.nn.Linear(16 * 8 * 8, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv1(x))
        h = hb.call_jax(_jax_part, self.conv2(h))
        h = torch.relu(self.fc1(h.flatten(1)))
        return self.fc2(h)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy().view(np.uint32)


def _kernels_in(lines: list[str], marker: str) -> list[str]:
    """The ``kernels=...`` value of every log line containing ``marker``."""
    out = []
    for line in lines:
        if marker in line and "kernels=" in line:
            out.append(line.split("kernels=", 1)[1].split()[0].strip('"'))
    return out


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _compile_log(fn):  # type: ignore[no-untyped-def]
    """Runs ``fn`` with the memory cache cleared and the disk cache off, so
    its program is compiled (and logged) afresh; returns (result, kernels)."""
    handler = _Lines()
    log = logging.getLogger(SERVICE_LOGGER)
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    _native.clear_compile_cache()
    try:
        out = fn()
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    return out, _kernels_in(handler.lines, "compiled program")


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        lo, hi = meta["data_offsets"]
        out[name] = np.frombuffer(body[lo:hi], dtype=np.float32).reshape(meta["shape"])
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Net, Path, torch.Tensor]:
    torch.manual_seed(23)
    model = Net().eval()
    path = tmp_path_factory.mktemp("one_compile") / "net"
    x = torch.randn(BATCH, 3, 8, 8)
    hb.export(model, x, path=path, batch_dim=0, batch_sizes=[BATCH])
    return model, path, torch.randn(BATCH, 3, 8, 8)


def test_every_front_end_runs_the_same_program(
    exported: tuple[Net, Path, torch.Tensor], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, path, x = exported
    monkeypatch.setenv("HLOBRIDGE_CACHE", "0")
    sub_env = {**os.environ, "HLOBRIDGE_CACHE_DIR": str(tmp_path / "cache"), "PJRT_DEVICE": "CPU"}
    sub_env.pop("HLOBRIDGE_CACHE", None)
    outputs: dict[str, np.ndarray] = {}
    kernels: dict[str, str] = {}

    # Artifact.run (the Python runtime).
    art = hb.export.load(path)
    res, ks = _compile_log(lambda: art.run(x=x)["output"])
    outputs["Artifact.run"] = _bits(res)
    assert len(ks) == 1, ks
    kernels["Artifact.run"] = ks[0]

    # torch.compile(backend="hlobridge").
    def run_compiled() -> torch.Tensor:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="hlobridge", dynamic=False)
        with torch.no_grad():
            return compiled(x)

    res, ks = _compile_log(run_compiled)
    outputs["torch.compile"] = _bits(res)
    # The whole model is one program here (the JAX part is stitched in).
    assert len(ks) == 1, ks
    kernels["torch.compile"] = ks[0]

    binary = find_binary()
    assert binary is not None, "hlobridge binary not found"

    # hlobridge run on the exported module: every parameter bound from the
    # artifact's own weights (by index, in the manifest's program order).
    manifest = json.loads((path / "manifest.json").read_text())
    (module,) = [m["file"] for m in manifest["modules"]]
    weights = _safetensors(path / manifest["weights_file"])
    args = []
    for i, p in enumerate(manifest["params"]):
        arr = weights[p["name"]] if p["weight"] else x.numpy()
        f = tmp_path / f"in{i}.npy"
        np.save(f, np.ascontiguousarray(arr))
        args += ["--input", f"{i}={f}"]
    r = subprocess.run([*binary_cmd(binary), "run", str(path / module), *args, "--out",
                        str(tmp_path / "run_out"), "--json"],
                       capture_output=True, text=True, timeout=300, env=sub_env)
    assert r.returncode == 0, r.stderr
    receipt = json.loads(r.stdout.strip().splitlines()[-1])
    outputs["hlobridge run"] = np.load(tmp_path / "run_out" / "0.npy").view(np.uint32)
    kernels["hlobridge run"] = ",".join(f"{k}={n}" for k, n in sorted(receipt["host_kernels"].items())) or "-"

    # hlobridge serve (the Rust runtime behind gRPC), logging at info.
    old_env = dict(os.environ)
    os.environ.update(sub_env)
    try:
        proc, addr = start_server(path, "--log-level", "info")
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    try:
        with hb.serve.Client(addr) as c:
            outputs["hlobridge serve"] = _bits(c.predict(x=x)["output"])
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    ks = _kernels_in(err.splitlines(), "artifact module ready")
    assert len(ks) == 1, err
    kernels["hlobridge serve"] = ks[0]

    # The Rust runtime on tch tensors (built with --features tch; make test does).
    exe = Path(__file__).resolve().parents[2] / "target" / "release" / "examples" / "deploy_tch"
    if exe.is_file():
        np.save(tmp_path / "x.npy", x.numpy())
        env = {**sub_env, "LD_LIBRARY_PATH": str(Path(torch.__file__).parent / "lib")}
        r = subprocess.run([str(exe), str(path), str(tmp_path / "tch_out"), str(tmp_path / "x.npy")],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        outputs["Rust runtime (deploy_tch)"] = np.load(tmp_path / "tch_out" / "output.npy").view(np.uint32)
    else:
        assert os.environ.get("HLOBRIDGE_REQUIRE_TCH") != "1", f"{exe} was not built"

    # Bitwise identical everywhere.
    ref_name, ref = "Artifact.run", outputs["Artifact.run"]
    for name, got in outputs.items():
        assert got.shape == ref.shape and np.array_equal(got, ref), (
            f"{name} differs from {ref_name} in "
            f"{int((got != ref).sum()) if got.shape == ref.shape else 'shape'} element(s)")
    # The same kernels named by every path, and they are the host kernels.
    assert len(set(kernels.values())) == 1, kernels
    named = dict(kv.split("=") for kv in kernels["Artifact.run"].split(","))
    # The two convolutions: the host kernel or the plugin's oneDNN one.
    assert int(named.get("hlobridge_conv", 0)) + int(named.get("__onednn$convolution", 0)) == 2, kernels
    assert any(k.startswith("hlobridge_gemm_") for k in named), kernels
    # And the program is the model: against eager within float32 rounding.
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(ref.view(np.float32)), model(x),
                                   atol=1e-5, rtol=1e-5)
