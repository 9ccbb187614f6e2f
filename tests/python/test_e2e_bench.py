"""Smoke test of the end-to-end benchmark suite (``benches/e2e/run.py``): a
``--quick`` run of the cheap parts (dispatch, the small hybrid step; no
torch_xla venv) writes ``e2e.json`` with the documented schema and its plots;
the model-zoo part on one small model writes its ratio table, breakdown,
README block and plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAT_KEYS = {"median_us", "p10_us", "p90_us", "reps", "batch"}


def _is_stats(s: object) -> bool:
    return isinstance(s, dict) and STAT_KEYS <= s.keys() and s["p10_us"] <= s["median_us"] <= s["p90_us"]


def test_quick_e2e_run_writes_json_and_plots(tmp_path: Path) -> None:
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONWARNINGS="ignore")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "e2e" / "run.py"), "--quick",
         "--only", "dispatch,step", "--sizes", "small", "--no-torch-xla", "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads((tmp_path / "e2e.json").read_text())
    assert res["quick"] is True and res["machine"]["cores"] >= 1

    step = res["step"]["small"]
    assert step["shape"] == "batch 16, 32->32"
    for variant in ("hlobridge fused", "dlpack hop", "host copy hop", "pure jax"):
        assert _is_stats(step["variants"][variant]), variant
    assert all(d < 1e-3 for d in step["max_abs_diff"].values())

    for variant in ("hlobridge call_jax", "native execute", "jax.jit", "torch eager"):
        assert _is_stats(res["dispatch"][variant]), variant

    targets = {t["target"]: t for t in res["targets"]}
    assert "fused vs DLPack hop, small (speed-up)" in targets
    assert all(isinstance(t["met"], bool) and t["ratio"] > 0 for t in targets.values())
    assert "targets" in out.stdout and ("met" in out.stdout or "MISSED" in out.stdout)

    assert res["plots"] == ["e2e_step.png", "e2e_dispatch.png"]
    for name in res["plots"]:
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size < 100_000


def test_compile_cache_bench_measures_both_sides_in_fresh_processes(tmp_path: Path) -> None:
    """``benches/compile_cache_bench.py --anchor`` on a tiny generated train
    step: hlobridge's cold process compiles once and its warm process only
    loads from disk (the script fails otherwise), the jaxlib anchor's warm
    process deserializes what its cold process serialized, and every time
    and ratio it reports is consistent."""
    module = tmp_path / "tiny_train.mlir"
    gen = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "tools" / "gen_big_module.py"), "--out", str(module),
         "--layers", "1", "--d-model", "64", "--heads", "2", "--seq", "16", "--batch", "2",
         "--vocab", "128", "--accum", "1"],
        env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr[-3000:]
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONWARNINGS="ignore")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "compile_cache_bench.py"), "--module", str(module),
         "--anchor", "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    for side in ("", "jaxlib_"):
        cold, warm = res[f"{side}cold_s"], res[f"{side}warm_s"]
        assert cold > 0 and warm > 0, res
        assert abs(res[f"{side}ratio"] - cold / warm) < 1e-6 * res[f"{side}ratio"], res
    assert res["entry_bytes"] > res["module_bytes"] > 0  # the entry holds the text and the executable
    assert res["jaxlib_bytes"] > 0 and res["reps"] == 1


def test_quick_zoo_part_writes_ratio_table_breakdown_and_plot(tmp_path: Path) -> None:
    """``--quick --only zoo`` on one small model of the model zoo, every
    path: the JSON has each variant's stats, compile times, paired ratios
    and the hlobridge breakdown (positive numbers; no timing assertion), a
    reason exactly where hlobridge is slower than eager, the README block
    and the plot."""
    env = dict(os.environ, PJRT_DEVICE="CPU", PYTHONWARNINGS="ignore")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "e2e" / "run.py"), "--quick", "--only", "zoo",
         "--models", "timm-mixer", "--zoo-paths", "infer,step_sgd,train",
         "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads((tmp_path / "e2e.json").read_text())
    z = res["zoo"]
    assert z["paths"] == ["infer", "step_sgd", "train"] and z["torch_threads"] >= 1
    assert [(r["model"], r["path"]) for r in z["rows"]] == [
        ("timm-mixer", "infer"), ("timm-mixer", "step_sgd"), ("timm-mixer", "train")]
    for row in z["rows"]:
        assert "error" not in row and row["errors"] == {}, row
        assert set(row["variants"]) == {"hlobridge", "eager", "inductor"}
        assert all(_is_stats(s) and s["median_us"] > 0 for s in row["variants"].values())
        assert set(row["compile_s"]) == {"hlobridge", "inductor"}
        assert all(s > 0 for s in row["compile_s"].values())
        # Same inputs and initial weights: logits / first-step losses agree.
        assert all(d < 1e-3 for d in row["max_abs_diff"].values()), row["max_abs_diff"]
        assert set(row["ratios"]) == {"hlobridge/eager", "inductor/eager", "hlobridge/inductor"}
        for r in row["ratios"].values():
            assert 0 < r["p10"] <= r["median"] <= r["p90"] and r["rounds"] == z["reps"]
        bd = row["breakdown"]
        assert bd["pjrt_ms"] > 0 and bd["host_ms"] >= 0 and bd["executions_per_call"] >= 1
        assert bd["programs"] >= 1 and bd["stablehlo_ops"] > 0 and bd["stablehlo_top"]
        slower = row["ratios"]["hlobridge/eager"]["median"] > 1.0
        assert (row["reason"] is not None) == slower
        if slower:
            assert "ms" in row["reason"] and "program:" in row["reason"]

    targets = {t["target"]: t for t in res["targets"]}
    assert any(t.startswith("zoo torch.compile inference") for t in targets)
    assert res["plots"] == ["zoo.png"]
    png = tmp_path / "zoo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 100_000
    table = (tmp_path / "zoo_table.md").read_text()
    assert "| timm-mixer | torch.compile inference |" in table
    assert "| timm-mixer | compile_train_step + SGD |" in table
    assert "hlobridge / inductor" in (tmp_path / "e2e.md").read_text()
