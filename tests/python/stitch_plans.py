#!/usr/bin/env python3
"""Stitch plans over real modules, and the two ways to run them.

Used by ``test_stitch_equivalence.py``.  Three parts:

* **Live modules** (``ensure_live``): small jax / torch_xla programs lowered
  fresh in subprocesses (jax with 4 host CPU devices for the Shardy segments,
  torch_xla with ``PJRT_DEVICE=CPU``), cached under ``.cache/stitch/live/``
  keyed by a hash of this file and the framework versions.  Every module comes
  with the names of its entry parameters (torch export: from the exported
  program's input locations; lazy traces: by matching parameter types to the
  traced tensors; jax: the positional arguments), so plans bind handles by
  name, not by the producers' parameter order.
* **Plans** (``PLANS``): at least 20 stitch plans over live modules, corpus
  modules (``../shared/corpus``) and the fixtures in ``tests/fixtures/stitch``.
* **Runners**: ``run_fused`` (``hlobridge stitch PLAN --run``: one program)
  and ``run_reference`` (every segment on its own with ``hlobridge run``, each
  handoff through host memory as an ``.npy`` file).  A segment that shards its
  parameters (``mhlo.num_partitions = 4`` with ``sdy.sharding`` on its
  arguments) is refused by ``hlobridge run`` (it feeds whole arrays only), so
  its reference runs in jax itself: a subprocess with 4 host devices lowers
  the same function again, checks that the text is byte-for-byte the stored
  segment, and runs it with ``jax.jit`` on the same inputs (``--sharded-ref``).

    python tests/python/stitch_plans.py              # generate the live modules, list the plans
    python tests/python/stitch_plans.py --force      # regenerate
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from live_programs import framework_versions

HERE = Path(__file__).resolve()
REPO_ROOT = HERE.parents[2]
CACHE_ROOT = Path(os.environ.get("HLOBRIDGE_CACHE_DIR", REPO_ROOT / ".cache")) / "stitch"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "stitch"
CORPUS = Path(os.environ.get("HLOBRIDGE_CORPUS", REPO_ROOT.parent / "shared" / "corpus"))

WORKERS = {
    # jax gets 4 host devices so the Shardy segments can be lowered (and
    # their references run) next to the single-device ones.
    "jax": {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
    "torch": {"PJRT_DEVICE": "CPU", "JAX_PLATFORMS": "cpu"},
}

# ------------------------------------------------------------ live: jax --


def jax_defs():
    """name -> (fn, [(arg name, shape, dtype)], jit kwargs).  Imported in the
    jax worker and in the sharded reference, so both lower the same thing."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    f32, bf16, i32 = jnp.float32, jnp.bfloat16, jnp.int32
    defs = {}

    def define(name, args, **jit_kw):
        def deco(fn):
            defs[name] = (fn, args, jit_kw)
            return fn
        return deco

    # A nested jit becomes a private function called with func.call; jnp.where
    # adds another (@_where).
    @jax.jit
    def gelu_bias(h, b):
        return jax.nn.gelu(h + b)

    @define("jax_gelu_block", [("h", (4, 32), f32), ("b", (32,), f32)])
    def gelu_block(h, b):
        return gelu_bias(h, b) * 2.0 + jnp.where(h > 0, h, 0.1 * h)

    @define("jax_branch_a", [("h", (4, 32), f32)])
    def branch_a(h):
        return jnp.sin(h) * 2.0, jnp.sum(h * h, axis=1)

    @define("jax_branch_b", [("h", (4, 32), f32)])
    def branch_b(h):
        return jnp.exp(-h * h) + jnp.cos(h)

    @define("jax_scan_rnn", [("w", (32, 32), f32), ("xs", (6, 4, 32), f32), ("h0", (4, 32), f32)])
    def scan_rnn(w, xs, h0):
        def cell(h, x):
            h = jnp.tanh(h @ w * 0.2 + x)
            return h, jnp.sum(h, axis=1)
        return lax.scan(cell, h0, xs)

    @define("jax_fori_cond", [("x", (4, 32), f32), ("n", (), i32), ("p", (), jnp.bool_), ("k", (), i32)])
    def fori_cond(x, n, p, k):
        y = lax.fori_loop(0, n, lambda i, c: c * 0.5 + jnp.sin(c + i.astype(f32)), x)
        a = lax.cond(p, lambda v: jnp.sin(v), lambda v: jnp.cos(v) * 2.0, y)
        b = lax.switch(k, [lambda v: v + 1.0, lambda v: v * v, lambda v: -v, lambda v: jnp.exp(-v * v)], a)
        return a, b

    @define("jax_bf16_mlp", [("x", (4, 32), bf16), ("w", (32, 32), bf16)])
    def bf16_mlp(x, w):
        h = jax.nn.gelu(x @ w)
        return h * x, jnp.sum(h.astype(f32), axis=1)

    @define("jax_int_ops", [("a", (64,), i32), ("b", (64,), i32)])
    def int_ops(a, b):
        c = (a * b) ^ (a >> 1) + (b & 7)
        return c, a < b, jnp.where(a > b, a - b, b - a), lax.population_count(a)

    def ew_square(a):
        return gelu_bias(a, a[0]) - a.T

    for n in (3, 4):
        define(f"jax_ew_{n}x{n}", [("a", (n, n), f32)])(ew_square)

    @define("jax_layer_norm_head", [("x", (2, 10, 32), f32), ("g", (32,), f32)])
    def layer_norm_head(x, g):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        y = (x - m) * lax.rsqrt(v + 1e-5) * g
        return jax.nn.softmax(y, axis=-1)

    @define("jax_softmax_8x4", [("z", (8, 4), f32)])
    def softmax_8x4(z):
        return jax.nn.log_softmax(z, axis=-1), jnp.argmax(z, axis=-1).astype(i32)

    if len(jax.devices()) >= 4:
        mesh = Mesh(np.array(jax.devices()[:4]), ("x",))

        def ns(*spec):
            return NamedSharding(mesh, P(*spec))

        @define("jax_sharded_mlp", [("h", (8, 32), f32), ("w", (32, 32), f32)],
                in_shardings=(ns("x", None), ns(None, "x")), out_shardings=(ns("x", None), ns()))
        def sharded_mlp(h, w):
            z = jnp.tanh(h @ w)
            z = lax.with_sharding_constraint(z, ns("x", None))
            colsum = jax.shard_map(lambda a: lax.psum(jnp.sum(a, axis=0, keepdims=True), "x"),
                                   mesh=mesh, in_specs=P("x", None), out_specs=P())(z)
            return z - colsum / 8.0, gelu_bias(z, colsum[0])

        @define("jax_sharded_ew", [("a", (8, 32), f32), ("b", (8, 32), f32)],
                in_shardings=(ns("x", None), ns("x", None)), out_shardings=ns("x", None))
        def sharded_ew(a, b):
            return jnp.tanh(a * b + 1.0)

        # The same kind of program for GSPMD (mhlo.sharding, custom_call
        # @Sharding); lowered with jax_use_shardy_partitioner off.
        @define("jax_gspmd_mlp", [("h", (8, 32), f32), ("w", (32, 32), f32)],
                in_shardings=(ns("x", None), ns(None, "x")), out_shardings=(ns("x", None), ns()), _gspmd=True)
        def gspmd_mlp(h, w):
            z = lax.with_sharding_constraint(jnp.tanh(h @ w), ns("x", None))
            return z * 0.5, jnp.sum(z, axis=0)

    return defs


def sharded_names() -> set[str]:
    return {"jax_sharded_mlp", "jax_sharded_ew", "jax_gspmd_mlp"}


def _jit_kwargs(jit_kw: dict) -> dict:
    """jit keyword arguments, with the partitioner switched as the definition asks."""
    import jax

    kw = dict(jit_kw)
    jax.config.update("jax_use_shardy_partitioner", not kw.pop("_gspmd", False))
    return kw


def _jax_lower(defs, name):
    import jax

    fn, args, jit_kw = defs[name]
    specs = [jax.ShapeDtypeStruct(shape, dtype) for _, shape, dtype in args]
    return jax.jit(fn, **_jit_kwargs(jit_kw)).lower(*specs).as_text()


def worker_jax(out_dir: Path) -> dict:
    defs = jax_defs()
    meta = {}
    for name in defs:
        text = _jax_lower(defs, name)
        (out_dir / f"{name}.mlir").write_text(text)
        meta[name] = {"file": f"{name}.mlir", "args": [a for a, _, _ in defs[name][1]], "producer": "jax"}
    return meta


def sharded_reference(name: str, module: Path, inputs: list[Path], out_dir: Path) -> None:
    """Run a sharded segment's reference in jax (4 host devices): lower the
    same function again, insist the text is the stored segment, run it."""
    import jax
    import ml_dtypes  # noqa: F401  (bf16 .npy files)
    import numpy as np

    defs = jax_defs()
    text = _jax_lower(defs, name)
    if text != module.read_text():
        raise SystemExit(f"{name}: re-lowered text differs from {module}; regenerate the live modules")
    fn, args, jit_kw = defs[name]
    jit_kw = _jit_kwargs(jit_kw)
    vals = []
    for p, (_, shape, dtype) in zip(inputs, args):
        a = np.load(p)
        want = np.dtype(dtype)
        if a.dtype != want:
            a = a.view(want) if a.dtype.kind == "V" else a.astype(want)
        assert a.shape == tuple(shape), (p, a.shape, shape)
        vals.append(a)
    in_sh = jit_kw.get("in_shardings")
    if in_sh is not None:
        vals = [jax.device_put(v, s) for v, s in zip(vals, in_sh)]
    outs = jax.jit(fn, **jit_kw)(*vals)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    out_dir.mkdir(parents=True, exist_ok=True)
    for i, o in enumerate(jax.tree.leaves(outs)):
        np.save(out_dir / f"{i}.npy", np.asarray(o))


# ---------------------------------------------------------- live: torch --

# Shapes (and dtypes) of the generic elementwise torch segments that sit
# before / after corpus modules.
TORCH_EW_SHAPES = {
    "8x128": ((8, 128), "float32"),
    "32": ((32,), "float32"),
    "16x16": ((16, 16), "float32"),
    "32x16": ((32, 16), "float32"),
    "16x64": ((16, 64), "float32"),
    "8xf64": ((8,), "float64"),
    "32x784": ((32, 784), "float32"),
    "8x32": ((8, 32), "float32"),
    "8x16": ((8, 16), "float32"),
    "3x3": ((3, 3), "float32"),
    "256x256": ((256, 256), "float32"),
    "2x10x32": ((2, 10, 32), "float32"),
    "32x32": ((32, 32), "float32"),
    "32x64": ((32, 64), "float32"),
    "8": ((8,), "float32"),
    "128x128": ((128, 128), "float32"),
}
LAZY_EW_SHAPES = ("8x128", "32", "16x16", "8x32", "16x64", "8", "128x128", "32x64")


def _main_param_types(text: str) -> list[str]:
    m = re.search(r"func\.func (?:public )?@main\((.*?)\)\s*->", text, re.S)
    assert m, "no @main"
    return re.findall(r"%[\w.]+: (tensor<[^>]*>)", m.group(1))


def worker_torch(out_dir: Path) -> dict:
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    from torch_xla.stablehlo import exported_program_to_stablehlo

    torch.manual_seed(0)
    nn = torch.nn
    meta = {}

    def export(name, module, args, argnames):
        ep = torch.export.export(module.eval(), tuple(args))
        g = exported_program_to_stablehlo(ep)
        text = g.get_stablehlo_text()
        # The exported program's parameter order is its own: read it back.
        locs = g._bundle.stablehlo_funcs[0].meta.input_locations
        names = [argnames[loc.position] if loc.type_.value == "input_arg" else f"{loc.type_.value}:{loc.name}"
                 for loc in locs]
        (out_dir / f"{name}.mlir").write_text(text)
        meta[name] = {"file": f"{name}.mlir", "args": names, "producer": "torch"}

    dev = torch_xla.device()

    def lazy(name, fn, inputs: dict):
        on_dev = {k: v.to(dev) for k, v in inputs.items()}
        xm.mark_step()
        outs = fn(**on_dev)
        text = xm.get_stablehlo(list(outs))
        # Lazy traces order their parameters (device data, and scalar
        # constants lifted to parameters) their own way: name them by type.
        by_type = {}
        for k, v in inputs.items():
            t = _torch_type(v)
            assert t not in by_type, f"{name}: inputs {by_type[t]} and {k} share type {t}"
            by_type[t] = k
        names = []
        for i, t in enumerate(_main_param_types(text)):
            if t in by_type:
                names.append(by_type.pop(t))
            else:
                assert re.fullmatch(r"tensor<[a-z0-9]+>", t), f"{name}: unexpected parameter {t}"
                names.append(f"scalar{i}")
        (out_dir / f"{name}.mlir").write_text(text)
        meta[name] = {"file": f"{name}.mlir", "args": names, "producer": "torch"}

    class Pre(nn.Module):
        def forward(self, x, w):
            return torch.tanh(x @ w) * 0.5, torch.relu(x).sum(-1)

    export("torch_export_pre", Pre(), [torch.randn(4, 16), torch.randn(16, 32)], ["x", "w"])
    export("torch_export_linear_gelu", nn.Sequential(nn.Linear(16, 32), nn.GELU()), [torch.randn(4, 16)], ["x"])

    class Combine(nn.Module):
        def forward(self, u, v, s):
            return u * v + s[:, None], (u - v).abs().amax()

    export("torch_export_combine", Combine(), [torch.randn(4, 32), torch.randn(4, 32), torch.randn(4)],
           ["u", "v", "s"])

    class Bf16(nn.Module):
        def forward(self, x, y):
            return x * y + x, (x.float() * 2.0).sum(-1)

    xb = torch.randn(4, 32).to(torch.bfloat16)
    export("torch_export_bf16", Bf16(), [xb, xb.clone()], ["x", "y"])

    class IntOps(nn.Module):
        def forward(self, i, m):
            return (i * 3 + 1) % 7, torch.where(m, i, -i), i > 2

    ii = torch.randint(-50, 50, (64,), dtype=torch.int32)
    export("torch_export_int", IntOps(), [ii, ii > 0], ["i", "m"])

    class Ew(nn.Module):
        def forward(self, x):
            return torch.sin(x) * 1.5 + x * x * 0.25

    for key, (shape, dtype) in TORCH_EW_SHAPES.items():
        export(f"torch_export_ew_{key}", Ew(), [torch.randn(*shape, dtype=getattr(torch, dtype))], ["x"])

    def post(a, c):
        return [torch.sigmoid(a) * c + 2.0]

    lazy("torch_lazy_post", post, {"a": torch.randn(4, 32), "c": torch.randn(32)})

    def lazy_ew(a):
        return [torch.tanh(a) * a + 1.0, a.sum()]

    for key in LAZY_EW_SHAPES:
        shape, dtype = TORCH_EW_SHAPES[key]
        lazy(f"torch_lazy_ew_{key}", lazy_ew, {"a": torch.randn(*shape, dtype=getattr(torch, dtype))})

    return meta


def _torch_type(t) -> str:
    import torch

    el = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16",
          torch.int32: "i32", torch.int64: "i64", torch.bool: "i1"}[t.dtype]
    return "tensor<" + "".join(f"{d}x" for d in t.shape) + el + ">"


WORKER_FNS = {"jax": worker_jax, "torch": worker_torch}

# ------------------------------------------------------- live: the cache --


def live_key() -> str:
    h = hashlib.sha256(HERE.read_bytes())
    h.update(json.dumps(framework_versions(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def ensure_live(force: bool = False) -> tuple[Path, dict]:
    """Generate (or reuse) the live modules; returns (dir, name -> meta)."""
    key = live_key()
    out_dir = CACHE_ROOT / "live" / key
    man_path = out_dir / "manifest.json"
    if not force and man_path.exists():
        man = json.loads(man_path.read_text())
        if all((out_dir / m["file"]).exists() for m in man["modules"].values()):
            return out_dir, man["modules"]
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    procs = {}
    for name, extra in WORKERS.items():
        env = dict(os.environ)
        env.pop("XLA_FLAGS", None)
        env.update(extra)
        env["PYTHONWARNINGS"] = "ignore"  # third-party noise in the generators is not ours
        report = out_dir / f".{name}.json"
        report.unlink(missing_ok=True)
        procs[name] = (subprocess.Popen(
            [sys.executable, str(HERE), "--worker", name, "--out", str(out_dir), "--report", str(report)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), report)
    modules, errors = {}, []
    for name, (p, report) in procs.items():
        log, _ = p.communicate(timeout=600)
        if p.returncode != 0 or not report.exists():
            errors.append(f"worker {name} exited {p.returncode}:\n{log[-4000:]}")
            continue
        modules.update(json.loads(report.read_text()))
        report.unlink()
    if errors:
        raise RuntimeError("\n".join(errors))
    man = {"key": key, "versions": framework_versions(), "seconds": round(time.time() - t0, 2), "modules": modules}
    tmp = out_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(man, indent=1))
    os.replace(tmp, man_path)
    return out_dir, modules


# ----------------------------------------------------------------- plans --


@dataclass
class In:
    """A program input: handle name, MLIR type, how to draw it, donation."""
    name: str
    type: str
    gen: tuple = ()
    donate: bool = False


@dataclass
class Seg:
    """A segment.  ``module`` is ``live:NAME``, ``corpus:REL/PATH.mlir`` or
    ``fixture:FILE.mlir``.  ``inputs`` is a list (by parameter position) or,
    for live modules, a dict parameter name -> handle."""
    name: str
    module: str
    inputs: list | dict
    outputs: list
    producer: str = ""          # expected producer label in the receipt
    write_producer: bool = False  # write it into the plan (else the stitcher guesses)
    casts: tuple = ()


@dataclass
class Tol:
    rtol: float
    atol: float
    why: str


@dataclass
class PlanSpec:
    name: str
    covers: str
    inputs: list
    segments: list
    outputs: list
    devices: int = 1
    tol: dict = field(default_factory=dict)  # output handle -> Tol


def _f32(shape):
    return f"tensor<{shape}xf32>"


def ew_seg(name, key, handle_in, handle_out, lazy=False):
    """A generic torch elementwise segment (export, or lazy trace)."""
    if lazy:
        return Seg(name, f"live:torch_lazy_ew_{key}", {"a": handle_in},
                   [handle_out, "_"], "torch")
    return Seg(name, f"live:torch_export_ew_{key}", {"x": handle_in}, [handle_out], "torch")


PLANS: list[PlanSpec] = [
    PlanSpec(
        "fixture_chain",
        "the fixture chain torch -> jax (func.call helper) -> torch; fan-out of x, which is also returned as is; "
        "an unused output; donated w",
        [In("x", "tensor<8x16xf32>"), In("w", "tensor<8x16xf32>", donate=True)],
        [Seg("torch_pre", "fixture:torch_pre.mlir", ["x", "w"], ["h", "unused_cos"], "torch", True),
         Seg("jax_act", "fixture:jax_mid.mlir", ["h"], ["a"], "jax", True),
         Seg("torch_post", "fixture:torch_post.mlir", ["a", "x"], ["y"], "torch")],
        ["y", "x"]),
    PlanSpec(
        "live_torch_jax_torch",
        "live chain: torch_xla export -> jax (nested jit + jnp.where: func.call) -> torch_xla lazy trace",
        [In("x", "tensor<4x16xf32>"), In("w", "tensor<16x32xf32>"), In("b", "tensor<32xf32>"),
         In("c", "tensor<32xf32>")],
        [Seg("t_pre", "live:torch_export_pre", {"x": "x", "w": "w"}, ["h", "s"], "torch"),
         Seg("j_mid", "live:jax_gelu_block", {"h": "h", "b": "b"}, ["g"], "jax"),
         Seg("t_post", "live:torch_lazy_post", {"a": "g", "c": "c"}, ["y"], "torch")],
        ["y", "s"]),
    PlanSpec(
        "fan_out_fan_in",
        "h fans out to two jax segments, is bound twice by one torch segment and is a program output; "
        "a torch segment fans three handles in",
        [In("x", "tensor<4x16xf32>"), In("w", "tensor<16x32xf32>")],
        [Seg("combine", "live:torch_export_combine", {"u": "p", "v": "r", "s": "q"}, ["y", "gap"], "torch"),
         Seg("t_pre", "live:torch_export_pre", {"x": "x", "w": "w"}, ["h", "_"], "torch"),
         Seg("j_a", "live:jax_branch_a", {"h": "h"}, ["p", "q"], "jax"),
         Seg("j_b", "live:jax_branch_b", {"h": "h"}, ["r"], "jax"),
         Seg("square", "live:torch_export_combine", {"u": "h", "v": "h", "s": "q"}, ["y2", "_"], "torch")],
        ["y", "gap", "h", "y2"]),
    PlanSpec(
        "reused_module",
        "the same jax module file in two segments (emitted once, called twice even when inlining), fan-out of b",
        [In("x", "tensor<4x16xf32>"), In("b", "tensor<32xf32>"), In("c", "tensor<32xf32>")],
        [Seg("lin", "live:torch_export_linear_gelu", {"x": "x"}, ["h0"], "torch"),
         Seg("blk1", "live:jax_gelu_block", {"h": "h0", "b": "b"}, ["h1"], "jax"),
         Seg("blk2", "live:jax_gelu_block", {"h": "h1", "b": "b"}, ["h2"], "jax"),
         Seg("post", "live:torch_lazy_post", {"a": "h2", "c": "c"}, ["y"], "torch")],
        ["y", "h1"]),
    PlanSpec(
        "dropped_outputs",
        "corpus jax/elementwise.mlir (5 results, 3 dropped with '_', an i1 result kept) between torch segments",
        [In("a", "tensor<8x128xf32>"), In("b", "tensor<8x128xf32>", ("uniform", 0.5, 2.0))],
        [ew_seg("t_pre", "8x128", "a", "a1"),
         Seg("ew", "corpus:jax/elementwise.mlir", ["a1", "b"], ["e0", "mask", "_", "_", "_"], "jax"),
         ew_seg("t_post", "8x128", "e0", "y", lazy=True)],
        ["y", "mask"]),
    PlanSpec(
        "bf16_chain",
        "bf16 torch export -> bf16 jax (gelu matmul) with an f32 program input converted through 'casts'",
        [In("x", "tensor<4x32xf32>"), In("y", "tensor<4x32xbf16>"), In("w", "tensor<32x32xbf16>", ("normal", 0.2))],
        [Seg("t_bf16", "live:torch_export_bf16", {"x": "x", "y": "y"}, ["p", "ps"], "torch", casts=("x",)),
         Seg("j_bf16", "live:jax_bf16_mlp", {"x": "p", "w": "w"}, ["z", "zs"], "jax")],
        ["z", "zs", "ps"]),
    PlanSpec(
        "int_bool",
        "integer and boolean handles: jax i32 bit ops -> torch export int ops; exact comparison",
        [In("a", "tensor<64xi32>", ("int", -1000, 1000)), In("b", "tensor<64xi32>", ("int", -1000, 1000))],
        [Seg("j_int", "live:jax_int_ops", {"a": "a", "b": "b"}, ["c", "lt", "d", "pop"], "jax"),
         Seg("t_int", "live:torch_export_int", {"i": "c", "m": "lt"}, ["r", "sel", "gt"], "torch")],
        ["r", "sel", "gt", "d", "pop"]),
    PlanSpec(
        "corpus_while_calls",
        "corpus jax/while_loop.mlir (two stablehlo.while, func.call inside the loop body) between torch segments",
        [In("x", "tensor<32xf32>"), In("n", "tensor<i32>", ("int", 0, 12))],
        [ew_seg("t_pre", "32", "x", "x1"),
         Seg("loop", "corpus:jax/while_loop.mlir", ["x1", "n"], ["cnt", "l1", "l2"], "jax", True),
         ew_seg("t_post", "32", "l2", "y", lazy=True)],
        ["y", "cnt", "l1"]),
    PlanSpec(
        "live_scan",
        "live jax lax.scan (stablehlo.while) fed by a torch export, result into a lazy trace",
        [In("x", "tensor<4x16xf32>"), In("w", "tensor<16x32xf32>"), In("wr", "tensor<32x32xf32>"),
         In("xs", "tensor<6x4x32xf32>"), In("c", "tensor<32xf32>")],
        [Seg("t_pre", "live:torch_export_pre", {"x": "x", "w": "w"}, ["h", "_"], "torch"),
         Seg("scan", "live:jax_scan_rnn", {"w": "wr", "xs": "xs", "h0": "h"}, ["hT", "ys"], "jax"),
         Seg("t_post", "live:torch_lazy_post", {"a": "hT", "c": "c"}, ["y"], "torch")],
        ["y", "ys"]),
    PlanSpec(
        "corpus_cond_switch",
        "corpus jax/cond_switch.mlir (stablehlo.case x2, func.call @_where) with i1 / i32 program inputs",
        [In("p", "tensor<i1>"), In("k", "tensor<i32>", ("int", -1, 5)), In("x", "tensor<16x16xf32>")],
        [ew_seg("t_pre", "16x16", "x", "x1"),
         Seg("cs", "corpus:jax/cond_switch.mlir", ["p", "k", "x1"], ["a", "b"], "jax"),
         ew_seg("t_post", "16x16", "b", "y", lazy=True)],
        ["y", "a"]),
    PlanSpec(
        "live_fori_cond",
        "live jax fori_loop with a dynamic trip count, lax.cond and lax.switch, after a torch linear layer",
        [In("x", "tensor<4x16xf32>"), In("n", "tensor<i32>", ("int", 0, 8)), In("p", "tensor<i1>"),
         In("k", "tensor<i32>", ("int", -1, 5))],
        [Seg("lin", "live:torch_export_linear_gelu", {"x": "x"}, ["h"], "torch"),
         Seg("ctl", "live:jax_fori_cond", {"x": "h", "n": "n", "p": "p", "k": "k"}, ["a", "b"], "jax")],
        ["a", "b"]),
    PlanSpec(
        "corpus_torch_while",
        "corpus torch_xla export with a while loop in a called function (tuples, s64 counter) -> live jax",
        [In("m", "tensor<3x3xf32>"), In("i", "tensor<i64>", ("int", -3, 5))],
        [Seg("tw", "corpus:torch/export_while_loop_hop_xla_pyimpl.mlir", ["m", "i"], ["cnt", "m1"], "torch"),
         Seg("j", "live:jax_ew_3x3", {"a": "m1"}, ["y"], "jax")],
        ["y", "cnt"]),
    PlanSpec(
        "corpus_torch_lazy_while",
        "corpus torch_xla lazy trace with a while loop (xla fori) -> live jax (func.call)",
        [In("a", "tensor<4x4xf32>"), In("b", "tensor<4x4xf32>"), In("i", "tensor<i64>", ("int", -3, 6))],
        [Seg("tw", "corpus:torch/lazy_while_loop_xla_b.mlir", ["a", "b", "i"], ["cnt", "m"], "torch"),
         Seg("j", "live:jax_ew_4x4", {"a": "m"}, ["y"], "jax")],
        ["y", "cnt"]),
    PlanSpec(
        "corpus_torch_transformer",
        "corpus torch export of nn.TransformerEncoderLayer (13 parameters) -> live jax layernorm + softmax",
        [In("x", "tensor<2x10x32xf32>"), In("g", "tensor<32xf32>")]
        + [In(f"p{i}", t, ("normal", 0.2)) for i, t in enumerate([
            "tensor<32xf32>", "tensor<32xf32>", "tensor<32x64xf32>", "tensor<64xf32>", "tensor<64x32xf32>",
            "tensor<32xf32>", "tensor<32xf32>", "tensor<32x32xf32>", "tensor<96xf32>", "tensor<96x32xf32>"])]
        + [In("p11", "tensor<32xf32>"), In("p12", "tensor<32xf32>")],
        [Seg("enc", "corpus:torch/export_transformer_encoder_layer_eval.mlir",
             [f"p{i}" for i in range(10)] + ["x", "p11", "p12"], ["h"], "torch"),
         Seg("head", "live:jax_layer_norm_head", {"x": "h", "g": "g"}, ["y"], "jax")],
        ["y", "h"]),
    PlanSpec(
        "corpus_torch_lazy_mlp",
        "corpus torch_xla lazy trace (MLP forward) after a torch export, into a live jax log_softmax / argmax",
        [In("x", "tensor<8x16xf32>"), In("b2", "tensor<4xf32>"), In("w2", "tensor<4x32xf32>", ("normal", 0.3)),
         In("b1", "tensor<32xf32>"), In("w1", "tensor<32x16xf32>", ("normal", 0.3))],
        [ew_seg("t_pre", "8x16", "x", "x1"),
         Seg("mlp", "corpus:torch/lazy_mlp2_forward.mlir", ["b2", "w2", "b1", "w1", "x1"], ["z"], "torch"),
         Seg("sm", "live:jax_softmax_8x4", {"z": "z"}, ["logp", "arg"], "jax")],
        ["logp", "arg"]),
    PlanSpec(
        "sharded_shardy",
        "torch export -> Shardy-sharded jax (num_partitions = 4; sdy.sharding on args, sharding_constraint, "
        "shard_map psum, func.call) -> Shardy elementwise -> torch lazy trace; run on 4 CPU devices",
        [In("x", "tensor<8x32xf32>"), In("w", "tensor<32x32xf32>", ("normal", 0.3))],
        [ew_seg("t_pre", "8x32", "x", "h"),
         ew_seg("t_pre_w", "32x32", "w", "w1"),
         Seg("shard_mlp", "live:jax_sharded_mlp", {"h": "h", "w": "w1"}, ["z", "g"], "jax"),
         Seg("shard_ew", "live:jax_sharded_ew", {"a": "z", "b": "g"}, ["e"], "jax"),
         ew_seg("t_post", "8x32", "e", "y", lazy=True)],
        ["y", "g"], devices=4,
        tol={
            # g = gelu(z + colsum) where colsum is a shard_map psum: a
            # cross-device all-reduce.  The reference runs this segment in
            # jaxlib's CPU client, the fused program in the PJRT plugin: two
            # XLA builds whose CPU all-reduce may add the four partial sums in
            # a different order.  |colsum| <= 8, whose ulp is 2**-20 ~ 9.5e-7;
            # measured differences reach 2 ulps (1.7e-6) on near-zero g,
            # so g gets atol 1e-5 (~10 ulps).  y, further downstream, stays
            # within the default bound.
            "g": Tol(1e-5, 1e-5, "cross-device all-reduce order differs between jaxlib and the plugin"),
        }),
    PlanSpec(
        "sharded_gspmd",
        "torch -> GSPMD-sharded jax (mhlo.sharding, custom_call @Sharding, cross-device sum) -> torch lazy trace; "
        "4 CPU devices",
        [In("x", "tensor<8x32xf32>"), In("w", "tensor<32x32xf32>", ("normal", 0.3))],
        [ew_seg("t_pre", "8x32", "x", "h"),
         ew_seg("t_pre_w", "32x32", "w", "w1"),
         Seg("gspmd", "live:jax_gspmd_mlp", {"h": "h", "w": "w1"}, ["z", "s"], "jax"),
         ew_seg("t_post", "8x32", "z", "y", lazy=True)],
        ["y", "s"], devices=4,
        tol={
            # s sums 8 rows split over 4 devices: an all-reduce whose order
            # may differ between jaxlib's CPU client (the reference) and the
            # plugin (see sharded_shardy); |s| <= 8, ulp 9.5e-7.
            "s": Tol(1e-5, 1e-5, "cross-device all-reduce order differs between jaxlib and the plugin"),
        }),
    PlanSpec(
        "corpus_mlp_grad",
        "corpus jax/mlp_grad.mlir (value_and_grad, 5 private functions, i32 labels) fed by torch; 4 grads dropped",
        [In("x", "tensor<32x784xf32>", ("normal", 0.5)), In("labels", "tensor<32xi32>", ("int", 0, 10))]
        + [In(f"p{i}", t, ("normal", 0.05)) for i, t in enumerate([
            "tensor<512xf32>", "tensor<784x512xf32>", "tensor<256xf32>", "tensor<512x256xf32>",
            "tensor<10xf32>", "tensor<256x10xf32>"])],
        [ew_seg("t_pre", "32x784", "x", "x1"),
         Seg("grad", "corpus:jax/mlp_grad.mlir", [f"p{i}" for i in range(6)] + ["x1", "labels"],
             ["loss", "_", "_", "_", "_", "gb3", "gw3"], "jax")],
        ["loss", "gb3", "gw3"]),
    PlanSpec(
        "corpus_gather_scatter",
        "corpus jax/gather_scatter.mlir (gather, scatter-add/-max, i32 indices) with torch producer and consumer",
        [In("x", "tensor<32x16xf32>"), In("idx", "tensor<8xi32>", ("int", 0, 32)), In("upd", "tensor<8x16xf32>"),
         In("table", "tensor<1000x64xf32>"), In("ids", "tensor<4x12xi32>", ("int", 0, 1000))],
        [ew_seg("t_pre", "32x16", "x", "x1"),
         Seg("gs", "corpus:jax/gather_scatter.mlir", ["x1", "idx", "upd", "table", "ids"],
             ["g0", "_", "emb", "s0", "s1", "_", "_"], "jax"),
         ew_seg("t_post", "32x16", "s1", "y")],
        ["y", "g0", "emb", "s0"]),
    PlanSpec(
        "corpus_sort_topk",
        "corpus jax/sort_topk.mlir (24 functions, sort/top_k/argsort, i32 outputs) after a torch segment",
        [In("x", "tensor<16x64xf32>"), In("k", "tensor<16x64xi32>", ("int", -100, 100))],
        [ew_seg("t_pre", "16x64", "x", "x1"),
         Seg("sort", "corpus:jax/sort_topk.mlir", ["x1", "k"], ["s", "si", "_", "_", "tv", "ti", "_", "_", "_"],
             "jax"),
         ew_seg("t_post", "16x64", "s", "y", lazy=True)],
        ["y", "si", "tv", "ti"]),
    PlanSpec(
        "pallas_interpret",
        "corpus Pallas interpret-mode kernels (grid loop over pl.program_id) between torch segments",
        [In("a", "tensor<256x256xf32>"), In("b", "tensor<256x256xf32>", ("normal", 0.1)),
         In("c", "tensor<8x128xf32>"), In("d", "tensor<8x128xf32>")],
        [ew_seg("t_pre", "256x256", "a", "a1"),
         Seg("mm", "corpus:pallas/pallas_matmul_grid_interpret_cpu.mlir", ["a1", "b"], ["ab"], "jax"),
         ew_seg("t_pre2", "8x128", "c", "c1"),
         Seg("add", "corpus:pallas/pallas_add_interpret_cpu.mlir", ["c1", "d"], ["cd"], "jax"),
         ew_seg("t_post", "8x128", "cd", "y", lazy=True)],
        ["ab", "y"]),
    PlanSpec(
        "x64_types",
        "corpus jax/types_f64_x64.mlir (f64, i64) after a torch f64 export",
        [In("x", "tensor<8xf64>"), In("n", "tensor<8xi64>", ("int", -10**12, 10**12))],
        [ew_seg("t_pre", "8xf64", "x", "x1"),
         Seg("x64", "corpus:jax/types_f64_x64.mlir", ["x1", "n"], ["f", "i", "f32"], "jax")],
        ["f", "i", "f32"]),
    PlanSpec(
        "donation",
        "corpus jax/donated_args.mlir (tf.aliasing_output) with plan-level donated inputs, then a lazy trace",
        [In("big", "tensor<128x128xf32>", donate=True), In("ids", "tensor<64xi32>", ("int", -50, 50), donate=True),
         In("v", "tensor<8xf32>")],
        [Seg("don", "corpus:jax/donated_args.mlir", ["big", "ids", "v"], ["o_big", "o_ids", "o_v"], "jax"),
         ew_seg("t_post", "128x128", "o_big", "y", lazy=True)],
        ["o_big", "o_ids", "o_v", "y"]),
    PlanSpec(
        "rng_uint",
        "corpus jax/rng_bit_generator.mlir (ui32 key, ui32 and f32 results) into a torch lazy trace",
        [In("key", "tensor<2xui32>")],
        [Seg("rng", "corpus:jax/rng_bit_generator.mlir", ["key"], ["bits", "bits2", "u"], "jax"),
         ew_seg("t_post", "8", "u", "y", lazy=True)],
        ["bits", "bits2", "u", "y"]),
    PlanSpec(
        "corpus_reductions",
        "corpus jax/reductions.mlir (15 functions, 17 results, 13 dropped, i32 and i1 results) after a torch segment",
        [In("x", "tensor<32x64xf32>"), In("n", "tensor<32x64xi32>", ("int", -100, 100))],
        [ew_seg("t_pre", "32x64", "x", "x1"),
         Seg("red", "corpus:jax/reductions.mlir", ["x1", "n"],
             ["colsum", "_", "total", "isum", "_", "_", "_", "_", "_", "anyb", "_", "_", "_", "_", "_", "_", "_"],
             "jax")],
        ["colsum", "total", "isum", "anyb"]),
]

# ------------------------------------------------------------------ main --


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--worker", choices=sorted(WORKER_FNS))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--sharded-ref", metavar="NAME")
    ap.add_argument("--module", type=Path)
    ap.add_argument("inputs", nargs="*", type=Path)
    a = ap.parse_args(argv)
    if a.worker:
        a.out.mkdir(parents=True, exist_ok=True)
        meta = WORKER_FNS[a.worker](a.out)
        a.report.write_text(json.dumps(meta))
        return 0
    if a.sharded_ref:
        sharded_reference(a.sharded_ref, a.module, a.inputs, a.out)
        return 0
    live_dir, live = ensure_live(force=a.force)
    print(f"{len(live)} live modules in {live_dir}")
    for p in PLANS:
        print(f"{p.name}: {p.covers}")
    print(f"{len(PLANS)} plans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
