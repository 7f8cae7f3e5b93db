"""Activation codes shared by every epilogue, and the grid-stride elementwise chain kernel.

A chain is a short list of (code, lo, hi): the kernel reads each element once, applies the whole
chain in registers and writes once, so Relu -> Clip -> ... costs one pass over DRAM.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from edgeops.targets.cuda import device as dev

# code -> (name, parameters lo/hi meaning)
NONE, RELU, CLIP, SILU, HARDSWISH, SIGMOID, TANH, GELU, GELU_TANH, LEAKY = range(10)
CODES = {"none": NONE, "relu": RELU, "clip": CLIP, "relu6": CLIP, "silu": SILU,
         "hardswish": HARDSWISH, "sigmoid": SIGMOID, "tanh": TANH, "gelu": GELU,
         "gelu_tanh": GELU_TANH, "leaky_relu": LEAKY}


def activation(name: str, lo: float | None = None,
               hi: float | None = None) -> tuple[int, float, float]:
    """(code, lo, hi) of an activation: relu6 is clip 0..6; leaky_relu takes alpha as lo."""
    if name not in CODES:
        raise ValueError(f"unknown activation {name!r}; known: {sorted(CODES)}")
    if name == "relu6":
        return CLIP, 0.0, 6.0
    lo = -np.inf if lo is None else lo
    hi = np.inf if hi is None else hi
    return CODES[name], float(lo), float(hi)


@cuda.jit(device=True, inline=True)
def act(v, code, lo, hi):
    if code == RELU:
        return max(v, 0.0)
    if code == CLIP:
        return min(max(v, lo), hi)
    if code == SILU:
        return v / (1.0 + math.exp(-v))
    if code == HARDSWISH:
        return v * min(max(v + 3.0, 0.0), 6.0) / 6.0
    if code == SIGMOID:
        return 1.0 / (1.0 + math.exp(-v))
    if code == TANH:
        return math.tanh(v)
    if code == GELU:
        return 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))
    if code == GELU_TANH:
        return 0.5 * v * (1.0 + math.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
    if code == LEAKY:
        return v if v >= 0.0 else v * lo
    return v


def _chain_kernel(x, y, n, codes, los, his, nchain):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < n:
        v = x[i]
        for c in range(nchain):
            v = act(v, codes[c], los[c], his[c])
        y[i] = v
        i += stride


chain_kernel = cuda.jit(_chain_kernel)
CHAIN_SIG = "void(float32[::1], float32[::1], int64, int32[::1], float32[::1], float32[::1], int64)"


def chain(x: np.ndarray, ops: list[tuple[int, float, float]], *, threads: int = 256,
          blocks: int | None = None, max_blocks: int = 1024) -> np.ndarray:
    """Apply ``ops`` (from :func:`activation`) elementwise. ``blocks`` defaults to enough to cover
    ``x`` once, capped at ``max_blocks`` (the grid-stride loop covers the rest)."""
    xd = dev.f32(x)
    n = xd.size
    out = np.empty_like(xd)
    if n == 0:
        return out
    codes = np.array([o[0] for o in ops] or [NONE], np.int32)
    los = np.array([o[1] for o in ops] or [0.0], np.float32)
    his = np.array([o[2] for o in ops] or [0.0], np.float32)
    blocks = blocks or min(dev.ceil_div(n, threads), max_blocks)
    yd = dev.empty(n)
    cu = dev.cuda()
    chain_kernel[blocks, threads](dev.to_device(xd.reshape(-1)), yd, n, cu.to_device(codes),
                                  dev.to_device(los), dev.to_device(his), len(ops))
    return yd.copy_to_host().reshape(xd.shape)
