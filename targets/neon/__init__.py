"""NEON (Numba) CPU kernels."""
