"""The dtype tables (:mod:`hlobridge._src.dtypes`) agree with each other and
with the native module's element types (``python/src/dtype.rs``): every
forward table and its reverse lookup round-trip, and a JAX dtype torch
cannot receive is a named :class:`~hlobridge.errors.DtypeError`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hlobridge import _native
from hlobridge._src.dtypes import (
    BY_CODE,
    BY_MLIR,
    CODES,
    DTYPES,
    require_torch_dtype,
    torch_dtype_of,
)
from hlobridge.errors import DtypeError


@pytest.mark.parametrize("dt", list(DTYPES), ids=str)
def test_tables_round_trip(dt: torch.dtype) -> None:
    mlir, jax_dtype = DTYPES[dt]
    assert _native.ELEMENT_TYPES[mlir] == CODES[dt]
    assert BY_CODE[CODES[dt]] is dt
    assert BY_MLIR[mlir] is dt
    assert torch_dtype_of(jax_dtype) is dt
    assert require_torch_dtype(jax_dtype, "test") is dt
    # torch agrees on the element width.
    assert np.dtype(jax_dtype).itemsize == torch.empty((), dtype=dt).element_size()


def test_reverse_tables_are_one_to_one() -> None:
    assert len(BY_CODE) == len(BY_MLIR) == len(DTYPES)


def test_unreceivable_dtype_is_a_named_error() -> None:
    assert torch_dtype_of(np.dtype("U1")) is None
    with pytest.raises(DtypeError, match="where: the JAX function returns dtype <U1"):
        require_torch_dtype(np.dtype("U1"), "where")
