"""Where the CUDA kernels run: a real GPU, Numba's CUDA simulator, or nowhere (fallback).

``numba.cuda`` is imported lazily, on the first kernel call, so importing ``edgeops.targets``
never touches a CUDA driver and a test process can still choose the simulator
(``NUMBA_ENABLE_CUDASIM=1`` only takes effect if set before ``numba.cuda`` is first imported).

With no GPU (and not in the simulator) every registered cuda kernel runs the ``neon`` kernel
(or the numpy reference when neon has none) instead: one :class:`~edgeops.errors.EdgeOpsWarning`
per process, and every such call counted in :func:`fallback_count` for ``edgeops doctor``.
"""
from __future__ import annotations

import os
import threading
import warnings

import numpy as np

from edgeops.env import switch
from edgeops.errors import EdgeOpsWarning

_lock = threading.Lock()
_fallbacks = 0
_warned = False
_present: bool | None = None
_why_absent = ""


def simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def cuda():
    """The ``numba.cuda`` module (imported on first use)."""
    from numba import cuda as _cuda
    return _cuda


def gpu_present() -> bool:
    """True when the kernels can run here: a usable NVIDIA GPU, or Numba's CUDA simulator.

    ``EDGEOPS_CUDA_DISABLE=1`` forces the fallback (for tests and for a broken driver)."""
    global _present, _why_absent
    if switch("EDGEOPS_CUDA_DISABLE", False):
        _why_absent = "EDGEOPS_CUDA_DISABLE is set"
        return False
    if _present is None:
        try:
            _present = bool(cuda().is_available())
            if not _present:
                _why_absent = "numba.cuda.is_available() is False (no NVIDIA GPU or driver)"
        except Exception as e:  # noqa: BLE001 - a missing/broken CUDA stack means "no GPU"
            _present, _why_absent = False, f"numba.cuda cannot be used: {type(e).__name__}: {e}"
    return _present


def why_absent() -> str:
    gpu_present()
    return _why_absent


def fallback_count() -> int:
    """How many cuda-kernel calls ran on the CPU fallback in this process."""
    return _fallbacks


def reset_fallbacks() -> None:
    """For tests."""
    global _fallbacks, _warned
    with _lock:
        _fallbacks, _warned = 0, False


def note_fallback(kernel_name: str, used: str) -> None:
    global _fallbacks, _warned
    with _lock:
        _fallbacks += 1
        first = not _warned
        _warned = True
    if first:
        warnings.warn(
            f"edgeops: no CUDA device ({why_absent()}); cuda kernels run on the CPU instead "
            f"(first: {kernel_name} -> {used}). Results are correct but slow; install the NVIDIA "
            f"driver / numba-cuda (pip install 'edgeops[cuda]') or compile for a CPU board. "
            f"Further fallbacks are counted, not warned (edgeops doctor shows the count).",
            EdgeOpsWarning, stacklevel=3)


# ---- host <-> device -------------------------------------------------------------------------

def f32(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def to_device(x):
    """Host array -> device (contiguous float32). The ORT bridge hands host arrays, so every
    kernel call pays this copy; the simulator's Jetson prediction counts it (simulator.gpu)."""
    return cuda().to_device(f32(x))


def empty(shape):
    return cuda().device_array(shape, dtype=np.float32)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
