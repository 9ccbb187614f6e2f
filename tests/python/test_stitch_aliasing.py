"""``hlobridge._native.stitch(..., aliases=...)``: the input-output pairs
reach the Rust stitcher, which writes ``tf.aliasing_output`` on ``@main``'s
argument; a pair that does not fit raises :class:`~hlobridge.errors.StitchError`
(the process keeps running). The emitted text itself is snapshot-tested in
``bridge/core/tests/stitch_aliasing.rs``; in-place updates against eager in
``test_inplace_mutations.py``."""

from __future__ import annotations

import pytest

from hlobridge import _native
from hlobridge.errors import StitchError

UPDATE = """module @jit_update {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>) {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    %1 = stablehlo.convert %arg1 : (tensor<4xf32>) -> tensor<4xf16>
    return %0, %1 : tensor<4xf32>, tensor<4xf16>
  }
}
"""


def _stitch(aliases: list[tuple[int, int]], donate: bool = False) -> str:
    inputs = [("cache", "tensor<4xf32>", donate), ("x", "tensor<4xf32>", False)]
    segs = [("update", "jax", UPDATE, "main", ["cache", "x"], ["new", "half"])]
    text, _report = _native.stitch(inputs, segs, ["half", "new"], aliases=aliases)
    return text


def _main(text: str) -> str:
    return next(line for line in text.splitlines() if "@main(" in line)


def test_alias_is_written_on_main() -> None:
    sig = _main(_stitch([(0, 1)]))
    assert "%cache: tensor<4xf32> {tf.aliasing_output = 1 : i32}" in sig, sig
    assert sig.count("tf.aliasing_output") == 1, sig


def test_no_alias_by_default() -> None:
    assert "tf.aliasing_output" not in _stitch([])


@pytest.mark.parametrize(("aliases", "donate", "match"), [
    ([(2, 0)], False, "the program has 2 inputs"),
    ([(0, 2)], False, "the program has 2 outputs"),
    ([(1, 0)], False, "input 'x' is tensor<4xf32> but output 0 is tensor<4xf16>"),
    ([(0, 1), (1, 1)], False, "output 1 is already aliased"),
    ([(0, 1), (0, 0)], False, "input 'cache' is already aliased"),
    ([(0, 1)], True, "input 'cache' is already donated"),
])
def test_bad_pairs_raise_stitch_error(aliases: list[tuple[int, int]], donate: bool,
                                      match: str) -> None:
    with pytest.raises(StitchError, match=match):
        _stitch(aliases, donate)
    # The process keeps going: a good request still stitches.
    assert "tf.aliasing_output = 1" in _stitch([(0, 1)])
