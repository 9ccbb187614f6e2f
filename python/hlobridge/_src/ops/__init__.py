"""The implementation of :mod:`hlobridge.ops` (fused operators)."""
