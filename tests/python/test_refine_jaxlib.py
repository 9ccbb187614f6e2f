"""Differential test of hlobridge's shape refinement against jaxlib's.

For every module of ``stablehlo-testdata/dynamic`` (prepared by
``refine_corpus.prepare``: every ``?`` and dimension variable = 3), both
refiners specialise it: ``hlobridge._native.refine_shapes`` from the
dynamic signature and the shapes, jaxlib's ``refine_polymorphic_shapes``
from a static ``@main``. Where jaxlib refines a module:

- ours refines it too, and both results are canonically equal: the same
  MLIR text after one normalization (``refine_corpus.canonical``: jaxlib's
  pipeline, canonicalize/cse/symbol-dce, constants written into their uses);
- both compiled modules, run through the CPU plugin on the same fresh random
  inputs, give the same outputs (exactly for integers and booleans; floats
  within 1e-6 relative, 1e-2 for 16-bit floats: the two texts compile
  separately).

Modules jaxlib cannot refine are listed in ``JAXLIB_CANNOT`` with jaxlib's
reason (ours must reject them too, with a named error). The counts are in
``docs/conformance.md``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hlobridge.errors as hb_errors
import refine_corpus as rc
from hlobridge import _native

# jaxlib's refinement rejects these corpus modules (its reason, abridged).
JAXLIB_CANNOT = {
    "conv_general_dilated_1d_stride_2_even_dynamic": "window_strides has 2 entries for 1 spatial dim",
    "conv_general_dilated_1d_stride_2_odd_dynamic": "window_strides has 2 entries for 1 spatial dim",
}

_NP = {
    "f16": np.float16, "f32": np.float32, "f64": np.float64,
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64,
    "i1": np.bool_, "complex<f32>": np.complex64, "complex<f64>": np.complex128,
}


def _random(elem: str, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    if elem == "bf16":  # kept as float32 here, rounded to bf16 by _run
        return rng.standard_normal(shape).astype(np.float32)
    dt = np.dtype(_NP[elem])
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt.kind in "iu":
        lo = 0 if dt.kind == "u" else -4
        return rng.integers(lo, 5, shape).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def _run(text: str, inputs: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
    exe, _ = _native.compile(text)
    owners, ptrs, shapes, codes = [], [], [], []
    for elem, arr in inputs:
        if elem == "bf16":
            t = torch.from_numpy(np.array(arr, order="C")).to(torch.bfloat16).contiguous()
            owners.append(t)
            ptrs.append(t.data_ptr())
        else:
            arr = np.array(arr, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
            # An empty input still needs a valid pointer (no bytes are read).
            backing = arr if arr.size else np.zeros(1, arr.dtype)
            owners.append(backing)
            ptrs.append(backing.ctypes.data)
        shapes.append(list(arr.shape))
        codes.append(_native.ELEMENT_TYPES[elem])
    caps = _native.execute(exe, ptrs, shapes, codes, owners)[0]
    outs = []
    for c in caps:
        t = torch.from_dlpack(c)
        if t.dtype == torch.bfloat16:
            t = t.float()
        outs.append(t.numpy().copy())
    return outs


def _close(a: np.ndarray, b: np.ndarray, loose: bool) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    if a.dtype.kind in "fc":
        tol = 1e-2 if loose or a.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(a, b)


CASES = rc.cases()


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_refinement_matches_jaxlib(path):
    case = rc.prepare(path)
    if path.stem in JAXLIB_CANNOT:
        with pytest.raises(Exception):
            rc.jaxlib_refine(case)
        with pytest.raises((hb_errors.ShapeRefinementError, hb_errors.ShapeAssertionError)):
            _native.refine_shapes(case.text, case.shapes)
        return
    ref = rc.jaxlib_refine(case)
    ours = _native.refine_shapes(case.text, case.shapes)
    assert rc.canonical(ours) == rc.canonical(ref)

    rng = np.random.default_rng(abs(hash(path.stem)) % 2**32)
    inputs = [(rc.element_type(t), _random(rc.element_type(t), s, rng))
              for t, s in zip(case.types, case.shapes)]
    loose = any(e in ("bf16", "f16") for e, _ in inputs) or "bf16" in ours or "f16" in ours
    got, want = _run(ours, inputs), _run(ref, inputs)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        _close(a, b, loose)


def test_corpus_is_there():
    assert len(CASES) == 388, rc.CORPUS


def test_bad_shapes_raise_named_errors():
    case = rc.prepare(rc.CORPUS / "add_dynamic.mlir")
    with pytest.raises(hb_errors.ShapeRefinementError, match="dimension 1 is 4"):
        _native.refine_shapes(case.text, [[3, 5], [2, 3, 4]])
    with pytest.raises(hb_errors.ShapeRefinementError, match="operands disagree in dimension 1: 3 vs 5"):
        _native.refine_shapes(case.text, [[3, 4], [2, 5, 4]])
    with pytest.raises(hb_errors.ShapeRefinementError, match="2 arguments but 1"):
        _native.refine_shapes(case.text, [[3, 4]])
    with pytest.raises(hb_errors.ParseError):
        _native.refine_shapes(case.text[:200], [[3, 4], [2, 3, 4]])


ASSERTING = """
module {
  func.func public @main(%x: tensor<?xf32>) -> tensor<?xf32> {
    %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
    %two = stablehlo.constant dense<2> : tensor<i32>
    %ok = stablehlo.compare GE, %n, %two, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%ok, %n) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 2 for dimension variable 'b'. Obtained dimension variables: 'b' = {0}.", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
    %y = stablehlo.sine %x : tensor<?xf32>
    return %y : tensor<?xf32>
  }
}
"""


def test_shape_assertion_error_pickles_with_dim():
    import pickle

    with pytest.raises(hb_errors.ShapeAssertionError, match="Expected value >= 2") as ei:
        _native.refine_shapes(ASSERTING, [[1]])
    assert ei.value.dim == "b"
    assert "'b' = 1" in str(ei.value)
    again = pickle.loads(pickle.dumps(ei.value))
    assert type(again) is hb_errors.ShapeAssertionError and again.dim == "b"
    assert "tensor<5xf32>" in _native.refine_shapes(ASSERTING, [[5]])
