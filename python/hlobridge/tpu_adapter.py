# Public module: the implementation and its documentation are in
# hlobridge/_src/tpu_adapter.py; this module re-exports its public names.
from hlobridge._src.tpu_adapter import *  # noqa: F403
from hlobridge._src.tpu_adapter import __all__, __doc__  # noqa: F401
