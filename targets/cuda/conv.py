"""Conv2D as an implicit GEMM, with the ConvBnAct epilogue (bias + activation) fused in the store.

Per group g: C_g[k, p] = sum_q W_g[k, q] * X_col[q, p] with k an output channel (GEMM M), p an
output pixel over all images (GEMM N = N_img * OH * OW) and q = (c, r, s) (GEMM K = C/g * R * S).
The im2col matrix is never built: the kernel gathers each B slice straight from X into shared
memory, padding reads 0. Tile configurations are those of the tiled GEMM (``launch.CONFIGS``),
groups run along gridDim.z.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda, float32

from edgeops.targets.cuda import device as dev
from edgeops.targets.cuda.eltwise import NONE, act
from edgeops.targets.cuda.launch import CONFIGS, Config

_CONV: dict[Config, object] = {}

CONV_SIG = ("void(float32[:, :, :, ::1], float32[:, ::1], float32[::1], float32[:, :, :, ::1],"
            " int64[::1], int64, float32, float32)")
# geometry vector: N C H W K R S G OH OW sh sw dh dw ph pw
GEOM_LEN = 16


@dataclass(frozen=True)
class Geom:
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    group: int
    oh: int
    ow: int
    sh: int
    sw: int
    dh: int
    dw: int
    ph: int
    pw: int

    def vector(self) -> np.ndarray:
        return np.array([self.n, self.c, self.h, self.w, self.k, self.r, self.s, self.group,
                         self.oh, self.ow, self.sh, self.sw, self.dh, self.dw, self.ph, self.pw],
                        np.int64)


def geom(x_shape, w_shape, attrs) -> Geom:
    from edgeops.ops.conv import Conv
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ValueError(f"cuda conv: only 2-D convolutions (4-D X and W), got X {tuple(x_shape)}, "
                         f"W {tuple(w_shape)}")
    full = {"auto_pad": "NOTSET", "kernel_shape": None, "strides": None, "dilations": None,
            "pads": None, "group": 1, **{k: v for k, v in attrs.items() if v is not None}}
    begin, _end, out, s, d = Conv.geometry(full, tuple(x_shape), tuple(w_shape))
    n, c, h, w = x_shape
    return Geom(n, c, h, w, w_shape[0], w_shape[2], w_shape[3], int(full["group"]), out[0], out[1],
                s[0], s[1], d[0], d[1], begin[0], begin[1])


def make_conv_py(cfg: Config):
    BM, BN, BK, TM, TN = cfg
    NTX, NTY = BN // TN, BM // TM
    NT = NTX * NTY

    def _conv(x, w, bias, y, gv, code, lo, hi):
        As = cuda.shared.array((BK, BM), float32)
        Bs = cuda.shared.array((BK, BN), float32)
        acc = cuda.local.array((TM, TN), float32)
        C, H, W, K, R, S, G = gv[1], gv[2], gv[3], gv[4], gv[5], gv[6], gv[7]
        OH, OW, sh, sw = gv[8], gv[9], gv[10], gv[11]
        dh, dw, ph, pw = gv[12], gv[13], gv[14], gv[15]
        Kg = K // G
        Cg = C // G
        RS = R * S
        Q = Cg * RS
        P = OH * OW
        NP = gv[0] * P
        tid = cuda.threadIdx.x
        tx = tid % NTX
        ty = tid // NTX
        m0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * BN
        g = cuda.blockIdx.z
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = 0.0
        for q0 in range(0, Q, BK):
            for idx in range(tid, BM * BK, NT):
                mm = idx // BK
                kk = idx % BK
                ok = m0 + mm < Kg and q0 + kk < Q
                As[kk, mm] = w[g * Kg + m0 + mm, q0 + kk] if ok else float32(0.0)
            for idx in range(tid, BK * BN, NT):
                kk = idx // BN
                nn = idx % BN
                q = q0 + kk
                p = n0 + nn
                v = float32(0.0)
                if q < Q and p < NP:
                    c = q // RS
                    r = (q % RS) // S
                    s = q % S
                    img = p // P
                    oh = (p % P) // OW
                    ow = p % OW
                    ih = oh * sh - ph + r * dh
                    iw = ow * sw - pw + s * dw
                    if ih >= 0 and ih < H and iw >= 0 and iw < W:
                        v = x[img, g * Cg + c, ih, iw]
                Bs[kk, nn] = v
            cuda.syncthreads()
            for kk in range(BK):
                for i in range(TM):
                    av = As[kk, ty * TM + i]
                    for j in range(TN):
                        acc[i, j] += av * Bs[kk, tx * TN + j]
            cuda.syncthreads()
        for i in range(TM):
            m = m0 + ty * TM + i
            for j in range(TN):
                p = n0 + tx * TN + j
                if m < Kg and p < NP:
                    k = g * Kg + m
                    y[p // P, k, (p % P) // OW, p % OW] = act(acc[i, j] + bias[k], code, lo, hi)
    return _conv


def conv_kernel(cfg: Config):
    if cfg not in _CONV:
        _CONV[cfg] = cuda.jit(make_conv_py(cfg))
    return _CONV[cfg]


def conv2d(x, w, b, gm: Geom, epilogue=(NONE, 0.0, 0.0), cfg: Config | None = None) -> np.ndarray:
    """Y = act(conv(X, W) + B) (NCHW, W as (K, C/group, R, S))."""
    out = np.zeros((gm.n, gm.k, gm.oh, gm.ow), np.float32)
    if out.size == 0:
        return out
    cfg = cfg or CONFIGS["t32"]
    bias = np.zeros(gm.k, np.float32) if b is None else dev.f32(b)
    w2 = dev.f32(w).reshape(gm.k, -1)
    y = dev.to_device(out)
    kg, npix = gm.k // gm.group, gm.n * gm.oh * gm.ow
    grid = (dev.ceil_div(npix, cfg.bn), dev.ceil_div(kg, cfg.bm), gm.group)
    conv_kernel(cfg)[grid, cfg.threads](dev.to_device(x), dev.to_device(w2), dev.to_device(bias), y,
                                        dev.cuda().to_device(gm.vector()), epilogue[0],
                                        np.float32(epilogue[1]), np.float32(epilogue[2]))
    return y.copy_to_host()
