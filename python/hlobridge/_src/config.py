"""Every ``HLOBRIDGE_*`` environment variable the Python package reads, with
its default and meaning, read through :func:`get` (and its typed helpers).

The full list of the project's variables (the Rust crates', the tests' and
the scripts' too) is the Rust crate ``hlobridge-config``, rendered into
``docs/configuration.md`` and exposed as
``hlobridge._native.config_variables()``; the Python rows here repeat those
the package reads so that each read names its row.

On ``import hlobridge``, :func:`check_environment` warns (``UserWarning``)
about every ``HLOBRIDGE_*`` variable in the environment that no table knows,
naming the nearest known one (a typo is otherwise silently ignored). Without
the native table (an extension built before it existed) the check is skipped:
the Python rows alone would call the Rust crates' variables unknown.
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Var", "VARIABLES", "check_environment", "get", "get_flag", "get_int", "known_names",
           "unknown_variables"]

PREFIX = "HLOBRIDGE_"


@dataclass(frozen=True)
class Var:
    """One variable the Python package reads."""

    name: str
    default: str | None
    """The value used when the variable is unset or empty (``None``: no default,
    the reader decides)."""
    meaning: str
    read_by: str
    """The module that reads it."""


VARIABLES: dict[str, Var] = {v.name: v for v in (
    Var("HLOBRIDGE_PALLAS_AUTO_INTERPRET", "1",
        "`0` turns off running Pallas kernels in interpret mode inside hlobridge's CPU lowerings: "
        "such a kernel then raises PallasLoweringError. Read at each lowering.",
        "hlobridge._src.pallas_auto"),
    Var("HLOBRIDGE_TORCH_ENGINE", "torch_xla_lazy",
        "The engine that captures the torch side of a whole-step program (only torch_xla_lazy today).",
        "hlobridge._src.dynamo.engine"),
    Var("HLOBRIDGE_COORDINATOR_PORT", None,
        "Port of the JAX distributed coordinator that hlobridge.spmd starts (default MASTER_PORT + 1).",
        "hlobridge._src.spmd.runtime"),
    Var("HLOBRIDGE_LOCAL_DEVICES", "1",
        "CPU devices per process in hlobridge.spmd (jax_num_cpu_devices).",
        "hlobridge._src.spmd.runtime"),
)}


def get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the Python package's variable ``name`` (stripped), or its
    default when unset or empty. ``name`` must be in :data:`VARIABLES`."""
    var = VARIABLES[name]
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or var.default


def get_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A ``0``/``1`` variable: anything but ``0`` is on."""
    return get(name, environ) != "0"


def get_int(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """An integer variable (``None`` when unset without a default); a value
    that is not an integer raises ``ValueError`` naming the variable."""
    value = get(name, environ)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def known_names() -> set[str] | None:
    """The names of every variable the project knows: the Rust table
    (``hlobridge._native.config_variables()``) and :data:`VARIABLES`;
    ``None`` when the native table is not available."""
    from hlobridge import _native

    table = getattr(_native, "config_variables", None)
    if table is None:
        return None
    return {row[0] for row in table()} | set(VARIABLES)


def unknown_variables(environ: Iterable[str], known: Iterable[str]) -> list[tuple[str, str | None]]:
    """``(name, nearest known name or None)`` for each ``HLOBRIDGE_*`` name in
    ``environ`` that is not in ``known``, sorted."""
    known = sorted(set(known))
    out = []
    for name in sorted(n for n in environ if n.startswith(PREFIX) and n not in known):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        out.append((name, close[0] if close else None))
    return out


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Warn once per unknown ``HLOBRIDGE_*`` variable (see the module docs)."""
    known = known_names()
    if known is None:
        return
    for name, nearest in unknown_variables(os.environ if environ is None else environ, known):
        hint = f"; did you mean {nearest}?" if nearest else ""
        warnings.warn(f"unknown hlobridge environment variable {name}{hint} "
                      f"(docs/configuration.md lists them)", UserWarning, stacklevel=3)
