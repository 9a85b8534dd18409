"""Kernels planted by the isolation tests: never in the catalogue."""
