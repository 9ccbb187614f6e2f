"""Small Pallas kernels for the tests: an elementwise add, a tiled matmul
(grid over output tiles, K loop inside) and a row softmax (grid over row
blocks). Block shapes respect both Mosaic TPU ((8, 128) tiles) and Triton
(power-of-two blocks), so each lowers for cpu (interpret), tpu and cuda."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# shapes used by the tests
ADD_SHAPE = (16, 128)
MM_M, MM_K, MM_N = 64, 256, 256
MM_BM, MM_BN, MM_BK = 32, 128, 128
SM_SHAPE = (32, 128)
SM_BLOCK = 8


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def pallas_add(x: jax.Array, y: jax.Array) -> jax.Array:
    """x + y in one Pallas program."""
    return pl.pallas_call(_add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), name="add")(x, y)


def _matmul_kernel(x_ref, y_ref, o_ref):
    def step(k, acc):
        xs = x_ref[:, pl.ds(k * MM_BK, MM_BK)]
        ys = y_ref[pl.ds(k * MM_BK, MM_BK), :]
        return acc + jnp.dot(xs, ys, preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, x_ref.shape[1] // MM_BK, step, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def pallas_matmul(x: jax.Array, y: jax.Array) -> jax.Array:
    """x @ y, tiled (MM_BM x MM_BN output tiles, MM_BK-deep K steps)."""
    m, k = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _matmul_kernel, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype), grid=(m // MM_BM, n // MM_BN),
        in_specs=[pl.BlockSpec((MM_BM, k), lambda i, j: (i, 0)), pl.BlockSpec((k, MM_BN), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((MM_BM, MM_BN), lambda i, j: (i, j)), name="tiled_matmul")(x, y)


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=1, keepdims=True)


def pallas_softmax(x: jax.Array) -> jax.Array:
    """Softmax over the last axis, SM_BLOCK rows per program."""
    r, c = x.shape
    return pl.pallas_call(
        _softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(r // SM_BLOCK,),
        in_specs=[pl.BlockSpec((SM_BLOCK, c), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((SM_BLOCK, c), lambda i: (i, 0)), name="row_softmax")(x)


KERNELS = {
    "add": (pallas_add, [ADD_SHAPE, ADD_SHAPE]),
    "matmul": (pallas_matmul, [(MM_M, MM_K), (MM_K, MM_N)]),
    "softmax": (pallas_softmax, [SM_SHAPE]),
}
"""name -> (function, input shapes); every input is float32."""
