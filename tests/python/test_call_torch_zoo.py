"""Every zoo model's forward through ``hb.torch_module`` inside ``jax.jit``,
against eager torch (``docs/call_torch.md``).

Each model is a fresh random tiny instance on a fresh random batch (no
fixed seed), in eval mode; BatchNorm networks get real running statistics
first (:func:`model_zoo.spec.calibrate_batchnorm`, as the zoo's own tests
do). Tolerance: the zoo's inference tolerance, rtol=1e-4/atol=1e-4 against
eager float32 (``tests/python/test_model_zoo.py``); measured errors are
below 2e-6.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from model_zoo import MODELS, ZooModel
from model_zoo.spec import calibrate_batchnorm

INFER_TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", MODELS, ids=[m.name for m in MODELS])
def test_zoo_forward_inside_jit(spec: ZooModel) -> None:
    model = spec.build()
    calibrate_batchnorm(spec, model)
    model.eval()
    xs = spec.inputs()
    apply, params = hb.torch_module(model, forward=spec.logits)
    got = jax.jit(apply)(params, *[jnp.asarray(x.numpy()) for x in xs])
    with torch.no_grad():
        want = spec.logits(model, *xs)
    torch.testing.assert_close(torch.from_numpy(np.array(got)), want, **INFER_TOL)
