#!/usr/bin/env python3
"""Generate fresh StableHLO modules from live JAX / torch_xla / Pallas programs.

    python tests/python/live_programs.py [--out DIR] [--force] [--seed N]

Writes ``<category>__<name>.mlir`` files plus ``manifest.json`` into
``.cache/live/`` (default).  Shapes and PRNG seeds are drawn fresh from a
random seed at each generation; the output is cached and regenerated only
when this script (or the jax/jaxlib/torch/torch_xla versions) change, or with
``--force`` / ``HLOBRIDGE_LIVE_FORCE=1``.

Each framework runs in its own subprocess (``--worker NAME``) so torch_xla's
PJRT setup and JAX's 4-fake-CPU-device sharding setup never meet; two
workers run at a time (2 cores).  A failing program is recorded in the
manifest (``error``) instead of aborting the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve()
REPO_ROOT = HERE.parents[2]
DEFAULT_OUT = Path(os.environ.get("HLOBRIDGE_CACHE_DIR", REPO_ROOT / ".cache")) / "live"

# Every module is tagged with one of these (test_live_programs checks coverage).
CATEGORIES = (
    "models",          # MLP / transformer / CNN forward
    "grads",           # grad / value_and_grad / custom_vjp / remat / train steps
    "control_flow",    # while / scan / fori / cond / switch
    "shardings",       # Shardy + GSPMD, shard_map collectives
    "types",           # bf16/f16/f8/int/complex/x64
    "misc",            # sort, gather/scatter, donation, rng, linalg, callbacks, debug info
    "pallas_interpret",
    "pallas_tpu",
    "pallas_triton",
    "pallas_mosaic_gpu",
    "torch_export",
    "torch_lazy",
)

WORKERS = {
    # name: extra environment
    "jax": {"JAX_PLATFORMS": "cpu"},
    "jax_sharded": {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
    "pallas": {"JAX_PLATFORMS": "cpu"},
    "torch": {"PJRT_DEVICE": "CPU", "JAX_PLATFORMS": "cpu"},
    "torch_debug": {"PJRT_DEVICE": "CPU", "XLA_HLO_DEBUG": "1", "JAX_PLATFORMS": "cpu"},
}


# ------------------------------------------------------------------ driver --


def framework_versions() -> dict:
    """Installed versions of the frameworks that produce the live modules
    (part of every cache key that depends on them)."""
    from importlib import metadata

    out = {}
    for dist in ("jax", "jaxlib", "torch", "torch-xla"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def cache_key() -> str:
    h = hashlib.sha256(HERE.read_bytes())
    h.update(json.dumps(framework_versions(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def load_manifest(out_dir: Path = DEFAULT_OUT) -> dict | None:
    try:
        return json.loads((Path(out_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def ensure_generated(out_dir: Path = DEFAULT_OUT, force: bool = False, seed: int | None = None,
                     verbose: bool = False) -> dict:
    """Generate (or reuse the cached) live modules; returns the manifest."""
    out_dir = Path(out_dir)
    force = force or os.environ.get("HLOBRIDGE_LIVE_FORCE") == "1"
    key = cache_key()
    man = load_manifest(out_dir)
    if (not force and man and man.get("key") == key
            and all((out_dir / e["file"]).exists() for e in man["programs"] if e.get("file"))):
        return man
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.mlir"):
        old.unlink()
    if seed is None:
        seed = int(os.environ.get("HLOBRIDGE_LIVE_SEED", random.SystemRandom().randrange(1 << 30)))
    t0 = time.time()
    results, errors = [], {}
    pending = list(WORKERS)
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    while pending or running:
        while pending and len(running) < 2:
            name = pending.pop(0)
            env = dict(os.environ)
            env.pop("XLA_FLAGS", None)
            env.update(WORKERS[name])
            env["PYTHONWARNINGS"] = "ignore"  # third-party noise in the generator is not ours
            report = out_dir / f".{name}.json"
            report.unlink(missing_ok=True)
            cmd = [sys.executable, str(HERE), "--worker", name, "--out", str(out_dir),
                   "--seed", str(seed), "--report", str(report)]
            # Output goes to a file: a pipe nobody reads until exit can fill
            # up and block the worker, and an unclosed pipe warns under -W error.
            log_path = out_dir / f".{name}.log"
            with open(log_path, "w") as log_file:
                proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True)
            running[name] = (proc, time.time())
        for name, (p, started) in list(running.items()):
            if p.poll() is None:
                if time.time() - started > 300:
                    p.kill()
                else:
                    continue
            p.wait()
            log_path = out_dir / f".{name}.log"
            log = log_path.read_text(errors="replace") if log_path.exists() else ""
            log_path.unlink(missing_ok=True)
            del running[name]
            report = out_dir / f".{name}.json"
            if report.exists():
                results += json.loads(report.read_text())
                report.unlink()
            if p.returncode != 0:
                errors[name] = f"worker exited {p.returncode}:\n{log[-4000:]}"
            if verbose:
                print(f"[{name}] rc={p.returncode} {time.time() - started:.1f}s", file=sys.stderr)
        time.sleep(0.05)
    man = {
        "key": key,
        "seed": seed,
        "versions": framework_versions(),
        "seconds": round(time.time() - t0, 2),
        "worker_errors": errors,
        "programs": sorted(results, key=lambda e: e["name"]),
    }
    tmp = out_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(man, indent=1))
    os.replace(tmp, out_dir / "manifest.json")
    return man


# ----------------------------------------------------------------- workers --


class Recorder:
    def __init__(self, out_dir: Path, worker: str, seed: int):
        self.out_dir = out_dir
        self.worker = worker
        self.rng = random.Random(f"{seed}-{worker}")
        self.seed = seed
        self.entries: list[dict] = []

    def pick(self, *choices):
        return self.rng.choice(choices)

    def emit(self, category: str, name: str, thunk, check=None):
        assert category in CATEGORIES, category
        t0 = time.time()
        entry = {"name": name, "category": category, "worker": self.worker}
        try:
            text = thunk()
            if isinstance(text, bytes):
                text = text.decode()
            if check is not None:
                msg = check(text)
                if msg:
                    raise AssertionError(msg)
            fname = f"{category}__{name}.mlir"
            (self.out_dir / fname).write_text(text)
            entry.update(file=fname, bytes=len(text.encode()))
        except Exception as e:  # noqa: BLE001 -- recorded, reported by the tests
            entry["error"] = f"{type(e).__name__}: {e}"[:3000]
            entry["traceback"] = traceback.format_exc()[-3000:]
        entry["seconds"] = round(time.time() - t0, 3)
        self.entries.append(entry)
        print(f"{'OK ' if 'file' in entry else 'ERR'} {name} {entry['seconds']}s", flush=True)


def _contains(*needles):
    def check(text):
        missing = [n for n in needles if n not in text]
        return f"expected {missing} in the module" if missing else None
    return check


def worker_jax(R: Recorder):
    import jax
    import jax.numpy as jnp
    from jax import lax

    key = jax.random.key(R.rng.randrange(1 << 30))
    f32 = jnp.float32
    S = jax.ShapeDtypeStruct

    def lower_text(f, *args, debug_info=False, **jit_kw):
        return jax.jit(f, **jit_kw).lower(*args).as_text(debug_info=debug_info)

    # ---- models
    B = R.pick(2, 3, 4, 8, 16)
    D_in, H, D_out = R.pick(8, 12, 16, 32), R.pick(16, 24, 64), R.pick(2, 4, 10)
    k1, k2, k3, k4, key = jax.random.split(key, 5)
    mlp_params = {
        "w1": jax.random.normal(k1, (D_in, H)), "b1": jnp.zeros((H,)),
        "w2": jax.random.normal(k2, (H, D_out)), "b2": jnp.zeros((D_out,)),
    }

    def mlp(p, x):
        h = jax.nn.gelu(x @ p["w1"] + p["b1"])
        return h @ p["w2"] + p["b2"]

    x = jax.random.normal(k3, (B, D_in))
    y = jax.random.randint(k4, (B,), 0, D_out)
    R.emit("models", "jax_mlp_forward", lambda: lower_text(mlp, mlp_params, x))

    def loss_fn(p, x, y):
        logits = mlp(p, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    R.emit("grads", "jax_mlp_value_and_grad",
           lambda: lower_text(jax.value_and_grad(loss_fn), mlp_params, x, y))
    R.emit("grads", "jax_mlp_grad_generic",
           lambda: jax.jit(jax.grad(loss_fn)).lower(mlp_params, x, y).compiler_ir("stablehlo")
           .operation.get_asm(print_generic_op_form=True, large_elements_limit=None))

    # transformer block
    T, Dm, nh = R.pick(8, 16, 32), R.pick(32, 64), R.pick(2, 4)
    dh = Dm // nh

    def init_block(k):
        ks = jax.random.split(k, 6)
        sc = Dm ** -0.5
        return {
            "ln1": jnp.ones((Dm,)), "ln2": jnp.ones((Dm,)),
            "wq": jax.random.normal(ks[0], (Dm, Dm)) * sc, "wk": jax.random.normal(ks[1], (Dm, Dm)) * sc,
            "wv": jax.random.normal(ks[2], (Dm, Dm)) * sc, "wo": jax.random.normal(ks[3], (Dm, Dm)) * sc,
            "w1": jax.random.normal(ks[4], (Dm, 4 * Dm)) * sc, "w2": jax.random.normal(ks[5], (4 * Dm, Dm)) * sc,
        }

    def layernorm(x, g):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * lax.rsqrt(v + 1e-5) * g

    def block(p, x):
        h = layernorm(x, p["ln1"])
        q, k, v = (h @ p[n] for n in ("wq", "wk", "wv"))
        split = lambda t: t.reshape(t.shape[0], T, nh, dh).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        att = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(dh)
        mask = jnp.tril(jnp.ones((T, T), bool))
        att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1)
        o = jnp.einsum("bhqk,bhkd->bhqd", att, v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + o @ p["wo"]
        return x + jax.nn.relu(layernorm(x, p["ln2"]) @ p["w1"]) @ p["w2"]

    kb, kx, key = jax.random.split(key, 3)
    bp = init_block(kb)
    xt = jax.random.normal(kx, (2, T, Dm))
    R.emit("models", "jax_transformer_block", lambda: lower_text(block, bp, xt))
    R.emit("models", "jax_transformer_block_bf16", lambda: lower_text(
        block, jax.tree.map(lambda a: a.astype(jnp.bfloat16), bp), xt.astype(jnp.bfloat16)))

    def train_step(params, opt, x, lr):
        def loss(ps):
            h = x
            for p in ps:
                h = block(p, h)
            return jnp.mean(h ** 2)
        l, g = jax.value_and_grad(loss)(params)
        m, v, t = opt
        t = t + 1
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        params = jax.tree.map(lambda p, m, v: p - lr * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8),
                              params, m, v)
        return params, (m, v, t), l

    ps2 = [init_block(k) for k in jax.random.split(key, 2)]
    zeros = jax.tree.map(jnp.zeros_like, ps2)
    R.emit("grads", "jax_transformer2_adam_train_step", lambda: lower_text(
        train_step, ps2, (zeros, zeros, jnp.zeros((), jnp.int32)), xt, 1e-3, donate_argnums=(0, 1)),
        check=_contains("tf.aliasing_output"))

    # CNN
    C, Hh = R.pick(1, 3), R.pick(8, 12, 16)

    def cnn(w1, w2, x):
        y = lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        y = jax.nn.relu(y)
        y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        y = lax.conv_general_dilated(y, w2, (2, 2), [(1, 1), (1, 1)], rhs_dilation=(1, 1),
                                     feature_group_count=2, dimension_numbers=("NCHW", "OIHW", "NCHW"))
        y = lax.conv_transpose(y, jnp.ones((3, 3, 4, 4)), (2, 2), "SAME", dimension_numbers=("NCHW", "HWIO", "NCHW"))
        return y.mean(axis=(2, 3))

    R.emit("models", "jax_cnn_conv_pool", lambda: lower_text(
        cnn, S((8, C, 3, 3), f32), S((4, 4, 3, 3), f32), S((2, C, Hh, Hh), f32)))

    # ---- control flow
    n_steps = R.pick(5, 7, 10, 13)

    def rnn(w, xs, h0):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h.sum()
        return lax.scan(cell, h0, xs)

    Dr = R.pick(4, 8, 16)
    R.emit("control_flow", "jax_scan_rnn",
           lambda: lower_text(rnn, S((Dr, Dr), f32), S((n_steps, 3, Dr), f32), S((3, Dr), f32)),
           check=_contains("stablehlo.while"))

    def newton_sqrt(a):
        def cond(s):
            x, i = s
            return (jnp.abs(x * x - a).max() > 1e-6) & (i < 100)
        def body(s):
            x, i = s
            return (0.5 * (x + a / x), i + 1)
        return lax.while_loop(cond, body, (a, 0))

    R.emit("control_flow", "jax_while_loop", lambda: lower_text(newton_sqrt, S((R.pick(3, 5, 9),), f32)))

    def fori(x, n):
        static = lax.fori_loop(0, n_steps, lambda i, c: c * 0.5 + jnp.sin(c + i), x)
        dynamic = lax.fori_loop(0, n, lambda i, c: c + i.astype(c.dtype), x)
        return static + dynamic

    R.emit("control_flow", "jax_fori_loop", lambda: lower_text(fori, S((4,), f32), S((), jnp.int32)))

    def branches(i, p, x):
        a = lax.cond(p, lambda v: jnp.sin(v), lambda v: jnp.cos(v) * 2, x)
        b = lax.switch(i, [lambda v: v + 1, lambda v: v * v, lambda v: -v, lambda v: jnp.exp(v)], a)
        return a, b

    R.emit("control_flow", "jax_cond_switch",
           lambda: lower_text(branches, S((), jnp.int32), S((), jnp.bool_), S((R.pick(3, 6),), f32)),
           check=_contains("stablehlo.case"))

    # ---- misc
    N = R.pick(16, 33, 64)

    def sorts(x, k):
        vals, idx = lax.top_k(x, 5)
        s = jnp.sort(x, axis=-1, stable=True)
        order = jnp.argsort(-x[0])
        ks, vs = lax.sort((k, x[0]), num_keys=1)
        return vals, idx, s, order, ks, vs

    R.emit("misc", "jax_sort_topk", lambda: lower_text(sorts, S((3, N), f32), S((N,), jnp.int32)))

    def gs(x, idx, upd):
        g = x[idx]
        g2 = jnp.take(x, idx[:2], axis=1)
        s = x.at[idx].add(upd)
        s = s.at[idx, 0].max(upd[:, 0])
        seg = jax.ops.segment_sum(upd[:, 0], idx % 3, num_segments=3)
        return g, g2, s, seg

    R.emit("misc", "jax_gather_scatter", lambda: lower_text(
        gs, S((N, 6), f32), S((5,), jnp.int32), S((5, 6), f32)), check=_contains("stablehlo.scatter"))

    @jax.custom_vjp
    def clip_grad(x):
        return x

    def clip_fwd(x):
        return x, None

    def clip_bwd(_, g):
        return (jnp.clip(g, -1, 1),)

    clip_grad.defvjp(clip_fwd, clip_bwd)

    @jax.custom_jvp
    def softplus(x):
        return jnp.log1p(jnp.exp(x))

    softplus.defjvps(lambda t, ans, x: t * jax.nn.sigmoid(x))
    R.emit("grads", "jax_custom_vjp_jvp", lambda: lower_text(
        jax.grad(lambda x: jnp.sum(softplus(clip_grad(x) * 3.0))), S((R.pick(4, 7),), f32)))

    R.emit("grads", "jax_remat_checkpoint", lambda: lower_text(
        jax.grad(lambda w, x: jnp.sum(jax.checkpoint(lambda w, x: jnp.tanh(jnp.tanh(x @ w) @ w))(w, x))),
        S((8, 8), f32), S((4, 8), f32)))

    def donate(a, b, c):
        return a + 1, b * 2, c.sum()

    R.emit("misc", "jax_donate_argnums", lambda: lower_text(
        donate, S((R.pick(4, 8), 3), f32), S((5,), f32), S((2, 2), f32), donate_argnums=(0, 1)),
        check=_contains("tf.aliasing_output"))

    def named(x, w):
        with jax.named_scope("encoder"):
            h = jnp.tanh(x @ w)
        with jax.named_scope("head"):
            return jax.nn.softmax(h).sum(0)

    R.emit("misc", "jax_debug_info_locations",
           lambda: lower_text(named, S((4, 8), f32), S((8, 8), f32), debug_info=True),
           check=_contains("loc(", "#loc"))
    R.emit("grads", "jax_mlp_grad_debug_info",
           lambda: lower_text(jax.grad(loss_fn), mlp_params, x, y, debug_info=True),
           check=_contains("#loc"))

    def rng(k, x):
        a = jax.random.normal(k, x.shape)
        b = jax.random.bernoulli(jax.random.fold_in(k, 3), 0.3, x.shape)
        c = jax.random.categorical(k, x)
        return a, b, c

    R.emit("misc", "jax_rng_threefry", lambda: lower_text(rng, jax.random.key(1), S((4, R.pick(5, 9)), f32)))
    R.emit("misc", "jax_rng_bit_generator", lambda: lower_text(
        lambda k, x: jax.random.uniform(k, x.shape), jax.random.key(2, impl="rbg"), S((3, 7), f32)),
        check=_contains("rng_bit_generator"))

    def linalg(a):
        spd = a @ a.T + 4 * jnp.eye(a.shape[0])
        return jnp.linalg.cholesky(spd), jnp.linalg.qr(a), jnp.linalg.eigh(spd), jnp.linalg.solve(spd, a)

    R.emit("misc", "jax_linalg_lapack", lambda: lower_text(linalg, S((R.pick(4, 6),) * 2, f32)),
           check=_contains("custom_call"))

    def callbacks(x):
        jax.debug.print("x = {}", x)
        y = jax.pure_callback(lambda v: v * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y + 1

    R.emit("misc", "jax_callbacks", lambda: lower_text(callbacks, S((3,), f32)))

    def dyn(x, i, u):
        s = lax.dynamic_slice(x, (i, 0), (2, x.shape[1]))
        return lax.dynamic_update_slice(x, u, (i, i)), s, jnp.pad(x, ((1, 2), (0, 3)), mode="reflect")

    R.emit("misc", "jax_dynamic_slice_pad", lambda: lower_text(
        dyn, S((8, 6), f32), S((), jnp.int32), S((2, 2), f32)))

    R.emit("misc", "jax_vmap_batched_matmul", lambda: lower_text(
        jax.vmap(jax.vmap(lambda a, b: jnp.dot(a, b), (0, None)), (None, 0)),
        S((3, 4, 5), f32), S((2, 5, 6), f32)))

    # ---- types
    def lowp(a, b, c, d, e):
        r1 = (a.astype(jnp.float32) * b.astype(jnp.float32)).astype(jnp.bfloat16)
        r2 = jnp.dot(a, a.T, preferred_element_type=jnp.float32)
        r3 = c.astype(jnp.float8_e4m3fn).astype(jnp.float16) + c
        r4 = (d >> 2) ^ (d & 7), jnp.clip(e, 0, 100).astype(jnp.int8), d.astype(jnp.uint32)
        r5 = jnp.logical_and(d > 0, e < 3), lax.population_count(d), lax.clz(e)
        return r1, r2, r3, r4, r5

    n = R.pick(4, 8, 12)
    R.emit("types", "jax_low_precision_int", lambda: lower_text(
        lowp, S((n, 4), jnp.bfloat16), S((n, 4), jnp.float16), S((n,), jnp.float16),
        S((n,), jnp.int32), S((n,), jnp.uint8)), check=_contains("bf16", "f16", "f8E4M3FN", "ui8", "ui32"))

    def cplx(x, z):
        f = jnp.fft.fft(x.astype(jnp.complex64))
        r = jnp.fft.irfft(jnp.fft.rfft(x), n=x.shape[-1])
        f2 = jnp.fft.fft2(z)
        return f, r, jnp.abs(f2), jnp.angle(z), z * jnp.conj(z), lax.complex(x, x)

    R.emit("types", "jax_complex_fft", lambda: lower_text(
        cplx, S((R.pick(8, 16),), f32), S((4, 4), jnp.complex64)), check=_contains("complex<f32>", "stablehlo.fft"))

    def x64(a, b):
        return (a * 2.5).astype(jnp.float64) + b, jnp.arange(5, dtype=jnp.int64), jnp.sum(b).astype(jnp.complex128)

    def x64_text():
        with jax.enable_x64(True):
            return lower_text(x64, S((3,), jnp.float64), S((3,), jnp.float64))

    R.emit("types", "jax_x64_f64_i64_c128", x64_text, check=_contains("f64", "i64", "complex<f64>"))

    # ---- shape polymorphism via jax.export
    def poly_text():
        from jax import export
        b, = export.symbolic_shape("b")
        exp = export.export(jax.jit(lambda x, w: jax.nn.relu(x @ w).sum(-1)))(
            S((b, 8), f32), S((8, R.pick(3, 4)), f32))
        return exp.mlir_module()

    R.emit("misc", "jax_export_shape_poly", poly_text, check=_contains("tensor<?x8xf32>"))


def worker_jax_sharded(R: Recorder):
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    assert len(jax.devices()) == 4, jax.devices()
    mesh = Mesh(jax.make_mesh((2, 2), ("data", "model")).devices, ("data", "model"))
    f32 = jnp.float32
    S = jax.ShapeDtypeStruct
    B, D, H = R.pick(8, 16), R.pick(8, 16, 32), R.pick(16, 32, 64)

    def mlp(w1, w2, x):
        h = jax.nn.relu(x @ w1)
        h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P("data", "model")))
        return (h @ w2).sum()

    def sharded_lower(shardy: bool, debug=False):
        jax.config.update("jax_use_shardy_partitioner", shardy)
        f = jax.jit(jax.value_and_grad(mlp, argnums=(0, 1)),
                    in_shardings=(NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None)),
                                  NamedSharding(mesh, P("data", None))),
                    out_shardings=(NamedSharding(mesh, P()), (NamedSharding(mesh, P(None, "model")),
                                                              NamedSharding(mesh, P("model", None)))))
        return f.lower(S((D, H), f32), S((H, D), f32), S((B, D), f32)).as_text(debug_info=debug)

    R.emit("shardings", "jax_sharded_mlp_grad_shardy", lambda: sharded_lower(True),
           check=_contains("sdy.mesh", "sdy.sharding"))
    R.emit("shardings", "jax_sharded_mlp_grad_gspmd", lambda: sharded_lower(False),
           check=_contains("mhlo.sharding"))
    R.emit("shardings", "jax_sharded_mlp_grad_shardy_debug_info", lambda: sharded_lower(True, True),
           check=_contains("sdy.mesh", "#loc"))

    def collectives(x, y):
        s = jax.lax.psum(x, "data")
        g = jax.lax.all_gather(x, "model", tiled=True)
        pp = jax.lax.ppermute(x, "data", perm=[(0, 1), (1, 0)])
        a2a = jax.lax.all_to_all(y, "model", 0, 0, tiled=True)
        rs = jax.lax.psum_scatter(y, "model", scatter_dimension=0, tiled=True)
        mx = jax.lax.pmax(x, ("data", "model"))
        idx = jax.lax.axis_index("model")
        return s + pp + mx + idx, g, a2a, rs

    def shmap_lower(shardy: bool):
        jax.config.update("jax_use_shardy_partitioner", shardy)
        f = jax.jit(jax.shard_map(collectives, mesh=mesh, in_specs=(P("data", "model"), P("data", "model")),
                                  out_specs=(P("data", "model"), P("data", None), P("data", "model"),
                                             P("data", "model")), check_vma=False))
        return f.lower(S((4, 8), f32), S((R.pick(4, 8), 8), f32)).as_text()

    R.emit("shardings", "jax_shard_map_collectives_shardy", lambda: shmap_lower(True),
           check=_contains("sdy.manual_computation", "all_reduce", "collective_permute", "all_to_all"))
    R.emit("shardings", "jax_shard_map_collectives_gspmd", lambda: shmap_lower(False),
           check=_contains("mhlo.sharding", "all_reduce", "all_gather"))

    def donated_sharded():
        jax.config.update("jax_use_shardy_partitioner", True)
        sh = NamedSharding(mesh, P("data", "model"))
        f = jax.jit(lambda a, b: (a * 2, b + a), in_shardings=(sh, sh), out_shardings=(sh, sh), donate_argnums=(0,))
        return f.lower(S((8, 8), f32), S((8, 8), f32)).as_text()

    R.emit("shardings", "jax_donated_sharded_shardy", donated_sharded, check=_contains("tf.aliasing_output"))


def worker_pallas(R: Recorder):
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas import triton as pltriton

    f32 = jnp.float32
    S = jax.ShapeDtypeStruct
    rows = R.pick(8, 16, 32)

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + jnp.sin(y_ref[...])

    def add(x, y, **kw):
        return pl.pallas_call(add_kernel, out_shape=S(x.shape, x.dtype), **kw)(x, y)

    # Mosaic TPU wants blocks whose last two dims are multiples of (8, 128).
    bm, bn, bk = R.pick(8, 16, 32), 128, 128
    M, N, K = 4 * bm, 2 * bn, R.pick(1, 2, 3) * bk

    def mm_kernel(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def matmul(x, y, **kw):
        return pl.pallas_call(
            mm_kernel, out_shape=S((M, N), x.dtype), grid=(M // bm, N // bn, K // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)), pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)], **kw)(x, y)

    def tiled_add(x, y, **kw):
        blk = (8, 128)
        return pl.pallas_call(
            add_kernel, out_shape=S(x.shape, x.dtype), grid=(x.shape[0] // 8,),
            in_specs=[pl.BlockSpec(blk, lambda i: (i, 0))] * 2, out_specs=pl.BlockSpec(blk, lambda i: (i, 0)),
            **kw)(x, y)

    xa = S((rows, 128), f32)
    # interpret mode: plain StableHLO on CPU
    R.emit("pallas_interpret", "pallas_add_interpret",
           lambda: jax.jit(functools.partial(add, interpret=True)).lower(xa, xa).as_text())
    R.emit("pallas_interpret", "pallas_tiled_add_interpret",
           lambda: jax.jit(functools.partial(tiled_add, interpret=True)).lower(xa, xa).as_text(),
           check=_contains("stablehlo.while"))
    R.emit("pallas_interpret", "pallas_matmul_grid_interpret",
           lambda: jax.jit(functools.partial(matmul, interpret=True)).lower(S((M, K), f32), S((K, N), f32)).as_text())

    def cross(f, *args, platform):
        return jax.jit(f).trace(*args).lower(lowering_platforms=(platform,)).as_text()

    # Mosaic TPU (custom_call @tpu_custom_call with a serialized Mosaic module)
    R.emit("pallas_tpu", "pallas_add_tpu", lambda: cross(add, xa, xa, platform="tpu"),
           check=_contains("tpu_custom_call"))
    R.emit("pallas_tpu", "pallas_matmul_grid_tpu", lambda: cross(
        functools.partial(matmul, compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"))),
        S((M, K), f32), S((K, N), f32), platform="tpu"), check=_contains("tpu_custom_call"))
    R.emit("pallas_tpu", "pallas_in_graph_tpu", lambda: cross(
        lambda x, y: jnp.tanh(tiled_add(x * 2, y)) @ jnp.ones((128, 4), f32), xa, xa, platform="tpu"),
        check=_contains("tpu_custom_call", "stablehlo.tanh"))

    # Triton (custom_call @__gpu$xla.gpu.triton)
    triton = pltriton.CompilerParams(num_warps=R.pick(2, 4), num_stages=2)
    R.emit("pallas_triton", "pallas_add_triton", lambda: cross(
        functools.partial(add, compiler_params=triton), xa, xa, platform="cuda"),
        check=_contains("__gpu$xla.gpu.triton"))

    def tri_mm_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...]).astype(o_ref.dtype)

    def tri_matmul(x, y):
        b = 16
        return pl.pallas_call(
            tri_mm_kernel, out_shape=S((x.shape[0], y.shape[1]), f32), grid=(x.shape[0] // b, y.shape[1] // b),
            in_specs=[pl.BlockSpec((b, x.shape[1]), lambda i, j: (i, 0)),
                      pl.BlockSpec((y.shape[0], b), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((b, b), lambda i, j: (i, j)), compiler_params=triton)(x, y)

    R.emit("pallas_triton", "pallas_matmul_grid_triton", lambda: cross(
        tri_matmul, S((64, 32), f32), S((32, 48), f32), platform="cuda"), check=_contains("__gpu$xla.gpu.triton"))
    R.emit("pallas_triton", "pallas_add_triton_rocm", lambda: cross(
        functools.partial(add, compiler_params=triton), xa, xa, platform="rocm"),
        check=_contains("__gpu$xla.gpu.triton"))
    # Mosaic GPU (the default Pallas backend for cuda)
    R.emit("pallas_mosaic_gpu", "pallas_add_mosaic_gpu", lambda: cross(add, xa, xa, platform="cuda"),
           check=_contains("mosaic_gpu"))


def worker_torch(R: Recorder, debug: bool = False):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    from torch_xla.stablehlo import exported_program_to_stablehlo

    torch.manual_seed(R.rng.randrange(1 << 30))
    nn = torch.nn
    B, D, H = R.pick(2, 4, 8), R.pick(8, 16), R.pick(16, 32)

    def export_text(model, *args):
        ep = torch.export.export(model.eval(), args)
        return exported_program_to_stablehlo(ep).get_stablehlo_text()

    def cnn():
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, stride=2, groups=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))

    img = R.pick(8, 12, 16)
    suffix = "_debug" if debug else ""
    if not debug:
        R.emit("torch_export", "torch_export_mlp", lambda: export_text(
            nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, 3), nn.LogSoftmax(-1)), torch.randn(B, D)))
        R.emit("torch_export", "torch_export_cnn", lambda: export_text(cnn(), torch.randn(B, 3, img, img)))
        dm = R.pick(16, 32)
        R.emit("torch_export", "torch_export_transformer_encoder_layer", lambda: export_text(
            nn.TransformerEncoderLayer(dm, 4, dim_feedforward=2 * dm, dropout=0.0, batch_first=True),
            torch.randn(B, R.pick(5, 8), dm)))

    dev = torch_xla.device()

    def lazy_train(model, x, target, loss_fn):
        model = model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, target = x.to(dev), target.to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
        outs = [loss] + [p for p in model.parameters()]
        return xm.get_stablehlo(outs)

    R.emit("torch_lazy", f"torch_lazy_mlp_fwd_bwd_sgd{suffix}", lambda: lazy_train(
        nn.Sequential(nn.Linear(D, H), nn.Tanh(), nn.Linear(H, 3)), torch.randn(B, D),
        torch.randint(0, 3, (B,)), nn.functional.cross_entropy))
    if not debug:
        R.emit("torch_lazy", "torch_lazy_cnn_fwd_bwd_sgd", lambda: lazy_train(
            cnn(), torch.randn(B, 3, img, img), torch.randint(0, 5, (B,)), nn.functional.cross_entropy))

        def lazy_fwd():
            x = torch.randn(B, D, device=dev)
            w = torch.randn(D, D, device=dev)
            y = torch.softmax(x @ w, -1).cumsum(-1)
            v, i = torch.topk(y, 2)
            return xm.get_stablehlo([y, v, i, (x > 0).to(torch.int8), x.to(torch.bfloat16)])

        R.emit("torch_lazy", "torch_lazy_mixed_ops", lazy_fwd)


WORKER_FNS = {
    "jax": worker_jax,
    "jax_sharded": worker_jax_sharded,
    "pallas": worker_pallas,
    "torch": worker_torch,
    "torch_debug": lambda R: worker_torch(R, debug=True),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--worker", choices=sorted(WORKER_FNS))
    ap.add_argument("--report", type=Path)
    args = ap.parse_args(argv)
    if args.worker:
        args.out.mkdir(parents=True, exist_ok=True)
        R = Recorder(args.out, args.worker, args.seed if args.seed is not None else 0)
        try:
            WORKER_FNS[args.worker](R)
        finally:
            if args.report:
                args.report.write_text(json.dumps(R.entries))
        return 0
    man = ensure_generated(args.out, force=args.force, seed=args.seed, verbose=True)
    ok = [e for e in man["programs"] if e.get("file")]
    bad = [e for e in man["programs"] if not e.get("file")]
    print(f"{len(ok)} modules in {args.out} (seed {man['seed']}, {man['seconds']}s); {len(bad)} failed")
    for e in bad:
        print(f"  FAILED {e['name']}: {e['error'][:300]}")
    for w, err in man["worker_errors"].items():
        print(f"  WORKER {w}: {err[-1500:]}")
    return 0 if not bad and not man["worker_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
