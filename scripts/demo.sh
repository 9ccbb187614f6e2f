#!/usr/bin/env bash
# The main job: (1) a live JAX program parsed, inspected and printed back by
# hlobridge; (2) a torch + JAX training step stitched into ONE program and run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.cache/demo
mkdir -p "$out"
.venv/bin/python - "$out/jax_mlp.mlir" <<'PY'
import sys
import jax, jax.numpy as jnp
def mlp(params, x):
    w1, b1, w2, b2 = params
    h = jnp.tanh(x @ w1 + b1)
    return jnp.sum((h @ w2 + b2) ** 2)
k = jax.random.split(jax.random.key(0), 4)
params = (jax.random.normal(k[0], (64, 128)), jnp.zeros(128), jax.random.normal(k[1], (128, 10)), jnp.zeros(10))
x = jax.random.normal(k[2], (32, 64))
text = jax.jit(jax.value_and_grad(mlp)).lower(params, x).as_text(debug_info=True)
open(sys.argv[1], "w").write(text)
print(f"lowered value_and_grad(mlp) with jax {jax.__version__}: {len(text)} bytes -> {sys.argv[1]}")
PY
echo "== hlobridge inspect"
.venv/bin/hlobridge inspect "$out/jax_mlp.mlir"
echo "== hlobridge fmt (first lines)"
.venv/bin/hlobridge fmt "$out/jax_mlp.mlir" -o "$out/jax_mlp.pretty.mlir"
head -n 12 "$out/jax_mlp.pretty.mlir"
.venv/bin/hlobridge fmt --generic "$out/jax_mlp.mlir" -o "$out/jax_mlp.generic.mlir"
.venv/bin/python - "$out" <<'PY'
import sys, hlobridge
d = sys.argv[1]
orig = open(f"{d}/jax_mlp.mlir").read()
again = hlobridge.format_module(open(f"{d}/jax_mlp.pretty.mlir").read())
assert again == open(f"{d}/jax_mlp.pretty.mlir").read(), "printer is not a fixpoint"
print(f"round trip OK via the Python package (hlobridge {hlobridge.__version__})")
PY

echo
echo "== A PyTorch model calling a JAX function, trained with a JAX optimizer update: ONE fused program"
HLOBRIDGE_DEMO_PLAN_DIR="$out/demo_plan" PJRT_DEVICE=CPU .venv/bin/python examples/hybrid_train_step.py \
    2> >(grep -v -E '^(WARNING: All log messages|I0000)' >&2)

echo
echo "== The stitched program as a picture: hlobridge viz"
.venv/bin/hlobridge viz "$out/demo_plan/plan.toml" -o "$out/demo_graph.html"
.venv/bin/hlobridge viz "$out/demo_plan/plan.toml" -o "$out/demo_graph.svg" --layout builtin
echo "wrote $out/demo_graph.html and $out/demo_graph.svg"

echo
echo "== The same, written as plain PyTorch: hb.compile_train_step captures forward + backward + JAX update as ONE program"
PJRT_DEVICE=CPU .venv/bin/python examples/whole_step.py \
    2> >(grep -v -E '^(WARNING: All log messages|I0000)' >&2)
