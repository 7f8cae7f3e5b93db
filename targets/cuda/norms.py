"""Row reductions with one thread block per row: LayerNorm (+GELU), GroupNorm (+SiLU), Softmax.

Each block strides its threads over the row, reduces the partial sums in shared memory (tree
reduction, ``NT`` = block size is the compile-time length of the shared array, one compiled
kernel per size in ``launch.NORM_THREADS``), then normalises in a second pass. Statistics are fp32
with the two-pass (mean, then centred variance) formula, which the float64 reference matches to
~1e-6 relative on unit-scale data. Ragged rows: threads past the row end contribute 0 (or -inf to
a max) and store nothing.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from edgeops.targets.cuda import device as dev
from edgeops.targets.cuda.eltwise import act
from edgeops.targets.cuda.launch import norm_threads

_CACHE: dict[tuple[str, int], object] = {}

LN_SIG = ("void(float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], int64, float32,"
          " int64)")
GN_SIG = ("void(float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], int64, int64, int64,"
          " float32, int64)")
SM_SIG = "void(float32[:, ::1], float32[:, ::1], int64)"


@cuda.jit(device=True, inline=True)
def _block_sum(sh, v, tid, nt):
    sh[tid] = v
    cuda.syncthreads()
    s = nt // 2
    while s > 0:
        if tid < s:
            sh[tid] += sh[tid + s]
        cuda.syncthreads()
        s //= 2
    r = sh[0]
    cuda.syncthreads()          # sh is reused by the next reduction
    return r


@cuda.jit(device=True, inline=True)
def _block_max(sh, v, tid, nt):
    sh[tid] = v
    cuda.syncthreads()
    s = nt // 2
    while s > 0:
        if tid < s:
            sh[tid] = max(sh[tid], sh[tid + s])
        cuda.syncthreads()
        s //= 2
    r = sh[0]
    cuda.syncthreads()
    return r


def make_layernorm_py(NT: int):
    def _layernorm(x, scale, bias, y, cols, eps, code):
        sh = cuda.shared.array(NT, float32)
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        s = float32(0.0)
        for j in range(tid, cols, NT):
            s += x[row, j]
        mean = _block_sum(sh, s, tid, NT) / cols
        s = float32(0.0)
        for j in range(tid, cols, NT):
            d = x[row, j] - mean
            s += d * d
        rstd = float32(1.0) / math.sqrt(_block_sum(sh, s, tid, NT) / cols + eps)
        for j in range(tid, cols, NT):
            y[row, j] = act((x[row, j] - mean) * rstd * scale[j] + bias[j], code,
                            float32(0.0), float32(0.0))
    return _layernorm


def make_groupnorm_py(NT: int):
    def _groupnorm(x, scale, bias, y, groups, cg, hw, eps, code):
        # x, y: (N * groups, cg * hw); scale/bias per channel (C = groups * cg)
        sh = cuda.shared.array(NT, float32)
        row = cuda.blockIdx.x
        g = row % groups
        tid = cuda.threadIdx.x
        cols = cg * hw
        s = float32(0.0)
        for j in range(tid, cols, NT):
            s += x[row, j]
        mean = _block_sum(sh, s, tid, NT) / cols
        s = float32(0.0)
        for j in range(tid, cols, NT):
            d = x[row, j] - mean
            s += d * d
        rstd = float32(1.0) / math.sqrt(_block_sum(sh, s, tid, NT) / cols + eps)
        for j in range(tid, cols, NT):
            c = g * cg + j // hw
            y[row, j] = act((x[row, j] - mean) * rstd * scale[c] + bias[c], code,
                            float32(0.0), float32(0.0))
    return _groupnorm


def make_softmax_py(NT: int):
    def _softmax(x, y, cols):
        sh = cuda.shared.array(NT, float32)
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        m = float32(-math.inf)
        for j in range(tid, cols, NT):
            m = max(m, x[row, j])
        m = _block_max(sh, m, tid, NT)
        s = float32(0.0)
        for j in range(tid, cols, NT):
            e = math.exp(x[row, j] - m)
            y[row, j] = e
            s += e
        inv = float32(1.0) / _block_sum(sh, s, tid, NT)
        for j in range(tid, cols, NT):
            y[row, j] = y[row, j] * inv
    return _softmax


_MAKERS = {"layernorm": make_layernorm_py, "groupnorm": make_groupnorm_py,
           "softmax": make_softmax_py}


def kernel(kind: str, nt: int):
    if (kind, nt) not in _CACHE:
        _CACHE[(kind, nt)] = cuda.jit(_MAKERS[kind](nt))
    return _CACHE[(kind, nt)]


# ---- host wrappers -------------------------------------------------------------------------

def layernorm(x, scale, bias=None, *, axis=-1, epsilon=1e-5, code=0, threads=None):
    """LayerNormalization over ``x.shape[axis:]``, then activation ``code`` (GELU: fused op)."""
    x = np.asarray(x, np.float32)
    ax = axis % x.ndim
    rows, cols = int(np.prod(x.shape[:ax])), int(np.prod(x.shape[ax:]))
    tail = x.shape[ax:]
    sc = dev.f32(np.broadcast_to(scale, tail).reshape(-1))
    bi = dev.f32(np.broadcast_to(0.0 if bias is None else bias, tail).reshape(-1))
    if rows == 0 or cols == 0:
        return np.empty_like(x)
    nt = norm_threads(cols, threads)
    y = dev.empty((rows, cols))
    kernel("layernorm", nt)[rows, nt](dev.to_device(x.reshape(rows, cols)), dev.to_device(sc),
                                      dev.to_device(bi), y, cols, np.float32(epsilon), code)
    return y.copy_to_host().reshape(x.shape)


def groupnorm(x, scale, bias, *, num_groups, epsilon=1e-5, code=0, threads=None):
    x = np.asarray(x, np.float32)
    n, c = x.shape[:2]
    hw = int(np.prod(x.shape[2:]))
    cg = c // num_groups
    # opset-18 per-group scale/bias: repeat each group's value over its channels
    sc = dev.f32(np.repeat(np.asarray(scale, np.float32).reshape(-1), c // np.size(scale)))
    bi = dev.f32(np.repeat(np.asarray(bias, np.float32).reshape(-1), c // np.size(bias)))
    rows, cols = n * num_groups, cg * hw
    if rows == 0 or cols == 0:
        return np.empty_like(x)
    nt = norm_threads(cols, threads)
    y = dev.empty((rows, cols))
    kernel("groupnorm", nt)[rows, nt](dev.to_device(x.reshape(rows, cols)), dev.to_device(sc),
                                      dev.to_device(bi), y, num_groups, cg, hw,
                                      np.float32(epsilon), code)
    return y.copy_to_host().reshape(x.shape)


def softmax(x, *, axis=-1, threads=None):
    x = np.asarray(x, np.float32)
    ax = axis % x.ndim
    xt = np.moveaxis(x, ax, -1)
    cols = xt.shape[-1]
    rows = int(np.prod(xt.shape[:-1]))
    if rows == 0 or cols == 0:
        return np.empty_like(x)
    nt = norm_threads(cols, threads)
    y = dev.empty((rows, cols))
    kernel("softmax", nt)[rows, nt](dev.to_device(xt.reshape(rows, cols)), y, cols)
    return np.moveaxis(y.copy_to_host().reshape(xt.shape), -1, ax)
