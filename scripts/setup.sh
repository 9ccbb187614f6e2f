#!/usr/bin/env bash
# Set up everything hlobridge needs on a fresh machine, idempotently:
#   1. Debian packages (only what is missing),
#   2. the Python venv at .venv with the pinned stack (requirements.txt),
#   3. the Rust CLI, installed as .venv/bin/hlobridge,
#   4. the Python package `hlobridge` (maturin develop into .venv),
#   5. the accelerator compilers of requirements-accel.txt (libtpu, the CUDA
#      PJRT plugin, ptxas) into .venv/accel, off sys.path; HLOBRIDGE_ACCEL=0
#      skips them (see docs/accelerators.md).
# A second run with nothing changed takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STAMPS=.venv/.hlobridge-stamps

log() { printf '[setup] %s\n' "$*" >&2; }

# 1. apt packages (none are strictly required today; list them here).
APT_PACKAGES=(${HLOBRIDGE_APT_PACKAGES:-})
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# 2. venv + pinned Python stack.
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $PY"
  "$PY" -m venv .venv
fi
mkdir -p "$STAMPS"
req_hash=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$STAMPS/requirements" 2>/dev/null)" != "$req_hash" ]; then
  log "installing the pinned Python stack (first time: several minutes, ~7 GB)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  echo "$req_hash" > "$STAMPS/requirements"
fi

# 2b. Accelerator compilers for deviceless compile (opt out: HLOBRIDGE_ACCEL=0).
if [ "${HLOBRIDGE_ACCEL:-1}" != "0" ]; then
  accel_hash=$(sha256sum requirements-accel.txt | cut -d' ' -f1)
  if [ "$(cat "$STAMPS/accel" 2>/dev/null)" != "$accel_hash" ] || [ ! -f .venv/accel/libtpu/libtpu.so ]; then
    log "installing accelerator compilers into .venv/accel (~1.2 GB; HLOBRIDGE_ACCEL=0 skips)"
    rm -rf .venv/accel
    .venv/bin/pip install -q --no-deps --target .venv/accel -r requirements-accel.txt
    echo "$accel_hash" > "$STAMPS/accel"
  fi
fi

# 3. Rust CLI.
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup)" >&2; exit 1; }
log "building the hlobridge CLI (release)"
cargo build --release -q -p hlobridge-cli
install -m 0755 target/release/hlobridge .venv/bin/hlobridge

# 4. Python package (native extension + pure-Python part), editable.
src_hash=$( (find python bridge pjrt-client/src proto -type f \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' -o -name '*.toml' -o -name '*.proto' \) -print0 2>/dev/null | sort -z | xargs -0 sha256sum; sha256sum Cargo.lock 2>/dev/null) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMPS/python-pkg" 2>/dev/null)" != "$src_hash" ] || ! .venv/bin/python -c "import hlobridge" 2>/dev/null; then
  log "building the hlobridge Python package"
  VIRTUAL_ENV="$ROOT/.venv" PATH="$ROOT/.venv/bin:$PATH" \
    .venv/bin/maturin develop --release -q -m python/Cargo.toml >/dev/null
  echo "$src_hash" > "$STAMPS/python-pkg"
fi
.venv/bin/python -c "import hlobridge" || { echo "import hlobridge failed" >&2; exit 1; }
log "ready: .venv/bin/hlobridge, .venv/bin/python -c 'import hlobridge'"
