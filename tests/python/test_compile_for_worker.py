"""``hb.compile_for`` for TPU and CUDA compiles in a worker process
(``hlobridge._src.target_worker``), so that no environment variable is
written in a multithreaded process and the plugins' stderr becomes logging.

Each case runs a fresh interpreter with libtpu's variables unset
(``TPU_SKIP_MDS_QUERY``, ``ALLOW_MULTIPLE_LIBTPU_LOAD``), the way a user's
session starts, and checks:

- the compile succeeds, in another process, and the caller's environment
  never gains ``ALLOW_MULTIPLE_LIBTPU_LOAD`` (JAX itself sets
  ``TPU_SKIP_MDS_QUERY`` when it initializes on a machine without TPUs);
- loading libtpu in the caller's (multithreaded) process is refused by name
  instead of writing them (``PluginLoadError`` naming ``TpuEnvironment``);
- libtpu's load-time lines (``unexpected worker hostname`` …) are not on the
  caller's stderr, and are ``DEBUG`` records of ``hlobridge.plugin_stderr``;
- a compiler error comes back as the same named exception, and a killed
  worker is replaced by the next call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hlobridge import _native

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(r'''
    import json, logging, os, signal, sys, time
    import torch
    import hlobridge as hb
    from hlobridge import _native
    from hlobridge._src import target_worker

    names = [k for k, _ in _native.tpu_load_env()]
    out = {"unset_at_start": all(k not in os.environ for k in names)}

    records = []
    class Keep(logging.Handler):
        def emit(self, r):
            records.append(r.getMessage())
    log = logging.getLogger("hlobridge.plugin_stderr")
    log.addHandler(Keep())
    log.setLevel(logging.DEBUG)
    log.propagate = False

    TEXT = """module @m {
      func.func public @main(%a: tensor<64x128xf32>, %b: tensor<128x32xf32>) -> tensor<64x32xf32> {
        %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x32xf32>) -> tensor<64x32xf32>
        %1 = stablehlo.tanh %0 : tensor<64x32xf32>
        return %1 : tensor<64x32xf32>
      }
    }"""
    # In this process (torch imported: many threads) the Rust side refuses
    # to write the variables instead of racing getenv.
    try:
        _native.compile_for_target("tpu:v5e", TEXT)
        out["in_process"] = "compiled"
    except hb.PluginLoadError as e:
        out["in_process"] = "refused" if "TpuEnvironment" in str(e) else f"other: {e}"
    out["threads"] = len(os.listdir("/proc/self/task"))

    exe = hb.compile_for("tpu:v5e", TEXT)
    out["platform"] = exe.receipt.platform
    out["memory_args"] = exe.memory.arguments
    out["worker_pid"] = target_worker.worker_pid()
    out["my_pid"] = os.getpid()
    # JAX's own cloud_tpu_init writes TPU_SKIP_MDS_QUERY when it initializes
    # its backends on a machine without TPU chips; nothing but a libtpu
    # loader writes ALLOW_MULTIPLE_LIBTPU_LOAD.
    out["env_written"] = [k for k in names if k in os.environ and k != "TPU_SKIP_MDS_QUERY"]
    time.sleep(0.5)  # let the stderr thread log what libtpu printed
    out["records"] = records

    # A compiler error comes back as the same named error.
    try:
        hb.compile_for("tpu:v5e", "module @bad { func.func public @main( }")
        out["bad"] = "compiled"
    except hb.BridgeError as e:
        out["bad"] = type(e).__name__

    # A killed worker is replaced by the next call.
    os.kill(out["worker_pid"], signal.SIGKILL)
    time.sleep(0.2)
    again = hb.compile_for("tpu:v6e", TEXT)
    out["after_kill"] = again.receipt.device_kind
    out["new_worker"] = target_worker.worker_pid() not in (None, out["worker_pid"])
    print("RESULT " + json.dumps(out))
''')


def _need_libtpu() -> None:
    if _native.accelerators()["libtpu"]:
        return
    if os.environ.get("HLOBRIDGE_ACCEL") == "0":
        pytest.skip("libtpu not installed (HLOBRIDGE_ACCEL=0)")
    pytest.fail("libtpu not installed; scripts/setup.sh installs it into .venv/accel")


def test_tpu_compiles_in_a_worker_started_with_libtpus_variables() -> None:
    _need_libtpu()
    env = {k: v for k, v in os.environ.items() if k not in dict(_native.tpu_load_env())}
    env["PJRT_DEVICE"] = "CPU"
    p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    r = json.loads(line[len("RESULT "):])
    assert r["unset_at_start"]
    assert r["threads"] > 1, r
    assert r["in_process"] == "refused", r
    assert r["platform"] == "tpu"
    assert r["memory_args"] == (64 * 128 + 128 * 32) * 4
    assert r["worker_pid"] not in (None, r["my_pid"])
    assert r["env_written"] == [], "the caller's environment gained libtpu's variables"
    assert r["bad"] not in ("compiled",) and r["bad"].endswith("Error"), r
    assert r["after_kill"] == "TPU v6 lite" and r["new_worker"], r
    # libtpu's load noise: a debug record, not on the caller's stderr.
    noise = ("unexpected worker hostname", "could not determine TPU")
    assert not any(n in p.stderr for n in noise), p.stderr[-3000:]
    assert any(n in rec for rec in r["records"] for n in noise), r["records"][:5]
