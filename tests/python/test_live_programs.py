"""Fresh modules from live jax / torch_xla / Pallas programs (see live_programs.py).

Asserts that generation covered every category and that each generated
module that MLIR parses passes the round-trip checks (a)-(c) of
test_lossless.py.

Run:  .venv/bin/python -m pytest -W error tests/python/test_live_programs.py -q
      HLOBRIDGE_LIVE_FORCE=1 to regenerate with new shapes/seeds.
"""

from __future__ import annotations

import pytest

import harness
import live_programs
import mlir_canon

MANIFEST = live_programs.ensure_generated()
OUT = live_programs.DEFAULT_OUT
ENTRIES = [e for e in MANIFEST["programs"] if e.get("file")]
VERDICTS = mlir_canon.parse_ok_map([OUT / e["file"] for e in ENTRIES])
PARSED = [e for e in ENTRIES if VERDICTS[str(OUT / e["file"])][0]]

REQUIRED_CATEGORIES = {
    "models", "grads", "shardings", "control_flow", "pallas_interpret", "pallas_tpu", "pallas_triton",
    "torch_export", "torch_lazy",
}
# Generated on purpose although MLIR cannot read them back: torch_xla with
# XLA_HLO_DEBUG=1 prints locations in MLIR's unparseable "pretty" form.
EXPECTED_REFUSED = {"torch_lazy_mlp_fwd_bwd_sgd_debug"}


def test_generation_succeeded():
    failed = {e["name"]: e["error"] for e in MANIFEST["programs"] if not e.get("file")}
    assert not MANIFEST["worker_errors"], MANIFEST["worker_errors"]
    assert not failed, failed


def test_coverage():
    assert len(ENTRIES) >= 25, [e["name"] for e in ENTRIES]
    assert len(PARSED) >= 20, [e["name"] for e in PARSED]
    cats = {e["category"] for e in PARSED}
    assert REQUIRED_CATEGORIES <= cats, REQUIRED_CATEGORIES - cats
    names = {e["name"] for e in PARSED}
    for needle in ("scan", "while", "fori", "cond_switch", "shardy", "gspmd", "shard_map", "debug_info",
                   "donate", "custom_vjp", "sort", "gather_scatter", "fft", "bf16", "transformer"):
        assert any(needle in n for n in names), needle


def test_mlir_refusals_are_known():
    refused = {e["name"]: VERDICTS[str(OUT / e["file"])][1] for e in ENTRIES if e not in PARSED}
    assert set(refused) <= EXPECTED_REFUSED, refused


@pytest.fixture(scope="session")
def live_results(checker):
    return checker.results([str(OUT / e["file"]) for e in PARSED])


@pytest.mark.parametrize("entry", PARSED, ids=[e["name"] for e in PARSED])
def test_live_roundtrip(entry, live_results):
    r = live_results[str(OUT / entry["file"])]
    assert not r.get("mlir_refused"), r.get("mlir_refused")
    if r["failures"]:
        pytest.fail(harness.format_failures([r]), pytrace=False)
