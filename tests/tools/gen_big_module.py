#!/usr/bin/env python3
"""Generate the largest realistic benchmark module: a 24-layer transformer
train step lowered from JAX (no debug info).

    python tests/tools/gen_big_module.py [--out .cache/big/transformer24_train.mlir] [--force]

The step is what a real decoder-only LM training loop jits: token + learned
position embeddings, 24 pre-LN blocks (q/k/v/o with biases, rotary position
embedding, causal softmax attention, attention + residual dropout, GELU MLP),
bf16 compute with f32 master weights, label-smoothed cross entropy with
z-loss, gradient accumulation over unrolled micro-batches, global-norm
clipping, and AdamW with bias correction, decoupled weight decay on matrices
only and a warmup + cosine learning-rate schedule; params and optimizer
state are donated.  ~10 MB of StableHLO text with the defaults.

Cached: regenerated only when this script or the jax/jaxlib versions change
(key stored beside the output as ``<out>.key``) or with ``--force``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO_ROOT = HERE.parents[2]
DEFAULT_OUT = Path(os.environ.get("HLOBRIDGE_CACHE_DIR", REPO_ROOT / ".cache")) / "big" / "transformer24_train.mlir"

CONFIG = dict(layers=24, d_model=384, heads=6, seq=128, batch=4, vocab=2048, accum=6, mlp_ratio=4)


def _key(cfg: dict) -> str:
    from importlib import metadata

    h = hashlib.sha256(HERE.read_bytes())
    h.update(json.dumps(cfg, sort_keys=True).encode())
    for dist in ("jax", "jaxlib"):
        h.update(metadata.version(dist).encode())
    return h.hexdigest()[:16]


def build_text(cfg: dict) -> str:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    from jax import lax

    L, D, Hn, T, B, V, A = (cfg[k] for k in ("layers", "d_model", "heads", "seq", "batch", "vocab", "accum"))
    F = cfg["mlp_ratio"] * D
    dh = D // Hn
    f32, bf16 = jnp.float32, jnp.bfloat16
    S = jax.ShapeDtypeStruct

    def param_shapes():
        layer = {
            "ln1_g": (D,), "ln1_b": (D,), "ln2_g": (D,), "ln2_b": (D,),
            "wq": (D, D), "bq": (D,), "wk": (D, D), "bk": (D,), "wv": (D, D), "bv": (D,),
            "wo": (D, D), "bo": (D,), "w1": (D, F), "b1": (F,), "w2": (F, D), "b2": (D,),
        }
        return {
            "tok_emb": (V, D), "pos_emb": (T, D), "lnf_g": (D,), "lnf_b": (D,), "head": (D, V),
            "layers": [dict(layer) for _ in range(L)],
        }

    shapes = param_shapes()
    params_sds = jax.tree.map(lambda s: S(s, f32), shapes, is_leaf=lambda x: isinstance(x, tuple))

    def layernorm(x, g, b):
        x32 = x.astype(f32)
        m = x32.mean(-1, keepdims=True)
        v = jnp.square(x32 - m).mean(-1, keepdims=True)
        return ((x32 - m) * lax.rsqrt(v + 1e-5) * g + b).astype(bf16)

    def rotary(x):  # x: [B, H, T, dh]
        half = dh // 2
        freqs = 1.0 / (10000 ** (jnp.arange(half, dtype=f32) / half))
        ang = jnp.arange(T, dtype=f32)[:, None] * freqs[None, :]
        cos, sin = jnp.cos(ang).astype(bf16), jnp.sin(ang).astype(bf16)
        x1, x2 = x[..., :half], x[..., half:]
        return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)

    def dropout(key, x, rate):
        keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))

    def block(p, x, key):
        k1, k2, k3 = jax.random.split(key, 3)
        c = lambda w: w.astype(bf16)  # noqa: E731
        h = layernorm(x, p["ln1_g"], p["ln1_b"])
        q = h @ c(p["wq"]) + c(p["bq"])
        k = h @ c(p["wk"]) + c(p["bk"])
        v = h @ c(p["wv"]) + c(p["bv"])
        heads = lambda t: t.reshape(t.shape[0], T, Hn, dh).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = rotary(heads(q)), rotary(heads(k)), heads(v)
        att = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=f32) * (dh ** -0.5)
        mask = jnp.tril(jnp.ones((T, T), bool))
        att = jnp.where(mask, att, jnp.finfo(f32).min)
        prob = jax.nn.softmax(att, axis=-1).astype(bf16)
        prob = dropout(k1, prob, 0.1)
        o = jnp.einsum("bhqk,bhkd->bhqd", prob, v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + dropout(k2, o @ c(p["wo"]) + c(p["bo"]), 0.1)
        h = layernorm(x, p["ln2_g"], p["ln2_b"])
        h = jax.nn.gelu(h @ c(p["w1"]) + c(p["b1"]), approximate=True)
        return x + dropout(k3, h @ c(p["w2"]) + c(p["b2"]), 0.1)

    def loss_fn(params, tokens, targets, key):
        x = (params["tok_emb"][tokens] + params["pos_emb"][None]).astype(bf16)
        keys = jax.random.split(key, L)
        for i, p in enumerate(params["layers"]):
            x = block(p, x, keys[i])
        x = layernorm(x, params["lnf_g"], params["lnf_b"])
        logits = (x @ params["head"].astype(bf16)).astype(f32)
        logz = jax.nn.logsumexp(logits, axis=-1)
        logp = logits - logz[..., None]
        eps = 0.1
        onehot = jax.nn.one_hot(targets, V, dtype=f32) * (1 - eps) + eps / V
        ce = -(onehot * logp).sum(-1)
        return ce.mean() + 1e-4 * jnp.square(logz).mean()

    def lr_schedule(step):
        warm, total = 1000.0, 100000.0
        s = step.astype(f32)
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * jnp.clip((s - warm) / (total - warm), 0.0, 1.0)))
        return 3e-4 * jnp.where(s < warm, s / warm, 0.1 + 0.9 * cosine)

    def train_step(params, opt_state, tokens, targets, key):
        mu, nu, step = opt_state
        grads = jax.tree.map(jnp.zeros_like, params)
        loss = jnp.zeros((), f32)
        mkeys = jax.random.split(key, A)
        for a in range(A):  # unrolled micro-batch accumulation
            l, g = jax.value_and_grad(loss_fn)(params, tokens[a], targets[a], mkeys[a])
            loss = loss + l / A
            grads = jax.tree.map(lambda acc, gi: acc + gi / A, grads, g)
        gnorm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))
        scale = jnp.minimum(1.0, 1.0 / (gnorm + 1e-6))
        grads = jax.tree.map(lambda g: g * scale, grads)
        step = step + 1
        b1, b2, lr = 0.9, 0.95, lr_schedule(step)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, mu, grads)
        nu = jax.tree.map(lambda n, g: b2 * n + (1 - b2) * jnp.square(g), nu, grads)
        bc1 = 1 - b1 ** step.astype(f32)
        bc2 = 1 - b2 ** step.astype(f32)

        def update(p, m, n):
            upd = (m / bc1) / (jnp.sqrt(n / bc2) + 1e-8)
            if p.ndim >= 2:
                upd = upd + 0.1 * p
            return p - lr * upd

        params = jax.tree.map(update, params, mu, nu)
        metrics = {"loss": loss, "grad_norm": gnorm, "lr": lr}
        return params, (mu, nu, step), metrics

    opt_sds = (params_sds, params_sds, S((), jnp.int32))
    lowered = jax.jit(train_step, donate_argnums=(0, 1)).lower(
        params_sds, opt_sds, S((A, B, T), jnp.int32), S((A, B, T), jnp.int32), jax.random.key(0))
    return lowered.as_text(debug_info=False)


def ensure(out: Path = DEFAULT_OUT, force: bool = False, cfg: dict | None = None) -> Path:
    cfg = dict(CONFIG, **(cfg or {}))
    out = Path(out)
    key_file = out.with_name(out.name + ".key")
    key = _key(cfg)
    if not force and out.exists() and key_file.exists() and key_file.read_text().strip() == key:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    text = build_text(cfg)
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    key_file.write_text(key + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true")
    for k, v in CONFIG.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    args = ap.parse_args(argv)
    cfg = {k: getattr(args, k) for k in CONFIG}
    t0 = time.time()
    out = ensure(args.out, args.force, cfg)
    size = out.stat().st_size
    print(json.dumps({"file": str(out), "bytes": size, "mb": round(size / 1e6, 2),
                      "seconds": round(time.time() - t0, 1), "config": cfg}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
