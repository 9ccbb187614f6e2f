# Type stub of hlobridge/__init__.py, whose public names are imported lazily
# from one table (_PUBLIC); this stub names the same things for type checkers.
# tests/python/test_package.py keeps the two equal.

from hlobridge._native import (
    Runtime as Runtime,
    __version__ as __version__,
    format_module as format_module,
    runtime as runtime,
)
from hlobridge._src.errors import *  # every exception class
from hlobridge._src.receipt import Receipt as Receipt, Segment as Segment, last_receipt as last_receipt
from hlobridge._src.jax_bridge import (
    call_jax as call_jax,
    clear_cache as clear_cache,
    reset_stats as reset_stats,
    stats as stats,
)
from hlobridge._src.interop import jax_to_pt as jax_to_pt, pt_to_jax as pt_to_jax
from hlobridge._src.pallas import PallasSegment as PallasSegment, trace_pallas as trace_pallas
from hlobridge._src.stitching import stitch_program as stitch_program
from hlobridge._src.compile_for import TargetExecutable as TargetExecutable, compile_for as compile_for
from hlobridge._src.train_step import TrainStep as TrainStep, compile_train_step as compile_train_step
from hlobridge._src.viz import viz as viz
from hlobridge._src.call_torch import call_torch as call_torch, torch_module as torch_module
from hlobridge import (
    devices as devices,
    distributed as distributed,
    dynamo as dynamo,
    errors as errors,
    export as export,
    ops as ops,
    optim as optim,
    pallas as pallas,
    serve as serve,
    spmd as spmd,
    tpu_adapter as tpu_adapter,
)

__all__: list[str]
