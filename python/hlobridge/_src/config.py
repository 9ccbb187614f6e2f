"""Every ``HLOBRIDGE_*`` environment variable the Python package reads, with
its default and meaning, read through :func:`get` (and its typed helpers).

The full list of the project's variables (the Rust crates', the tests' and
the scripts' too) is the Rust crate ``hlobridge-config``, rendered into
``docs/configuration.md`` and exposed as
``hlobridge._native.config_variables()``; :data:`VARIABLES` names those the
package reads, with the default each reader uses and its module, and takes
their meaning from that table.

On ``import hlobridge``, :func:`check_environment` warns (``UserWarning``)
about every ``HLOBRIDGE_*`` variable in the environment that no table knows,
naming the nearest known one (a typo is otherwise silently ignored).
"""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass

__all__ = ["Var", "VARIABLES", "check_environment", "default_onednn_library", "get", "get_flag",
           "get_int", "known_names", "unknown_variables"]

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


_READS: dict[str, tuple[str | None, str]] = {
    # name: (the default the reader uses, the module that reads it). The
    # meaning comes from the one table, hlobridge-config's.
    "HLOBRIDGE_PALLAS_AUTO_INTERPRET": ("1", "hlobridge._src.pallas_auto"),
    "HLOBRIDGE_TORCH_ENGINE": ("torch_xla_lazy", "hlobridge._src.dynamo.engine"),
    "HLOBRIDGE_COORDINATOR_PORT": (None, "hlobridge._src.spmd.runtime"),
    "HLOBRIDGE_LOCAL_DEVICES": ("1", "hlobridge._src.spmd.runtime"),
    "HLOBRIDGE_ONEDNN_LIBRARY": (None, "hlobridge._src.config"),
}


def _variables() -> dict[str, Var]:
    from hlobridge import _native

    meanings = {row[0]: row[2] for row in _native.config_variables()}
    missing = sorted(set(_READS) - set(meanings))
    if missing:  # the Rust table is the one list: a Python read must have a row there
        raise RuntimeError(f"hlobridge-config has no row for {missing}")
    return {name: Var(name, default, meanings[name], reader)
            for name, (default, reader) in _READS.items()}


VARIABLES: dict[str, Var] = _variables()


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


def known_names() -> set[str]:
    """The names of every variable the project knows (the Rust table,
    ``hlobridge._native.config_variables()``)."""
    from hlobridge import _native

    return {row[0] for row in _native.config_variables()}


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
    for name, nearest in unknown_variables(os.environ if environ is None else environ, known):
        hint = f"; did you mean {nearest}?" if nearest else ""
        warnings.warn(f"unknown hlobridge environment variable {name}{hint} "
                      f"(docs/configuration.md lists them)", UserWarning, stacklevel=3)


def default_onednn_library(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Points ``HLOBRIDGE_ONEDNN_LIBRARY`` at this Python environment's oneDNN
    (``sys.prefix/lib/libdnnl.so.3``, the ``onednn-cpu-gomp`` wheel's) when it
    is unset and that file exists, so that the native code, which runs
    weight gradients on it, finds it. Returns the variable's value after."""
    env = os.environ if environ is None else environ
    value = env.get("HLOBRIDGE_ONEDNN_LIBRARY", "").strip()
    if not value:
        path = os.path.join(sys.prefix, "lib", "libdnnl.so.3")
        if os.path.isfile(path):
            env["HLOBRIDGE_ONEDNN_LIBRARY"] = value = path
    return value or None
