"""``hlobridge serve`` end to end: the hybrid model (torch + JAX + Pallas
interpret) exported, served on a free loopback port, called through
``hb.serve.Client``; outputs equal the in-process ones. Each bad request gets
its gRPC status and the server keeps serving; dynamic batching returns every
request its own rows; bearer tokens; SIGTERM drains requests in flight."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import hlobridge as hb
from serve_helpers import Hybrid, start_server, stop_server

ATOL = 1e-5


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Hybrid, Path]:
    torch.manual_seed(1)
    model = Hybrid().eval()
    path = tmp_path_factory.mktemp("serve") / "hybrid"
    hb.export(model, torch.randn(4, 16), path=path, batch_dim=0, batch_sizes=[1, 4, 8])
    return model, path


@pytest.fixture(scope="module")
def server(artifact: tuple[Hybrid, Path]) -> Iterator[str]:
    proc, addr = start_server(artifact[1], "--max-message-bytes", "65536")
    try:
        yield addr
    finally:
        stop_server(proc)


def _expect(model: Hybrid, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def test_predict_equals_in_process(artifact: tuple[Hybrid, Path], server: str) -> None:
    model, path = artifact
    local = hb.export.load(path)
    with hb.serve.Client(server) as c:
        for b in (1, 3, 4, 8):
            x = torch.randn(b, 16)
            out = c.predict(x=x)
            assert set(out) == {"output"} and out["output"].shape == (b, 8)
            torch.testing.assert_close(out["output"], _expect(model, x), atol=ATOL, rtol=0)
            if b in (1, 4, 8):
                torch.testing.assert_close(out["output"], local.run(x=x)["output"], atol=ATOL, rtol=0)
        md = c.metadata()
        assert md["content_hash"] == local.content_hash
        assert c.health() == "SERVING"
        assert c.health("hlobridge.serve.v1.Predictor") == "SERVING"


def _good(c: hb.serve.Client, model: Hybrid) -> None:
    x = torch.randn(2, 16)
    torch.testing.assert_close(c.predict(x=x)["output"], _expect(model, x), atol=ATOL, rtol=0)


@pytest.mark.parametrize("case, code", [
    ("wrong_shape", "INVALID_ARGUMENT"),
    ("batch_too_large", "INVALID_ARGUMENT"),
    ("wrong_dtype", "INVALID_ARGUMENT"),
    ("missing_input", "INVALID_ARGUMENT"),
    ("unknown_input", "INVALID_ARGUMENT"),
    ("oversized", "OUT_OF_RANGE"),
    ("garbage", "INTERNAL"),
    ("duplicate_input", "INVALID_ARGUMENT"),
])
def test_bad_request_status_and_server_keeps_serving(artifact: tuple[Hybrid, Path], server: str,
                                                     case: str, code: str) -> None:
    model, _ = artifact
    with hb.serve.Client(server) as c:
        with pytest.raises(hb.serve.ServeError) as ei:
            if case == "wrong_shape":
                c.predict(x=torch.randn(2, 15))
            elif case == "batch_too_large":
                c.predict(x=torch.randn(9, 16))
            elif case == "wrong_dtype":
                c.predict(x=torch.randn(2, 16, dtype=torch.float64))
            elif case == "missing_input":
                c.predict()
            elif case == "unknown_input":
                c.predict(x=torch.randn(2, 16), secret_name_42=torch.zeros(1))
            elif case == "oversized":
                c.predict(x=torch.randn(8, 4096))
            elif case == "duplicate_input":
                # The same input twice: refused, not "the last one wins".
                from hlobridge.serve import encode_predict

                c.predict_raw(encode_predict([("x", torch.randn(2, 16)), ("x", torch.randn(2, 16))]))
            else:
                c.predict_raw(b"\xff\xfe garbage \x00\x01\x02" * 5)
        assert ei.value.code == code, ei.value
        assert "secret_name_42" not in str(ei.value)
        assert isinstance(ei.value, hb.BridgeError)
        _good(c, model)


def test_client_disconnect_mid_request(artifact: tuple[Hybrid, Path], server: str) -> None:
    model, _ = artifact
    from hlobridge.serve import encode_predict

    body = encode_predict({"x": torch.randn(8, 16)})
    with hb.serve.Client(server) as c:
        # Cancelled by the client (a deadline far shorter than one run) ...
        for _ in range(5):
            try:
                c.predict_raw(body, timeout=1e-4)
            except hb.serve.ServeError as e:
                assert e.code == "DEADLINE_EXCEEDED"
        _good(c, model)
    # ... and a client that closes its connection with calls in flight.
    c = hb.serve.Client(server)
    futs = [c._predict.future(body) for _ in range(4)]
    futs[0].cancel()
    c.close()
    with hb.serve.Client(server) as c2:
        _good(c2, model)


def test_dynamic_batching_concurrent_clients(artifact: tuple[Hybrid, Path]) -> None:
    model, path = artifact
    proc, addr = start_server(path, "--batching", "--max-delay-us", "5000")
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with hb.serve.Client(addr) as c:
                for j in range(4):
                    x = torch.randn(1 + (k + j) % 3, 16)
                    torch.testing.assert_close(c.predict(x=x)["output"], _expect(model, x),
                                               atol=ATOL, rtol=0)
        except BaseException as e:  # noqa: BLE001  (collected, re-raised below)
            errors.append(e)

    try:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[0]
    finally:
        assert stop_server(proc) == 0


def test_sigterm_drains_requests_in_flight(artifact: tuple[Hybrid, Path]) -> None:
    model, path = artifact
    # A long batching delay holds the requests in the server when SIGTERM comes.
    proc, addr = start_server(path, "--batching", "--max-delay-us", "2000000")
    results: list[object] = []
    xs = [torch.randn(1, 16) for _ in range(3)]

    def call(x: torch.Tensor) -> None:
        with hb.serve.Client(addr) as c:
            try:
                results.append(c.predict(x=x)["output"])
            except hb.serve.ServeError as e:
                results.append(e)

    probe = hb.serve.Client(addr)
    assert probe.health() == "SERVING"
    threads = [threading.Thread(target=call, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    # Draining: the open connection hears NOT_SERVING; new connections are
    # refused at once (not left to hang until their deadline).
    assert probe.health() == "NOT_SERVING"
    probe.close()
    import socket

    host, port = addr.rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
    for t in threads:
        t.join(60)
    assert proc.wait(timeout=60) == 0
    stop_server(proc)  # closes its pipes
    assert len(results) == 3
    for r in results:
        assert isinstance(r, torch.Tensor), r
    got = sorted(results, key=lambda t: float(t.sum()))  # type: ignore[arg-type]
    want = sorted((_expect(model, x) for x in xs), key=lambda t: float(t.sum()))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=ATOL, rtol=0)


def test_bearer_token_and_public_address(artifact: tuple[Hybrid, Path], tmp_path: Path) -> None:
    model, path = artifact
    tok = tmp_path / "token"
    tok.write_text("t0k3n-for-the-serve-test\n")
    proc, addr = start_server(path, "--token-file", str(tok))
    try:
        with hb.serve.Client(addr) as c, pytest.raises(hb.serve.ServeError) as ei:
            c.predict(x=torch.randn(1, 16))
        assert ei.value.code == "UNAUTHENTICATED"
        with hb.serve.Client(addr, token="wrong-token-for-the-test") as c, \
                pytest.raises(hb.serve.ServeError):
            c.predict(x=torch.randn(1, 16))
        with hb.serve.Client(addr, token="t0k3n-for-the-serve-test") as c:
            _good(c, model)
    finally:
        stop_server(proc)
    from harness import binary_cmd, find_binary

    binary = find_binary()
    assert binary is not None
    r = subprocess.run([*binary_cmd(binary), "serve", str(path), "--addr", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "token" in r.stderr


def test_rust_tch_client_equals_eager(artifact: tuple[Hybrid, Path], server: str,
                                      tmp_path: Path) -> None:
    """The served model called from Rust on tch tensors
    (``examples/serve_client_tch.rs``, the ``hlobridge-serve`` crate's
    ``tch`` feature): built and required by ``make test``, skipped elsewhere
    when not built."""
    import os

    import numpy as np

    exe = Path(__file__).resolve().parents[2] / "target" / "release" / "examples" / \
        "serve_client_tch"
    if not exe.is_file():
        assert os.environ.get("HLOBRIDGE_REQUIRE_TCH") != "1", f"{exe} was not built"
        pytest.skip("serve_client_tch not built (cargo build --release -p hlobridge-serve "
                    "--features tch --example serve_client_tch)")
    model, _ = artifact
    for b in (1, 3):
        x = torch.randn(b, 16)
        np.save(tmp_path / f"x{b}.npy", x.numpy())
        env = {**os.environ, "LD_LIBRARY_PATH": str(Path(torch.__file__).parent / "lib")}
        r = subprocess.run([str(exe), server, str(tmp_path / f"out{b}"),
                            f"x={tmp_path / f'x{b}.npy'}"],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        got = torch.from_numpy(np.load(tmp_path / f"out{b}" / "output.npy"))
        torch.testing.assert_close(got, _expect(model, x), atol=ATOL, rtol=0)


def test_batching_is_refused_for_a_model_that_mixes_rows(tmp_path: Path) -> None:
    class Center(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            return y - y.mean(0, keepdim=True)

    path = tmp_path / "center"
    hb.export(Center().eval(), torch.randn(4, 16), path=path, batch_dim=0, batch_sizes=[1, 4])
    from harness import binary_cmd, find_binary

    binary = find_binary()
    assert binary is not None
    r = subprocess.run([*binary_cmd(binary), "serve", str(path), "--addr", "127.0.0.1:0", "--batching"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "--batching refused" in r.stderr, r.stderr
    # Without --batching it serves exact batch sizes only (no padding).
    proc, addr = start_server(path)
    try:
        with hb.serve.Client(addr) as c:
            assert c.predict(x=torch.randn(4, 16))["output"].shape == (4, 4)
            with pytest.raises(hb.serve.ServeError) as ei:
                c.predict(x=torch.randn(3, 16))
            assert ei.value.code == "INVALID_ARGUMENT"
    finally:
        stop_server(proc)


def test_one_log_line_per_request(artifact: tuple[Hybrid, Path]) -> None:
    model, path = artifact
    proc, addr = start_server(path, "--log-level", "info")
    try:
        with hb.serve.Client(addr) as c:
            _good(c, model)
            with pytest.raises(hb.serve.ServeError):
                c.predict(x=torch.randn(2, 16), secret_name_42=torch.zeros(1))
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
    assert proc.stderr is not None
    err = proc.stderr.read()
    stop_server(proc)  # closes its pipes
    lines = [ln for ln in err.splitlines() if "Predictor/Predict" in ln]
    assert len(lines) == 2, err
    assert "status=Ok" in lines[0] and "batch=2" in lines[0] and "run_ms=" in lines[0]
    assert "status=InvalidArgument" in lines[1]
    assert "secret_name_42" not in err
