#!/usr/bin/env bash
# hlobridge's GPU checks, for a machine with an NVIDIA GPU (see README.md here).
#
#   tests/gpu/run.sh [extra pytest args]
#
# 1. checks that a GPU is visible (nvidia-smi, then torch.cuda.is_available());
# 2. installs what is missing: the venv and the extension by scripts/setup.sh
#    (needs network and cargo) unless hlobridge already imports with $PYTHON;
# 3. finds the CUDA PJRT plugin (HLOBRIDGE_CUDA_PLUGIN, .venv/accel, then the
#    interpreter's site-packages: jax_plugins/xla_cuda12 or xla_cuda13) and
#    ptxas (HLOBRIDGE_CUDA_DATA_DIR, nvidia/cuda_nvcc, /usr/local/cuda);
# 4. runs tests/python/test_cuda_path.py with HLOBRIDGE_GPU_REQUIRED=1 (a GPU
#    test that would skip fails instead), then tests/gpu/check_cuda_path.py,
#    which compares a stitched program and call_jax on CUDA tensors with
#    torch CUDA eager and prints a JSON summary.
# Logs go to $OUT (default: .cache/gpu-run). Exit status: 0 all passed,
# 1 a test failed, 2 no GPU / nothing to run with.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/.cache/gpu-run}
mkdir -p "$OUT"
log() { printf '[gpu] %s\n' "$*" >&2; }

if ! nvidia-smi -L >"$OUT/nvidia-smi.txt" 2>&1; then
  log "no NVIDIA GPU visible (nvidia-smi failed): $(head -c 300 "$OUT/nvidia-smi.txt")"
  exit 2
fi
log "$(head -n 4 "$OUT/nvidia-smi.txt")"

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=$(command -v python3); fi
fi
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c "import hlobridge" 2>"$OUT/import.txt"; then
  if [ "${HLOBRIDGE_GPU_SETUP:-1}" = "1" ] && command -v cargo >/dev/null 2>&1; then
    log "hlobridge does not import with $PYTHON; running scripts/setup.sh"
    scripts/setup.sh || { log "setup failed"; exit 2; }
    PYTHON=$ROOT/.venv/bin/python
  else
    log "hlobridge does not import with $PYTHON and cannot be built here (no cargo, or"
    log "HLOBRIDGE_GPU_SETUP=0): build python/hlobridge/_native.abi3.so elsewhere and bring it"
    cat "$OUT/import.txt" >&2
    exit 2
  fi
fi

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  log "torch.cuda.is_available() is False with $PYTHON (CPU-only torch build, or no driver)"
  exit 2
fi

if [ -z "${HLOBRIDGE_CUDA_PLUGIN:-}" ]; then
  for d in "$ROOT/.venv/accel" $("$PYTHON" -c "import site, sys; print(' '.join(site.getsitepackages() + [p for p in sys.path if p.endswith('-packages')]))"); do
    for v in 12 13; do
      p=$d/jax_plugins/xla_cuda$v/xla_cuda_plugin.so
      if [ -f "$p" ]; then export HLOBRIDGE_CUDA_PLUGIN=$p; break 2; fi
    done
  done
fi
if [ -z "${HLOBRIDGE_CUDA_PLUGIN:-}" ]; then
  log "no CUDA PJRT plugin found (pip install jax-cuda12-pjrt, or set HLOBRIDGE_CUDA_PLUGIN)"
  exit 2
fi
log "CUDA plugin: $HLOBRIDGE_CUDA_PLUGIN"
if [ -z "${HLOBRIDGE_CUDA_DATA_DIR:-}" ]; then
  for d in "$ROOT/.venv/accel/nvidia/cuda_nvcc" $("$PYTHON" -c "import site; print(' '.join(p + '/nvidia/cuda_nvcc' for p in site.getsitepackages()))") /usr/local/cuda; do
    if [ -x "$d/bin/ptxas" ] && [ -d "$d/nvvm/libdevice" ]; then export HLOBRIDGE_CUDA_DATA_DIR=$d; break; fi
  done
fi
log "CUDA data dir (ptxas, libdevice): ${HLOBRIDGE_CUDA_DATA_DIR:-not found; the plugin searches itself}"

export HLOBRIDGE_GPU_REQUIRED=1 PJRT_DEVICE=${PJRT_DEVICE:-CPU} PYTHONUNBUFFERED=1
status=0
"$PYTHON" -m pytest -q -rs -W error tests/python/test_cuda_path.py "$@" 2>&1 | tee "$OUT/pytest.txt"
[ "${PIPESTATUS[0]}" = "0" ] || status=1
"$PYTHON" tests/gpu/check_cuda_path.py --json "$OUT/summary.json" 2>&1 | tee "$OUT/check.txt"
[ "${PIPESTATUS[0]}" = "0" ] || status=1
log "logs in $OUT; exit $status"
exit $status
