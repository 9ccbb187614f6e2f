"""``kthvalue`` with eager CPU's index among tied values, and
``triu_indices``/``tril_indices`` (``_src/dynamo/select_lowerings.py``,
``jax_lowerings.py``; docs/jax_lowerings.md), through
``torch.compile(backend="hlobridge", fullgraph=True)`` against eager torch on
fresh seeded inputs. Indices are compared exactly: among tied values eager's
quickselect picks one index, and the lowering must pick the same one
(torch_xla's sort-based lowering picked the first in sorted order, which
``test_kthvalue_ties_are_not_first_in_sorted_order`` shows differs)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hlobridge  # noqa: F401  (the backend)
from hlobridge._src.dynamo.select_lowerings import EXACT_MAX_N


def _compiled(fn: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(fn, backend="hlobridge", fullgraph=True, dynamic=False)


def _tied(g: torch.Generator, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """Values from a few distinct levels (many ties); floats get NaN too."""
    n = shape[-1]
    x = torch.randint(-3, max(3, n // 3), shape, generator=g)
    if dtype.is_floating_point:
        x = x.to(dtype)
        x[torch.rand(shape, generator=g) < 0.1] = float("nan")
        return x
    return x.clamp(min=0).to(dtype) if dtype == torch.uint8 else x.to(dtype)


CASES = [
    (torch.int32, (4, 9), 3, -1, False),
    (torch.int64, (3, 17), 9, 1, True),
    (torch.int8, (2, 5, 6), 2, 1, False),
    (torch.uint8, (6, 13), 13, -1, False),
    (torch.int16, (5, 2), 1, 0, True),
    (torch.float32, (4, 31), 16, -1, False),
    (torch.float64, (2, 3, 40), 40, 2, True),
    (torch.bfloat16, (8, 12), 6, -1, False),
]


@pytest.mark.parametrize("dtype,shape,k,dim,keepdim", CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-k{c[2]}" for c in CASES])
def test_kthvalue_matches_eager_values_and_indices(dtype: torch.dtype, shape: tuple[int, ...],
                                                   k: int, dim: int, keepdim: bool) -> None:
    g = torch.Generator().manual_seed(hash((str(dtype), shape, k)) % 2**31)
    fn = _compiled(lambda x: torch.kthvalue(x, k, dim, keepdim))
    for _ in range(3):
        x = _tied(g, dtype, shape)
        want_v, want_i = torch.kthvalue(x, k, dim, keepdim)
        got_v, got_i = fn(x)
        assert got_i.dtype == torch.int64 and got_i.shape == want_i.shape
        assert torch.equal(got_i, want_i), (x, got_i, want_i)
        torch.testing.assert_close(got_v, want_v, rtol=0, atol=0, equal_nan=True)


def test_kthvalue_ties_are_not_first_in_sorted_order() -> None:
    """The cases above would not tell the two orders apart if eager's index
    were always the first tied one in sorted order: on these inputs it is not."""
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 3, (64, 9), generator=g)
    _, eager_i = torch.kthvalue(x, 5, -1)
    order = torch.sort(x, stable=True, dim=-1).indices[:, 4]
    assert (eager_i != order).any()
    got_i = _compiled(lambda x: torch.kthvalue(x, 5, -1))(x)[1]
    assert torch.equal(got_i, eager_i)


def test_kthvalue_gradient_goes_to_eager_index() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 4, (6, 11), generator=g).double().requires_grad_()
    fn = _compiled(lambda x: torch.kthvalue(x * 2.0, 4, 1)[0].sum())
    fn(x).backward()
    got = x.grad
    x2 = x.detach().clone().requires_grad_()
    torch.kthvalue(x2 * 2.0, 4, 1)[0].sum().backward()
    assert torch.equal(got, x2.grad)


def test_kthvalue_long_slices_keep_torch_xla_lowering() -> None:
    """Past EXACT_MAX_N: the values are eager's and the index points at an
    equal value (the index among ties may differ)."""
    g = torch.Generator().manual_seed(11)
    x = torch.randint(0, 50, (2, EXACT_MAX_N + 1), generator=g).float()
    got_v, got_i = _compiled(lambda x: torch.kthvalue(x, 300, -1))(x)
    want_v, _ = torch.kthvalue(x, 300, -1)
    assert torch.equal(got_v, want_v)
    assert torch.equal(torch.gather(x, -1, got_i[:, None])[:, 0], want_v)


@pytest.mark.parametrize("name", ["triu_indices", "tril_indices"])
@pytest.mark.parametrize("row,col,offset", [(4, 4, 0), (5, 3, 1), (3, 7, -2), (6, 6, 9),
                                            (9, 2, -20), (0, 4, 0), (17, 33, 5)])
def test_tri_indices_match_eager(name: str, row: int, col: int, offset: int) -> None:
    op = getattr(torch, name)
    for dtype in (torch.int64, torch.int32):
        fn = _compiled(lambda x: (op(row, col, offset, dtype=dtype), x + 1))
        got = fn(torch.zeros(2))[0]
        want = op(row, col, offset, dtype=dtype)
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
