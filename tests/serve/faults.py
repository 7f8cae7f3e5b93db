"""Runs inside serve workers when EDGEOPS_SERVE_TEST_HOOK names this file (tests only): the
neon MatMul kernel misbehaves when its input holds a trigger value (see conftest.py)."""
import ctypes
import dataclasses
import os
import time

import numpy as np

from edgeops import registry
from edgeops.pipeline.targets import load_targets

KERNEL = "neon.matmul_packed"
load_targets()      # the hook runs before the worker loads its package
_real = registry.kernel_by_name(KERNEL)


def _faulty(inputs, attrs, **kw):
    x = inputs[0]
    if np.any(x == 7777.0):
        os._exit(13)
    if np.any(x == 7778.0):
        ctypes.string_at(0)            # segmentation fault
    if np.any(x == 8888.0):
        time.sleep(3600)
    if np.any(x == 9999.0):
        raise ValueError("injected kernel failure")
    if np.any(x == 5555.0):
        time.sleep(1.5)
    out = _real.fn(inputs, attrs, **kw)
    if np.any(x == 6666.0):
        out = np.full_like(np.asarray(out[0] if isinstance(out, (list, tuple)) else out), np.nan)
    return out


_faulty.__signature__ = __import__("inspect").signature(_real.fn)
registry._BY_NAME[KERNEL] = dataclasses.replace(_real, fn=_faulty, native=None)  # every call sees it
