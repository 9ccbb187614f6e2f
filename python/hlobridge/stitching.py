# Not public: kept only because hlobridge/export.py and hlobridge/serve.py still
# import it from this path. Delete when they move under hlobridge/_src.
from hlobridge._src.stitching import StitchedProgram  # noqa: F401
