"""A throwaway venv for torch_xla's own ``call_jax``, which needs jax 0.7.1.

torch_xla 2.9 pins jax/jaxlib 0.7.1 (and torchax) for its JAX bridge, while
hlobridge uses jax 0.10.2. Instead of a second 7 GB torch install, the venv
made here holds only ``jax==0.7.1``, ``jaxlib==0.7.1`` and ``torchax==0.0.7``
and reaches torch and torch_xla through a ``.pth`` file pointing at the
project's ``.venv`` (its own site-packages come first, so jax 0.7.1 wins).

Run directly to create it:  .venv/bin/python benches/torch_xla/env.py
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache" / "venv-torchxla-jax071"
PINS = ["jax==0.7.1", "jaxlib==0.7.1", "torchax==0.0.7"]


def python() -> Path:
    """The venv's interpreter, creating the venv on first use."""
    exe = VENV / "bin" / "python"
    marker = VENV / ".complete"
    if marker.exists():
        return exe
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run([str(exe), "-m", "pip", "install", "-q", "--no-deps", *PINS], check=True)
    site = subprocess.run([str(exe), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    main_site = sysconfig.get_paths()["purelib"]  # this (the project's) venv
    Path(site, "zz_hlobridge_main_venv.pth").write_text(main_site + "\n")
    marker.write_text("\n".join(PINS) + "\n")
    return exe


if __name__ == "__main__":
    print(python())
