"""The stitcher's correctness criterion: a fused program equals its segments
run one by one.

For every plan in ``stitch_plans.PLANS`` (at least 20, over live jax /
torch_xla lowerings and corpus modules), on fresh random inputs:

* **fused**: ``hlobridge stitch PLAN --run --json --out DIR`` compiles and
  runs ONE program on the CPU plugin (``--devices 4`` for the sharded plans),
  inlined and with ``--no-inline``;
* **reference**: every segment alone, ``hlobridge run SEG.mlir``, in
  dependency order, every handoff through host memory as an ``.npy`` file.
  The sharded jax segments are the exception: ``hlobridge run`` feeds whole
  arrays only and refuses parameters a program shards, so their reference is
  jax itself in a subprocess with 4 host devices, after checking that jax
  lowers the very text the plan stitched (``stitch_plans.sharded_reference``).

Tolerance: integers and booleans must be equal; floats within rtol=1e-5,
atol=1e-6 (measured: every single-device plan, bf16 included, comes out
bit-identical).  The one looser bound is stated with its reason in the plan
(``PlanSpec.tol``): the sum behind a cross-device all-reduce in the sharded
plans, whose reference runs in jaxlib's own XLA rather than the plugin.

Seeds: a fresh base seed per session (``HLOBRIDGE_STITCH_SEED`` fixes it);
each plan's inputs come from ``crc32(f"{base}:{plan}")``; both are printed on
failure.

The receipt is checked too: one program (one compile, one public ``@main``),
the segment list in dependency order with producers and inlining, and the
handle list with producers, consumers, types and donation.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import harness
import stitch_plans as SP
import stitch_runners as SR

BASE_SEED = int(os.environ.get("HLOBRIDGE_STITCH_SEED") or random.SystemRandom().randrange(1 << 31))
DEFAULT_TOL = SP.Tol(1e-5, 1e-6, "default")


@pytest.fixture(scope="session")
def stitch_binary(hlobridge_binary) -> list[str]:
    cmd = harness.binary_cmd(hlobridge_binary)
    r = subprocess.run(cmd + ["stitch", "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"{hlobridge_binary} has no 'stitch' command (rebuild: scripts/setup.sh)\n{r.stderr}")
    return cmd


@pytest.fixture(scope="session")
def live():
    return SP.ensure_live()


@pytest.fixture(scope="session")
def workroot(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stitch_eq")


_PREPARED: dict[str, tuple] = {}


def prepared(spec: SP.PlanSpec, live, binary, root: Path):
    """Build the plan, draw its inputs, run the reference (once per plan)."""
    if spec.name not in _PREPARED:
        missing = [s.module for s in spec.segments if s.module.startswith("corpus:")
                   and not (SP.CORPUS / s.module.partition(":")[2]).exists()]
        if missing:
            pytest.skip(f"corpus modules missing under {SP.CORPUS} (set HLOBRIDGE_CORPUS): {missing}")
        live_dir, live_meta = live
        d = root / spec.name
        if d.exists():
            shutil.rmtree(d)
        built = SR.build(spec, live_dir, live_meta, d)
        seed = SR.test_seed(BASE_SEED, spec.name)
        files = SR.write_inputs(built, seed, d / "inputs")
        try:
            ref, types = SR.run_reference(binary, built, files, d / "ref")
            _PREPARED[spec.name] = (built, seed, files, ref, types, None)
        except Exception as e:  # noqa: BLE001 -- reported by each test of the plan
            _PREPARED[spec.name] = (built, seed, files, None, None, e)
    return _PREPARED[spec.name]


def reproduce(spec, seed) -> str:
    return (f"[plan {spec.name}: {spec.covers}; input seed {seed} from base seed {BASE_SEED}; "
            f"reproduce with HLOBRIDGE_STITCH_SEED={BASE_SEED}]")


def compare(name: str, ref: np.ndarray, got: np.ndarray, tol: SP.Tol) -> str | None:
    if ref.dtype != got.dtype:
        return f"{name}: dtype {got.dtype}, reference {ref.dtype}"
    if ref.shape != got.shape:
        return f"{name}: shape {got.shape}, reference {ref.shape}"
    if ref.dtype.kind in "biu":
        bad = np.flatnonzero(ref != got)
        if bad.size:
            return (f"{name}: {bad.size} of {ref.size} elements differ (exact comparison); first at flat "
                    f"index {bad[0]}: fused {got.flat[bad[0]]} vs reference {ref.flat[bad[0]]}")
        return None
    r = ref.astype(np.complex128 if ref.dtype.kind == "c" else np.float64)
    g = got.astype(r.dtype)
    nan_r, nan_g = np.isnan(r), np.isnan(g)
    if (nan_r != nan_g).any():
        return f"{name}: NaN positions differ ({int(nan_g.sum())} fused vs {int(nan_r.sum())} reference)"
    r, g = np.where(nan_r, 0, r), np.where(nan_g, 0, g)
    err = np.abs(g - r)
    bound = tol.atol + tol.rtol * np.abs(r)
    if (err > bound).any() or (np.isinf(r) != np.isinf(g)).any():
        i = int(np.argmax(err - bound))
        return (f"{name}: {int((err > bound).sum())} of {r.size} elements outside rtol={tol.rtol} "
                f"atol={tol.atol} ({tol.why}); worst at flat index {i}: fused {g.flat[i]!r} vs reference "
                f"{r.flat[i]!r} (|diff| {err.flat[i]:.3g}); max |diff| {err.max():.3g}")
    return None


def main_signature(text: str) -> str:
    """The line declaring the public ``@main`` (with its port attributes)."""
    return next((line for line in text.splitlines() if re.match(r"\s*func\.func (public )?@main\(", line)), "")


def check_receipt(built: SR.Built, receipt: dict, fused_text: str, types: dict, inline: bool) -> list[str]:
    spec = built.spec
    problems = []

    def want(cond, msg):
        if not cond:
            problems.append(msg)

    # One program: one compile of one module with one public @main.
    want(receipt["file"].endswith("(stitched)"), f"receipt file {receipt['file']!r}")
    want(isinstance(receipt.get("compile_ms"), (int, float)), "no compile time in the receipt")
    want(len(receipt["devices"]) == spec.devices, f"devices {receipt['devices']}")
    want(len(receipt["outputs"]) == len(spec.outputs), f"{len(receipt['outputs'])} outputs")
    want(fused_text.count("func.func public") == 1 and "func.func public @main" in fused_text,
         "the fused module must have exactly one public function, @main")
    want(len(re.findall(r"^module @", fused_text, re.M)) == 1, "more than one module")
    if spec.devices > 1:
        want("mhlo.num_partitions = 4" in fused_text, "mhlo.num_partitions = 4 lost")
        seg_texts = [s.module.read_text() for s in built.segments]
        if any("sdy.mesh @" in t for t in seg_texts):
            want(fused_text.count("sdy.mesh @") == 1, "equal meshes must merge into one sdy.mesh")
        # Every sharded parameter / result of a segment survives: as an
        # argument / result attribute of the called function, or (inlined)
        # as a sharding constraint in @main.
        n_port_shardings = sum(len(re.findall(r"(?:sdy|mhlo)\.sharding = ", main_signature(t))) for t in seg_texts)
        n_fused = len(re.findall(r"sdy\.sharding_constraint|custom_call @Sharding|(?:sdy|mhlo)\.sharding = ",
                                 fused_text))
        want(n_fused >= n_port_shardings,
             f"{n_port_shardings} sharded segment ports but only {n_fused} shardings in the fused module")

    # Segments: dependency order, producers, inlining.
    st = receipt["stitch"]
    segs = st["segments"]
    want(sorted(s["name"] for s in segs) == sorted(s.name for s in built.segments),
         f"segments {[s['name'] for s in segs]}")
    defined = {i.name for i in built.inputs}
    by_name = {s.name: s for s in built.segments}
    # A module used by several segments is emitted once, named after the
    # first of them in execution order.
    first_of_module: dict[Path, str] = {}
    for r in segs:
        if r["name"] in by_name:
            first_of_module.setdefault(by_name[r["name"]].module, r["name"])
    uses = {m: sum(1 for s in built.segments if s.module == m) for m in {s.module for s in built.segments}}
    for r in segs:
        s = by_name.get(r["name"])
        if s is None:
            problems.append(f"unknown segment {r['name']} in the receipt")
            continue
        missing = [h for h in s.inputs if h not in defined]
        want(not missing, f"segment {s.name} listed before the producers of {missing}")
        defined |= {h for h in s.outputs if h != "_"}
        want(r["producer"] == s.producer, f"segment {s.name}: producer {r['producer']!r}, expected {s.producer!r}")
        # A module used by two segments is emitted once and called (every
        # entry here has a single block, so nothing else blocks inlining).
        reused = uses[s.module] > 1
        if inline and not reused:
            want(r["inlined"] and r["function"] is None, f"segment {s.name} not inlined: {r}")
        else:
            fn = f"{first_of_module[s.module]}__main"
            want(not r["inlined"] and r["function"] == fn, f"segment {s.name}: expected a call of @{fn}: {r}")
            want(f"func.func private @{fn}(" in fused_text, f"@{fn} missing from the fused module")
        want(r["ops"] > 0, f"segment {s.name}: {r['ops']} ops")

    # Handles: every program input and every named segment output, with its
    # producer, consumers (plan order, then 'output'), type and donation.
    expect = {}
    for i in built.inputs:
        expect[i.name] = ("input", i.donate, i.type)
    for s in built.segments:
        for h in s.outputs:
            if h != "_":
                expect[h] = (s.name, False, types.get(h))
    got = {h["name"]: h for h in st["handles"]}
    # Definition order: program inputs, then segment outputs in plan order.
    want([h["name"] for h in st["handles"]] == list(expect),
         f"handles {[h['name'] for h in st['handles']]} vs expected {list(expect)}")
    for name, (producer, donated, ty) in expect.items():
        h = got.get(name)
        if h is None:
            continue
        consumers = [s.name for s in built.segments if name in s.inputs]
        if name in spec.outputs:
            consumers.append("output")
        want(h["producer"] == producer, f"handle {name}: producer {h['producer']!r}, expected {producer!r}")
        want(h["consumers"] == consumers, f"handle {name}: consumers {h['consumers']}, expected {consumers}")
        want(h["donated"] == donated, f"handle {name}: donated {h['donated']}")
        if ty is not None and name in types:
            want(h["ty"] == ty, f"handle {name}: type {h['ty']}, reference {ty}")
    for i in built.inputs:
        if i.donate:
            want(re.search(r"(tf\.aliasing_output|jax\.buffer_donor)", fused_text) is not None,
                 f"donated input {i.name} lost its donation attribute")
    return problems


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "no-inline"])
@pytest.mark.parametrize("spec", SP.PLANS, ids=[p.name for p in SP.PLANS])
def test_fused_equals_segments(spec, inline, live, stitch_binary, workroot):
    built, seed, files, ref, types, err = prepared(spec, live, stitch_binary, workroot)
    ctx = reproduce(spec, seed)
    if err is not None:
        pytest.fail(f"{ctx}\nreference run failed: {err}")
    out = workroot / spec.name / ("inline" if inline else "no_inline")
    try:
        receipt, outs, fused_text = SR.run_fused(stitch_binary, built, files, out, inline)
    except RuntimeError as e:
        pytest.fail(f"{ctx}\nfused run failed: {e}")
    problems = check_receipt(built, receipt, fused_text, types, inline)
    for k, h in enumerate(spec.outputs):
        if k < len(outs):
            msg = compare(f"output {k} ({h})", ref[h], outs[k], spec.tol.get(h, DEFAULT_TOL))
            if msg:
                problems.append(msg)
    assert not problems, f"{ctx}\n" + "\n".join(problems)


def test_plan_inventory(live):
    """At least 20 plans, and together they cover what the criterion names."""
    live_dir, live_meta = live
    plans = SP.PLANS
    assert len(plans) >= 20
    assert len({p.name for p in plans}) == len(plans)
    features: dict[str, list[str]] = {}

    def has(feature, plan):
        features.setdefault(feature, []).append(plan.name)

    for p in plans:
        paths = [SR.resolve_module(s.module, live_dir, live_meta)[0] for s in p.segments]
        texts = [x.read_text() for x in paths]
        producers = [s.producer for s in p.segments]
        if any(a == "torch" and b == "jax" for a, b in zip(producers, producers[1:])) and \
                any(a == "jax" and b == "torch" for a, b in zip(producers, producers[1:])):
            has("chain torch -> jax -> torch", p)
        consumed = [h for s in p.segments for h in (s.inputs.values() if isinstance(s.inputs, dict) else s.inputs)]
        if any(consumed.count(h) > 1 for s in p.segments for h in s.outputs if h != "_"):
            has("fan-out of a segment output", p)
        if any(len([h for h in (s.inputs.values() if isinstance(s.inputs, dict) else s.inputs)
                    if any(h in t.outputs for t in p.segments)]) >= 2 for s in p.segments):
            has("fan-in", p)
        if len(set(paths)) < len(paths):
            has("module used by two segments", p)
        if any("_" in s.outputs for s in p.segments):
            has("'_' outputs", p)
        if any("bf16" in t for t in texts):
            has("bf16", p)
        if any(re.search(r"tensor<[0-9x]*u?i(8|16|32|64)>", t) for t in texts):
            has("integer", p)
        if any(re.search(r"\bcall @", t) for t in texts):
            has("func.call", p)
        if any("stablehlo.while" in t for t in texts):
            has("while", p)
        if any("stablehlo.case" in t for t in texts):
            has("case", p)
        if any(s.module.startswith("live:torch_export") or s.module.startswith("corpus:torch/export")
               for s in p.segments):
            has("torch_xla export", p)
        if any(s.module.startswith("live:torch_lazy") or s.module.startswith("corpus:torch/lazy")
               for s in p.segments):
            has("torch_xla lazy trace", p)
        if p.devices == 4 and any("mhlo.num_partitions = 4" in t and "sdy.sharding" in t for t in texts) \
                and "torch" in producers:
            has("Shardy segment with torch on 4 devices", p)
        if p.devices == 4 and any("mhlo.sharding" in t for t in texts) and "torch" in producers:
            has("GSPMD segment with torch on 4 devices", p)
        if any(s.casts for s in p.segments):
            has("casts", p)
        if any(i.donate for i in p.inputs):
            has("donation", p)
        if any(s.module.startswith("corpus:") for s in p.segments):
            has("corpus module", p)
        if any(s.module.startswith("live:") for s in p.segments):
            has("live module", p)
    needed = ["chain torch -> jax -> torch", "fan-out of a segment output", "fan-in", "module used by two segments",
              "'_' outputs", "bf16", "integer", "func.call", "while", "case", "torch_xla export",
              "torch_xla lazy trace", "Shardy segment with torch on 4 devices",
              "GSPMD segment with torch on 4 devices", "casts", "donation",
              "corpus module", "live module"]
    missing = [f for f in needed if f not in features]
    assert not missing, f"no plan covers {missing}; coverage: {features}"
