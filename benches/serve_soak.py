"""Soak test of ``hlobridge serve`` (loopback only; for the docs' figures,
not CI): 16 clients for ``--minutes`` send a mix of

- good requests (batch 1-8, every output checked against eager torch),
- bad requests (wrong shape/dtype, unknown or duplicate input, garbage,
  oversized: each must get its own status code),
- slow requests (a raw HTTP/2 stream that sends half a message and stalls:
  the server must cut it at ``--request-timeout-ms``),
- cancelled requests (cancelled after 0-5 ms, or a 0.1 ms deadline),
- health and metadata calls,

against one server with ``--batching``. The server's RSS, open file
descriptors and threads are sampled every 10 s. A good request that does not
come back correct is a lost request (there must be none). Every loop is
bounded (by time and a request count); the server is stopped with SIGTERM at
the end and must exit 0.

    .venv/bin/python benches/serve_soak.py --minutes 20 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import hlobridge as hb  # noqa: E402
from hlobridge.serve import encode_predict  # noqa: E402
from serve_helpers import Hybrid, start_server, stop_server  # noqa: E402

REQUEST_TIMEOUT_MS = 2000


def proc_stats(pid: int) -> dict[str, int]:
    st = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            st["rss_kib"] = int(line.split()[1])
        elif line.startswith("Threads:"):
            st["threads"] = int(line.split()[1])
    st["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return st


# -- a raw HTTP/2 client that stalls mid-request ----------------------------------


def _frame(ty: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ty, flags]) + struct.pack(">I", stream) + payload


def _literal(name: str, value: str) -> bytes:
    # HPACK "literal header field without indexing, new name", no Huffman.
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def stalled_request(addr: str, limit_s: float) -> str:
    """Opens a Predict stream, sends half a message and stalls; returns
    ``"cut"`` if the server ends the stream within ``limit_s``, else ``"hung"``."""
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=limit_s)
    try:
        headers = b"".join(_literal(k, v) for k, v in [
            (":method", "POST"), (":scheme", "http"), (":path", "/hlobridge.serve.v1.Predictor/Predict"),
            (":authority", addr), ("content-type", "application/grpc"), ("te", "trailers")])
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"")
                  + _frame(1, 0x4, 1, headers) + _frame(0, 0, 1, b"\x00\x00\x00\x10\x00\x0a"))
        deadline = time.monotonic() + limit_s
        buf = b""
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                return "cut"  # connection closed
            buf += chunk
            while len(buf) >= 9:
                ln = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + ln:
                    break
                ty, flags, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                buf = buf[9 + ln:]
                if ty == 4 and not flags & 1:
                    s.sendall(_frame(4, 1, 0, b""))  # SETTINGS ack
                if sid == 1 and (ty == 3 or (ty in (0, 1) and flags & 1)):
                    return "cut"  # RST_STREAM, or the response ended the stream
        return "hung"
    finally:
        s.close()


# -- the client mix ------------------------------------------------------------------


BAD: list[tuple[str, str]] = [
    ("wrong_shape", "INVALID_ARGUMENT"), ("wrong_dtype", "INVALID_ARGUMENT"),
    ("unknown_input", "INVALID_ARGUMENT"), ("duplicate_input", "INVALID_ARGUMENT"),
    ("too_large_batch", "INVALID_ARGUMENT"), ("garbage", "INTERNAL"), ("oversized", "OUT_OF_RANGE"),
]


def bad_request(c: hb.serve.Client, kind: str) -> None:
    if kind == "wrong_shape":
        c.predict(x=torch.randn(2, 15))
    elif kind == "wrong_dtype":
        c.predict(x=torch.randn(2, 16, dtype=torch.float64))
    elif kind == "unknown_input":
        c.predict(x=torch.randn(2, 16), nope=torch.zeros(1))
    elif kind == "duplicate_input":
        c.predict_raw(encode_predict([("x", torch.randn(1, 16)), ("x", torch.randn(1, 16))]))
    elif kind == "too_large_batch":
        c.predict(x=torch.randn(9, 16))
    elif kind == "garbage":
        c.predict_raw(b"\xff\xfe garbage \x00\x01" * 7)
    else:
        c.predict(x=torch.randn(8, 8192))


def client(k: int, addr: str, model: Hybrid, until: float, max_requests: int,
           counts: dict[str, int], lock: threading.Lock) -> None:
    rng = random.Random(k)
    g = torch.Generator().manual_seed(k)
    mine: dict[str, int] = {}

    def count(key: str) -> None:
        mine[key] = mine.get(key, 0) + 1

    with hb.serve.Client(addr, timeout=30) as c, torch.no_grad():
        for _ in range(max_requests):
            if time.monotonic() > until:
                break
            r = rng.random()
            if r < 0.60:
                x = torch.randn(rng.randint(1, 8), 16, generator=g)
                try:
                    y = c.predict(x=x)["output"]
                    ok = torch.allclose(y, model(x), atol=1e-5, rtol=0)
                    count("good_ok" if ok else "good_wrong")
                except hb.serve.ServeError as e:
                    count(f"good_lost_{e.code}")
            elif r < 0.75:
                kind, code = BAD[rng.randrange(len(BAD))]
                try:
                    bad_request(c, kind)
                    count(f"bad_accepted_{kind}")
                except hb.serve.ServeError as e:
                    count("bad_ok" if e.code == code else f"bad_{kind}_got_{e.code}")
            elif r < 0.85:
                count(f"slow_{stalled_request(addr, 3 * REQUEST_TIMEOUT_MS / 1000)}")
            elif r < 0.95:
                body = encode_predict({"x": torch.randn(rng.randint(1, 8), 16, generator=g)})
                if rng.random() < 0.5:
                    fut = c._predict.future(body)
                    time.sleep(rng.random() * 0.005)
                    fut.cancel()
                    count("cancelled")
                else:
                    try:
                        c.predict_raw(body, timeout=1e-4)
                        count("deadline_met_in_time")
                    except hb.serve.ServeError as e:
                        count("deadline_ok" if e.code == "DEADLINE_EXCEEDED" else f"deadline_got_{e.code}")
            else:
                try:
                    assert c.health() == "SERVING"
                    assert c.metadata()["format"] == "hlobridge-artifact/1"
                    count("meta_ok")
                except (hb.serve.ServeError, AssertionError):
                    count("meta_failed")
    with lock:
        for key, v in mine.items():
            counts[key] = counts.get(key, 0) + v


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-requests", type=int, default=1_000_000, help="per client")
    ap.add_argument("--json", type=Path, default=ROOT / "bench-results" / "serve_soak.json")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = Hybrid().eval()
    torch.set_grad_enabled(False)
    out: dict[str, Any] = {"minutes": a.minutes, "clients": a.clients, "cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as d:
        art = Path(d) / "hybrid"
        hb.export(model, torch.randn(8, 16), path=art, batch_dim=0, batch_sizes=[1, 4, 8])
        proc, addr = start_server(art, "--batching", "--max-delay-us", "2000", "--max-queue", "1024",
                                  "--max-message-bytes", "262144", "--request-timeout-ms",
                                  str(REQUEST_TIMEOUT_MS), "--deadline-ms", "10000")
        samples: list[dict[str, float]] = []
        counts: dict[str, int] = {}
        lock = threading.Lock()
        t0 = time.monotonic()
        until = t0 + 60 * a.minutes
        done = threading.Event()

        def sampler() -> None:
            while not done.is_set():
                st: dict[str, float] = dict(proc_stats(proc.pid))
                st["t_s"] = round(time.monotonic() - t0, 1)
                samples.append(st)
                done.wait(10)

        sm = threading.Thread(target=sampler)
        sm.start()
        try:
            threads = [threading.Thread(target=client, args=(k, addr, model, until, a.max_requests, counts, lock))
                       for k in range(a.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60 * a.minutes + 300)
            done.set()
            sm.join()
            final = proc_stats(proc.pid)
        finally:
            done.set()
            code = stop_server(proc)
    warm = [s for s in samples if s["t_s"] >= 60] or samples
    lost = sum(v for k, v in counts.items() if k.startswith("good_") and k != "good_ok")
    unexpected = sum(v for k, v in counts.items()
                     if k.startswith(("bad_accepted", "slow_hung", "deadline_got", "meta_failed"))
                     or (k.startswith("bad_") and "_got_" in k))
    out.update(
        counts=dict(sorted(counts.items())), lost_requests=lost, unexpected=unexpected,
        exit_code=code, final=final,
        rss_kib={"first_after_1min": warm[0]["rss_kib"], "max": max(s["rss_kib"] for s in samples),
                 "last": final["rss_kib"]},
        fds={"first_after_1min": warm[0]["fds"], "max": max(s["fds"] for s in samples), "last": final["fds"]},
        threads={"first_after_1min": warm[0]["threads"], "max": max(s["threads"] for s in samples),
                 "last": final["threads"]},
        samples=samples)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=2))
    summary = {k: out[k] for k in ("counts", "lost_requests", "unexpected", "exit_code", "rss_kib", "fds", "threads")}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
