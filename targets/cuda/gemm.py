"""GEMM / batched MatMul / fused SwiGLU: a naive kernel (one thread per output, every operand
read from DRAM) and shared-memory tiled kernels.

Tiled kernels: a thread block computes a BM x BN tile of C, each thread a TM x TN register
micro-tile, stepping over K in BK-deep slices staged in shared memory. Shared-array shapes must be
compile-time constants in numba.cuda, so each configuration in :data:`CONFIGS` is compiled once
(on first use) and :mod:`~edgeops.targets.cuda.launch` picks one from the tiling; M, N, K, the
epilogue and the grid are runtime arguments. Ragged edges: loads outside A/B read 0, stores
outside C are skipped.

Epilogue (fused into the store): ``act(alpha * acc + bias)`` with bias mode 0 none, 1 per row
(m), 2 per column (n), 3 full (m * N + n); act from :mod:`eltwise`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from edgeops.targets.cuda import device as dev
from edgeops.targets.cuda.eltwise import NONE, act
from edgeops.targets.cuda.launch import CONFIGS, Config

_TILED: dict[Config, object] = {}
_SWIGLU: dict[Config, object] = {}

GEMM_SIG = ("void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], int64, int64, int64,"
            " float32, float32[::1], int64, int64, float32, float32)")
SWIGLU_SIG = ("void(float32[:, ::1], float32[:, ::1], float32[:, ::1], float32[::1], float32[::1],"
              " float32[:, ::1], int64, int64, int64)")


@cuda.jit(device=True, inline=True)
def _epilogue(v, gm, gn, N, alpha, bias, bias_mode, code, lo, hi):
    v = alpha * v
    if bias_mode == 1:
        v += bias[gm]
    elif bias_mode == 2:
        v += bias[gn]
    elif bias_mode == 3:
        v += bias[gm * N + gn]
    return act(v, code, lo, hi)


def _gemm_naive(a, b, c, M, N, K, alpha, bias, bias_mode, code, lo, hi):
    gn = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    gm = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    z = cuda.blockIdx.z
    if gm < M and gn < N:
        acc = float32(0.0)
        for k in range(K):
            acc += a[z, gm, k] * b[z, k, gn]
        c[z, gm, gn] = _epilogue(acc, gm, gn, N, alpha, bias, bias_mode, code, lo, hi)


naive_kernel = cuda.jit(_gemm_naive)


def make_tiled_py(cfg: Config):
    """The Python function of the tiled kernel for one compile-time configuration."""
    BM, BN, BK, TM, TN = cfg
    NTX, NTY = BN // TN, BM // TM
    NT = NTX * NTY

    def _gemm_tiled(a, b, c, M, N, K, alpha, bias, bias_mode, code, lo, hi):
        As = cuda.shared.array((BK, BM), float32)   # A slice stored k-major: rows of a column
        Bs = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array((TM, TN), float32)
        af = cuda.local.array(TM, float32)
        bf = cuda.local.array(TN, float32)
        tid = cuda.threadIdx.x
        tx = tid % NTX
        ty = tid // NTX
        m0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * BN
        z = cuda.blockIdx.z
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = 0.0
        for k0 in range(0, K, BK):
            for idx in range(tid, BM * BK, NT):      # consecutive threads: consecutive k of A
                mm = idx // BK
                kk = idx % BK
                gm = m0 + mm
                gk = k0 + kk
                As[kk, mm] = a[z, gm, gk] if (gm < M and gk < K) else float32(0.0)
            for idx in range(tid, BK * BN, NT):      # consecutive threads: consecutive n of B
                kk = idx // BN
                nn = idx % BN
                gk = k0 + kk
                gn = n0 + nn
                Bs[kk, nn] = b[z, gk, gn] if (gk < K and gn < N) else float32(0.0)
            cuda.syncthreads()
            for kk in range(BK):
                for i in range(TM):
                    af[i] = As[kk, ty * TM + i]
                for j in range(TN):
                    bf[j] = Bs[kk, tx * TN + j]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += af[i] * bf[j]
            cuda.syncthreads()
        for i in range(TM):
            gm = m0 + ty * TM + i
            for j in range(TN):
                gn = n0 + tx * TN + j
                if gm < M and gn < N:
                    c[z, gm, gn] = _epilogue(acc[i, j], gm, gn, N, alpha, bias, bias_mode,
                                             code, lo, hi)
    return _gemm_tiled


def tiled_kernel(cfg: Config):
    if cfg not in _TILED:
        _TILED[cfg] = cuda.jit(make_tiled_py(cfg))
    return _TILED[cfg]


def make_swiglu_py(cfg: Config):
    """Fused SwiGLU: Y = silu(X W1 + b1) * (X W2 + b2); the X slice is staged once for both."""
    BM, BN, BK, TM, TN = cfg
    NTX, NTY = BN // TN, BM // TM
    NT = NTX * NTY

    def _swiglu(x, w1, w2, b1, b2, y, M, D, F):
        Xs = cuda.shared.array((BK, BM), float32)
        G = cuda.shared.array((BK, BN), float32)
        U = cuda.shared.array((BK, BN), float32)
        ag = cuda.local.array((TM, TN), float32)
        au = cuda.local.array((TM, TN), float32)
        tid = cuda.threadIdx.x
        tx = tid % NTX
        ty = tid // NTX
        m0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * BN
        for i in range(TM):
            for j in range(TN):
                ag[i, j] = 0.0
                au[i, j] = 0.0
        for k0 in range(0, D, BK):
            for idx in range(tid, BM * BK, NT):
                mm = idx // BK
                kk = idx % BK
                Xs[kk, mm] = x[m0 + mm, k0 + kk] if (m0 + mm < M and k0 + kk < D) else float32(0.0)
            for idx in range(tid, BK * BN, NT):
                kk = idx // BN
                nn = idx % BN
                ok = k0 + kk < D and n0 + nn < F
                G[kk, nn] = w1[k0 + kk, n0 + nn] if ok else float32(0.0)
                U[kk, nn] = w2[k0 + kk, n0 + nn] if ok else float32(0.0)
            cuda.syncthreads()
            for kk in range(BK):
                for i in range(TM):
                    xv = Xs[kk, ty * TM + i]
                    for j in range(TN):
                        ag[i, j] += xv * G[kk, tx * TN + j]
                        au[i, j] += xv * U[kk, tx * TN + j]
            cuda.syncthreads()
        for i in range(TM):
            gm = m0 + ty * TM + i
            for j in range(TN):
                gn = n0 + tx * TN + j
                if gm < M and gn < F:
                    g = ag[i, j] + b1[gn]
                    y[gm, gn] = g / (float32(1.0) + math.exp(-g)) * (au[i, j] + b2[gn])
    return _swiglu


def swiglu_kernel(cfg: Config):
    if cfg not in _SWIGLU:
        _SWIGLU[cfg] = cuda.jit(make_swiglu_py(cfg))
    return _SWIGLU[cfg]


# ---- host wrappers -------------------------------------------------------------------------

def _bias(c, M: int, N: int, beta: float) -> tuple[np.ndarray, int]:
    """Gemm's C (unidirectionally broadcastable to (M, N)) as (flat bias, mode)."""
    if c is None or beta == 0.0 or c.size == 0:
        return np.zeros(1, np.float32), 0
    c = np.asarray(c, np.float32) * np.float32(beta)
    if c.ndim == 2 and c.shape == (M, N) and M > 1 and N > 1:
        return dev.f32(c.reshape(-1)), 3
    if c.ndim == 2 and c.shape[1] == 1 and c.shape[0] == M and M > 1:
        return dev.f32(c.reshape(-1)), 1
    return dev.f32(np.broadcast_to(c.reshape(-1) if c.ndim < 2 else c[0], (N,))), 2


def launch_gemm(a3: np.ndarray, b3: np.ndarray, *, alpha=1.0, bias=None, bias_mode=0,
                epilogue=(NONE, 0.0, 0.0), cfg: Config | None = None, naive: bool = False,
                naive_block: tuple[int, int] = (16, 16)) -> np.ndarray:
    """C[z] = epilogue(A[z] @ B[z]) for host (Z, M, K) and (Z, K, N) arrays."""
    Z, M, K = a3.shape
    N = b3.shape[2]
    out = dev.empty((Z, M, N))
    if M == 0 or N == 0 or Z == 0:
        return np.zeros((Z, M, N), np.float32)
    bias = np.zeros(1, np.float32) if bias is None else bias
    args = (dev.to_device(a3), dev.to_device(b3), out, M, N, K, np.float32(alpha),
            dev.to_device(bias), bias_mode, epilogue[0], np.float32(epilogue[1]),
            np.float32(epilogue[2]))
    if naive:
        bx, by = naive_block
        naive_kernel[(dev.ceil_div(N, bx), dev.ceil_div(M, by), Z), (bx, by)](*args)
    else:
        cfg = cfg or CONFIGS["t32"]
        grid = (dev.ceil_div(N, cfg.bn), dev.ceil_div(M, cfg.bm), Z)
        tiled_kernel(cfg)[grid, cfg.threads](*args)
    return out.copy_to_host()


def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, trans_a=False, trans_b=False,
         epilogue=(NONE, 0.0, 0.0), cfg: Config | None = None, naive=False) -> np.ndarray:
    """ONNX Gemm: alpha * A' B' + beta * C, then an optional fused activation."""
    a = np.asarray(a).T if trans_a else np.asarray(a)
    b = np.asarray(b).T if trans_b else np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"cuda gemm: need A (M, K) and B (K, N) after transposes, got "
                         f"{a.shape} and {b.shape}")
    M, N = a.shape[0], b.shape[1]
    bias, mode = _bias(c, M, N, beta)
    return launch_gemm(dev.f32(a)[None], dev.f32(b)[None], alpha=alpha, bias=bias, bias_mode=mode,
                       epilogue=epilogue, cfg=cfg, naive=naive)[0]


def matmul(a, b, *, cfg: Config | None = None, naive=False) -> np.ndarray:
    """numpy-semantics MatMul (1-D promotion, batch broadcasting), one launch over the batch."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    va, vb = a.ndim == 1, b.ndim == 1
    a2 = a[None, :] if va else a
    b2 = b[:, None] if vb else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    M, K = a2.shape[-2:]
    K2, N = b2.shape[-2:]
    if K != K2:
        raise ValueError(f"cuda matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    A = np.broadcast_to(a2, batch + (M, K)).reshape(-1, M, K)
    B = np.broadcast_to(b2, batch + (K, N)).reshape(-1, K, N)
    y = launch_gemm(dev.f32(A), dev.f32(B), cfg=cfg, naive=naive).reshape(batch + (M, N))
    if va:
        y = y[..., 0, :]
    if vb:
        y = y[..., 0]
    return y


def swiglu(x, w1, w2, b1=None, b2=None, *, cfg: Config | None = None) -> np.ndarray:
    x = np.asarray(x, np.float32)
    D, F = w1.shape
    lead = x.shape[:-1]
    x2 = dev.f32(x.reshape(-1, D))
    M = x2.shape[0]
    if M == 0 or F == 0:
        return np.zeros(lead + (F,), np.float32)
    z = np.zeros(F, np.float32)
    cfg = cfg or CONFIGS["t32"]
    y = dev.empty((M, F))
    swiglu_kernel(cfg)[(dev.ceil_div(F, cfg.bn), dev.ceil_div(M, cfg.bm)), cfg.threads](
        dev.to_device(x2), dev.to_device(w1), dev.to_device(w2),
        dev.to_device(z if b1 is None else b1), dev.to_device(z if b2 is None else b2), y, M, D, F)
    return y.copy_to_host().reshape(lead + (F,))
