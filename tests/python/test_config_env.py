"""The Python package's configuration (``hlobridge._src.config``): every
``HLOBRIDGE_*`` variable the package reads has a row (default, meaning,
reader), and ``import hlobridge`` warns about an unknown ``HLOBRIDGE_*``
variable, naming the nearest known one; known ones (the Rust table's and the
Python table's) and a clean environment give no warning.

Run:  .venv/bin/python -m pytest -W error tests/python/test_config_env.py -q
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

import hlobridge
from hlobridge import _native
from hlobridge._src import config

PKG = pathlib.Path(hlobridge.__file__).parent
NATIVE_TABLE = getattr(_native, "config_variables", None)
needs_table = pytest.mark.skipif(NATIVE_TABLE is None, reason="the extension predates config_variables()")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(config.PREFIX)}
    return {**env, "PJRT_DEVICE": "CPU", **extra}


def _import_warnings(env: dict[str, str]) -> list[str]:
    code = ("import warnings\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import hlobridge\n"
            "for x in w:\n"
            "    print(x.category.__name__, x.message)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return [line for line in out.stdout.splitlines() if line]


def test_every_variable_the_package_reads_has_a_row():
    """No module reads ``os.environ``/``getenv`` for an ``HLOBRIDGE_*`` name
    except through the config module, and each name it passes is a row."""
    read = set()
    for f in PKG.rglob("*.py"):
        if f.name == "config.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if node.func.attr in ("get", "get_flag", "get_int", "getenv", "setdefault"):
                    read |= {(f.name, node.func.attr, a) for a in args if a.startswith(config.PREFIX)}
    direct = {r for r in read if r[1] in ("getenv", "setdefault")}
    assert not direct, direct
    # environ.get("HLOBRIDGE_...") and config.get("HLOBRIDGE_...") look alike here:
    # every such name must be a row of the table.
    assert {a for _, _, a in read} <= set(config.VARIABLES), read
    for var in config.VARIABLES.values():
        assert var.meaning and var.read_by.startswith("hlobridge._src")


def test_get_reads_defaults_and_values():
    env = {"HLOBRIDGE_PALLAS_AUTO_INTERPRET": " 0 ", "HLOBRIDGE_LOCAL_DEVICES": ""}
    assert config.get_flag("HLOBRIDGE_PALLAS_AUTO_INTERPRET", env) is False
    assert config.get_flag("HLOBRIDGE_PALLAS_AUTO_INTERPRET", {}) is True
    assert config.get_int("HLOBRIDGE_LOCAL_DEVICES", env) == 1  # empty counts as unset
    assert config.get("HLOBRIDGE_COORDINATOR_PORT", {}) is None
    with pytest.raises(ValueError, match="HLOBRIDGE_LOCAL_DEVICES"):
        config.get_int("HLOBRIDGE_LOCAL_DEVICES", {"HLOBRIDGE_LOCAL_DEVICES": "two"})
    with pytest.raises(KeyError):
        config.get("HLOBRIDGE_NOT_A_ROW", {})


def test_unknown_variables_name_the_nearest_known_one():
    known = ["HLOBRIDGE_CACHE_DIR", "HLOBRIDGE_PALLAS_AUTO_INTERPRET", "HLOBRIDGE_HOST_GEMM"]
    env = ["PATH", "HLOBRIDGE_CACHE_DIR", "HLOBRIDGE_PALLAS_AUTO_INTERPERT", "HLOBRIDGE_XYZZY_QUUX"]
    assert config.unknown_variables(env, known) == [
        ("HLOBRIDGE_PALLAS_AUTO_INTERPERT", "HLOBRIDGE_PALLAS_AUTO_INTERPRET"),
        ("HLOBRIDGE_XYZZY_QUUX", None),
    ]


@needs_table
def test_import_warns_about_an_unknown_variable_with_the_nearest_name():
    got = _import_warnings(_clean_env(HLOBRIDGE_PALLAS_AUTO_INTERPERT="0", HLOBRIDGE_CACHE_DIR="/tmp/x"))
    assert len(got) == 1, got
    assert got[0].startswith("UserWarning unknown hlobridge environment variable "
                             "HLOBRIDGE_PALLAS_AUTO_INTERPERT; did you mean "
                             "HLOBRIDGE_PALLAS_AUTO_INTERPRET?"), got


@needs_table
def test_known_variables_do_not_warn():
    table = NATIVE_TABLE()
    known = {row[0]: "1" for row in table if not row[0].endswith("_")} | {n: "1" for n in config.VARIABLES}
    assert _import_warnings(_clean_env(**known)) == []
    assert _import_warnings(_clean_env()) == []
    assert set(config.VARIABLES) <= {row[0] for row in table}  # the Rust table lists the Python rows


def test_default_onednn_library_points_at_the_environments_library(tmp_path, monkeypatch):
    # The environment's lib/libdnnl.so.3 when the variable is unset and the file exists.
    (tmp_path / "lib").mkdir()
    lib = tmp_path / "lib" / "libdnnl.so.3"
    lib.write_bytes(b"")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    env: dict[str, str] = {}
    assert config.default_onednn_library(env) == str(lib)
    assert env["HLOBRIDGE_ONEDNN_LIBRARY"] == str(lib)
    # A value the user set (an off word included) is kept.
    env = {"HLOBRIDGE_ONEDNN_LIBRARY": "0"}
    assert config.default_onednn_library(env) == "0"
    assert env == {"HLOBRIDGE_ONEDNN_LIBRARY": "0"}
    # No file: nothing set.
    lib.unlink()
    env = {}
    assert config.default_onednn_library(env) is None and env == {}
