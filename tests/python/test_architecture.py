"""ARCHITECTURE.md's layering table is the law: every workspace crate's
dependencies on crates of ours are among those its row allows, pyo3 appears
only in the Python extension and libloading only in pjrt-client, and every
workspace member has a row."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _table() -> dict[str, set[str]]:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    start = text.index("| crate | may depend on")
    rows: dict[str, set[str]] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        allowed = {n.strip() for n in cells[1].split(",") if n.strip() not in ("", "—")}
        rows[cells[0]] = allowed
    return rows


def _members() -> dict[str, dict]:
    ws = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    out = {}
    for m in ws:
        manifest = tomllib.loads((ROOT / m / "Cargo.toml").read_text())
        out[manifest["package"]["name"]] = manifest
    return out


def test_table_parses_and_names_every_member() -> None:
    table = _table()
    members = _members()
    assert set(members) <= set(table), f"crates without a row in ARCHITECTURE.md: {set(members) - set(table)}"
    assert set(table) <= set(members), f"rows naming no workspace crate: {set(table) - set(members)}"


def test_dependencies_point_one_way() -> None:
    table = _table()
    ours = set(table)
    bad = []
    for name, manifest in _members().items():
        deps = set(manifest.get("dependencies", {})) & ours
        extra = deps - table[name]
        if extra:
            bad.append(f"{name} depends on {sorted(extra)}, which ARCHITECTURE.md does not allow")
    assert not bad, "\n".join(bad)


def test_pyo3_and_libloading_stay_in_their_crates() -> None:
    for name, manifest in _members().items():
        deps = set(manifest.get("dependencies", {}))
        if name != "hlobridge-py":
            assert "pyo3" not in deps, f"{name} depends on pyo3"
        if name != "pjrt-client":
            assert "libloading" not in deps, f"{name} depends on libloading"


def test_the_table_catches_a_wrong_edge() -> None:
    # The check above is not vacuous: the core may not name pjrt-client.
    table = _table()
    assert "pjrt-client" not in table["hlobridge"]
    assert re.search(r"\bpjrt-client\b", ",".join(table["hlobridge-compile"]))
