# Public module: the implementation and its documentation are in
# hlobridge/_src/devices.py; this module re-exports its public names.
from hlobridge._src.devices import *  # noqa: F403
from hlobridge._src.devices import __all__, __doc__  # noqa: F401
