"""hlobridge's internals (as ``jax._src``): no stability promise. The public
modules (``hlobridge``, ``hlobridge.devices``, ``hlobridge.errors``, ...)
re-export what users may rely on."""
