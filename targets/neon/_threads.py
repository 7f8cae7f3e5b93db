"""Run a small kernel call on the calling thread only.

A Numba parallel region costs a fork/join of the thread team (~5-20 us on an idle machine) and,
when the cores are oversubscribed, a preempted worker stalls the whole region for a scheduler
tick (milliseconds: measured on the shared 2-core test host). Below a few tens of microseconds
of work, one thread is faster and immune to that.
"""
from __future__ import annotations

from contextlib import contextmanager

import numba
from numba.np.ufunc import parallel as _par

SMALL_ELEMENTS = 1 << 15     # memory-bound kernels: ~30 us of single-thread work
# norms touch each element ~3 times: a parallel region only pays above this when the pool is
# passive (edgeops.ort.register's default), whose futex wake-up costs ~70 us here: four
# LayerNorm+GELU kernels on 128x768 at 2 threads took 0.32 ms parallel vs 0.22 ms serial, four
# GroupNorm+SiLU on 64x56x56 0.61-0.66 ms vs 0.39 ms (ORT at 2 threads: 0.26 and 0.67-0.89 ms)
SMALL_NORM_ELEMENTS = 1 << 18
SMALL_FLOPS = 4e6            # GEMM-like kernels: ~40 us at ~100 GFLOP/s


def num_threads() -> int:
    """``numba.get_num_threads()`` without its per-call cost: the public function takes a
    multiprocessing lock to check that the pool is up (~3 us a call, measured; kernel wrappers
    ask 2-3 times per call, a sixth of a 70 us depthwise conv). Once the pool is up, read the
    thread-local count directly (a private Numba name: fall back to the public call if it goes)."""
    if getattr(_par, "_is_initialized", False):
        get = getattr(_par, "_get_num_threads", None)
        if get is not None:
            return get()
    return numba.get_num_threads()


@contextmanager
def serial_if(small: bool):
    if not small or num_threads() == 1:
        yield
        return
    before = num_threads()
    numba.set_num_threads(1)  # thread-local in Numba: other threads' calls are unaffected
    try:
        yield
    finally:
        numba.set_num_threads(before)
