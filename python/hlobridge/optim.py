# Public module: the implementation and its documentation are in
# hlobridge/_src/optim.py; this module re-exports its public names.
from hlobridge._src.optim import *  # noqa: F403
from hlobridge._src.optim import __all__, __doc__  # noqa: F401
