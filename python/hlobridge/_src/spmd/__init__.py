"""The implementation of :mod:`hlobridge.spmd` (SPMD across processes on
JAX's distributed runtime)."""
