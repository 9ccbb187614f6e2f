"""Every hlobridge exception pickles and unpickles to the same class, message
and attributes: in this process, across a ``spawn`` process, and through
``multiprocessing.Pool`` workers started with ``fork`` and ``spawn`` (a worker's
error reaches the parent as its class instead of being lost).

The classes live in :mod:`hlobridge.errors` (defined in Python; the native
module raises the same classes), so pickle finds them by import path.

Run:  .venv/bin/python -m pytest -W error tests/python/test_errors_pickle.py -q
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import hlobridge as hb
from hlobridge import _native, errors

TIMEOUT = 120
BAD = "module { func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { return %nope : tensor<4xf32> } }"
UNKNOWN_CALL = ("module { func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                "  %0 = stablehlo.custom_call @hlobridge_no_such_target(%a) : (tensor<4xf32>) -> tensor<4xf32>\n"
                "  return %0 : tensor<4xf32> } }")


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` with its attributes set as hlobridge sets them."""
    if cls is errors.PallasLoweringError:
        return cls("kern", "tpu", "no Mosaic here")
    if cls is errors.ServeError:
        return cls("UNAVAILABLE", "the server is draining")
    e = cls(f"{cls.__name__}: something went wrong")
    if issubclass(cls, errors.PjrtError):
        e.function, e.code = "PJRT_Client_Compile", "InvalidArgument"
    e.add_note("a note from hlobridge")
    return e


def _same(a: BaseException, b: BaseException) -> None:
    assert type(a) is type(b), (type(a), type(b))
    assert str(a) == str(b) and a.args == b.args
    assert a.__dict__ == b.__dict__


ALL = [getattr(errors, n) for n in errors.__all__]


def test_every_public_error_is_a_bridge_error_importable_by_its_path():
    assert len(ALL) >= 30
    for cls in ALL:
        assert issubclass(cls, hb.BridgeError), cls
        assert cls.__module__ == "hlobridge.errors" and getattr(hb, cls.__name__) is cls
    # the native module raises and exposes the same classes
    for name in ("BridgeError", "ForkError", "PjrtError", "FileError", "ArgumentError"):
        assert getattr(_native, name) is getattr(errors, name)
    assert issubclass(errors.FileError, OSError)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_round_trip(cls):
    e = _instance(cls)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        _same(e, pickle.loads(pickle.dumps(e, protocol=protocol)))


def test_errors_raised_by_rust_round_trip_with_attributes():
    with pytest.raises(hb.ParseError) as parse:
        hb.format_module(BAD, file="m.mlir")
    with pytest.raises(hb.CompileError) as compile_:
        _native.compile(UNKNOWN_CALL)
    assert compile_.value.function == "PJRT_Client_Compile" and compile_.value.code
    exe, _ = _native.compile("module { func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> "
                             "{ return %a : tensor<4xf32> } }")
    with pytest.raises(hb.ArgumentError) as arg:
        _native.execute(exe, [], [], [], [])
    for e in (parse.value, compile_.value, arg.value):
        _same(e, pickle.loads(pickle.dumps(e)))


def test_subclass_outside_the_errors_module_round_trips():
    """A class with its own constructor (as ``hlobridge.serve.ServeError``)
    is rebuilt without calling it."""
    from hlobridge.serve import ServeError

    e = ServeError("UNAVAILABLE", "the server is draining")
    _same(e, pickle.loads(pickle.dumps(e)))
    assert e.code == "UNAVAILABLE"


# -- across processes ---------------------------------------------------------


def test_unpickled_in_a_fresh_spawned_interpreter(tmp_path):
    """Pickles made here load in a new interpreter (nothing imported yet) as
    the same classes, with their messages and attributes."""
    blob = tmp_path / "errors.pkl"
    blob.write_bytes(pickle.dumps([_instance(c) for c in ALL]))
    code = textwrap.dedent(f"""
        import pickle, sys
        errs = pickle.loads(open({str(blob)!r}, "rb").read())
        import hlobridge.errors as E
        for e in errs:
            assert type(e) is getattr(E, type(e).__name__), type(e)
            assert isinstance(e, E.BridgeError)
        pj = [e for e in errs if isinstance(e, E.PjrtError)]
        assert pj and all(e.function == "PJRT_Client_Compile" for e in pj)
        print("ok", len(errs))
    """)
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True,
                         timeout=TIMEOUT, env=dict(os.environ, PJRT_DEVICE="CPU"))
    assert out.returncode == 0 and out.stdout.strip() == f"ok {len(ALL)}", out.stderr[-3000:]


def _raise_in_worker(kind: str) -> None:
    """Runs in a Pool worker: raise an error from Rust or from Python."""
    if kind == "parse":
        hb.format_module(BAD)
    if kind == "compile":
        _native.compile(UNKNOWN_CALL)
    if kind == "pallas":
        raise errors.PallasLoweringError("kern", "cuda", "no GPU")
    raise AssertionError(kind)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_worker_errors_reach_the_parent_as_their_class(method):
    """The parent has a PJRT client (it compiled something): a ``fork``
    worker's compile raises ForkError, a ``spawn`` worker's the CompileError;
    parse errors and Python-side errors need no client."""
    import warnings

    _native.compile("module { func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> "
                    "{ return %a : tensor<2xf32> } }")
    want = {"parse": hb.ParseError, "pallas": hb.PallasLoweringError,
            "compile": hb.ForkError if method == "fork" else hb.CompileError}
    ctx = multiprocessing.get_context(method)
    with warnings.catch_warnings():
        # JAX warns at os.fork() in a multithreaded process (not ours to fix).
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        with ctx.Pool(2) as pool:
            pending = {k: pool.apply_async(_raise_in_worker, (k,)) for k in want}
            for kind, res in pending.items():
                with pytest.raises(want[kind]) as info:
                    res.get(timeout=TIMEOUT)
                assert type(info.value) is want[kind]
                if want[kind] is hb.CompileError:
                    assert info.value.function == "PJRT_Client_Compile"
                if want[kind] is hb.ForkError:
                    assert "'spawn'" in str(info.value)
                if kind == "pallas":
                    assert (info.value.kernel, info.value.target) == ("kern", "cuda")
