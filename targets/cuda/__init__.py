"""Jetson CUDA target: numba.cuda kernels (sm_87), naive and shared-memory tiled.

``register`` puts every kernel in ``edgeops.registry`` under target "cuda" without importing
``numba.cuda``; the kernel modules (``eltwise``, ``gemm``, ``conv``, ``norms``) load on the first
call. ``device`` says whether a GPU (or Numba's CUDA simulator) is present and runs the CPU
fallback otherwise (:func:`fallback_count`); ``launch`` picks tile configurations from the tiling;
``ptx`` emits Jetson PTX (``compile_ptx(..., cc=(8, 7))``); ``accepts_tiling`` tells
``edgeops.lower`` which kernels read the planner's tiling.
"""
from edgeops.targets.cuda import register  # noqa: F401  (registers the "cuda" kernels)
from edgeops.targets.cuda.device import fallback_count, gpu_present  # noqa: F401
from edgeops.targets.cuda.launch import accepts_tiling  # noqa: F401  (edgeops.lower's hook)

__all__ = ["accepts_tiling", "fallback_count", "gpu_present"]
