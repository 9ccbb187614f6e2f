"""The examples run end to end: the hybrid torch + JAX training step is ONE
fused program whose results match eager PyTorch (the script itself compares
loss, weights, bias and momentum with rtol 1e-4 / atol 1e-5 and exits non-zero
on a mismatch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_example(script: str) -> str:
    """Run ``examples/<script>`` with a fresh random seed; its stdout."""
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONWARNINGS="ignore",
               HLOBRIDGE_DEMO_SEED=str(int.from_bytes(os.urandom(2), "little")))
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_hybrid_train_step_is_one_fused_program_matching_eager_torch():
    text = run_example("hybrid_train_step.py")
    assert "ONE fused program" in text
    assert "programs compiled for the step: 1" in text
    for seg, producer in [("linear", "torch"), ("act_loss", "jax"), ("linear_grad", "torch"), ("sgd", "jax")]:
        assert f"segment {seg}" in text and f"[{producer}]" in text
    assert "MISMATCH" not in text


def test_whole_step_example_is_one_program_matching_eager_torch():
    """``examples/whole_step.py``: ``hb.compile_train_step`` with a JAX
    activation and a JAX optimizer; the script compares three steps with
    eager torch (loss rtol 1e-4 / atol 1e-5, parameters atol 1e-4) and exits
    non-zero on a mismatch."""
    text = run_example("whole_step.py")
    assert "ONE executable" in text and "PASSED" in text and "MISMATCH" not in text
    for name, producer in [("jax_act#", "jax"), ("jax_act (vjp)", "jax"),
                           ("momentum_update", "jax"), ("torch_0", "torch")]:
        assert any(name in line and f"[{producer}]" in line for line in text.splitlines()), \
            (name, text)
