"""The installed `hlobridge` Python package: import, formatting and the error hierarchy."""

from __future__ import annotations

import pytest

import hlobridge

SMALL = """module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.sine %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""


def test_format_round_trip_is_a_fixpoint():
    pretty = hlobridge.format_module(SMALL)
    assert "stablehlo.sine %arg0 : tensor<4xf32>" in pretty
    assert hlobridge.format_module(pretty) == pretty
    generic = hlobridge.format_module(SMALL, generic=True)
    assert '"stablehlo.sine"(%arg0)' in generic
    assert hlobridge.format_module(generic, generic=True) == generic
    # generic text parses back to the same pretty form
    assert hlobridge.format_module(generic) == pretty


def test_parse_error_is_a_bridge_error_with_location():
    bad = SMALL.replace("%0 = stablehlo.sine %arg0", "%0 = stablehlo.sine %nope")
    with pytest.raises(hlobridge.ParseError) as info:
        hlobridge.format_module(bad, file="model.mlir")
    assert isinstance(info.value, hlobridge.BridgeError)
    msg = str(info.value)
    assert msg.startswith("model.mlir:3:25: error: use of undefined value '%nope'")
    assert msg.splitlines()[-1].strip() == "^"


def test_strip_locations():
    text = SMALL.replace(": tensor<4xf32>\n    return", ': tensor<4xf32> loc("x.py":1:2)\n    return')
    assert 'loc("x.py":1:2)' in hlobridge.format_module(text)
    assert "loc(" not in hlobridge.format_module(text, debug_info=False)


def test_rust_logs_reach_python_logging(caplog):
    import logging
    import uuid

    from hlobridge import _native

    caplog.set_level(logging.DEBUG, logger="hlobridge")
    # A module nobody compiled before (a fresh constant), then the same again.
    k = uuid.uuid4().int % 1000
    text = SMALL.replace("stablehlo.sine %arg0 : tensor<4xf32>", "stablehlo.sine %arg0 : tensor<4xf32>"
                         f"\n    %c = stablehlo.constant dense<{k}.0> : tensor<4xf32>")
    _native.compile(text)
    _native.compile(text)
    # the compile service's records (its logger is named after its Rust module)
    ours = [r for r in caplog.records if r.name.startswith("hlobridge.") and "fingerprint=" in r.getMessage()]
    compiled = [r for r in ours if r.getMessage().startswith("compiled program")]
    hits = [r for r in ours if r.getMessage().startswith("compile cache hit")]
    assert len(compiled) == 1 and compiled[0].levelno == logging.INFO
    assert "fingerprint=" in compiled[0].getMessage()
    assert len(hits) == 1 and hits[0].levelno == logging.DEBUG


def test_public_names_come_from_one_table_and_the_stub_names_them_all():
    """``hlobridge.__all__`` is the table's keys; every name resolves; the
    type stub ``__init__.pyi`` imports exactly those names."""
    import ast
    import pathlib

    from hlobridge import errors

    assert hlobridge.__all__ == sorted(hlobridge._PUBLIC)
    for name in hlobridge.__all__:
        assert getattr(hlobridge, name) is not None, name
    stub = pathlib.Path(hlobridge.__file__).with_name("__init__.pyi")
    named: set[str] = set()
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    assert node.module == "hlobridge._src.errors"
                    named |= set(errors.__all__)
                else:
                    assert alias.asname == alias.name, alias.name  # an explicit re-export
                    named.add(alias.name)
    assert named == set(hlobridge.__all__)


def test_public_modules_keep_their_paths():
    import importlib

    for mod in ("devices", "distributed", "dynamo", "errors", "export", "ops", "optim", "pallas",
                "serve", "spmd", "tpu_adapter"):
        m = importlib.import_module(f"hlobridge.{mod}")
        assert getattr(hlobridge, mod) is m
        for name in getattr(m, "__all__", ()):
            assert hasattr(m, name), (mod, name)
