"""Shared by the ``call_jax`` tests that compare against JAX: the run's seed,
the tolerance, an autouse fixture that reseeds torch and resets Dynamo
before each test, and JAX's result on the same inputs as the reference.

``SEED`` is fresh random per process (``HLOBRIDGE_TEST_SEED`` replays one)
and is printed in every failure message from :func:`close`. Both sides run
float32 on XLA CPU, so :data:`TOL` is rtol=1e-5, atol=1e-6.

A test module takes the fixture by importing it:
``from jax_compare import fresh  # noqa: F401``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import torch

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(autouse=True)
def fresh() -> None:
    """Reseeds torch with :data:`SEED` and resets Dynamo's caches."""
    torch.manual_seed(SEED)
    torch._dynamo.reset()


def jax_ref(f: Callable[..., Any], *xs: torch.Tensor) -> torch.Tensor:
    """``f`` run by JAX on the tensors' values, as a torch tensor."""
    out = f(*[jnp.asarray(x.numpy()) for x in xs])
    return torch.from_numpy(np.array(out))


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Asserts ``got`` matches ``want`` within :data:`TOL`; the message names the seed."""
    torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"seed={SEED} {what}: {m}")
