"""Winograd F(2x2, 3x3) for 3x3, stride-1, dilation-1, group-1 Conv2D, NCHW, fused bias + act.

Each 2x2 output tile is computed from a 4x4 input tile with 16 multiplies per (k, c) instead of
36: Y = A^T [ (G g G^T) . (B^T d B) ] A. Written as 16 independent GEMMs over the transformed
domain, M[e] (K x P) = U[e] (K x C) @ V[e] (C x P) with P = number of tiles, which run on the
packed GEMM driver (batch of 16, blocking as for any GEMM). The three steps each make one pass
over memory; the win over im2col is 2.25x fewer MACs minus the transform traffic, which is why
the chooser (``chooser.py``) decides per shape.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon.blocking import Blocking, from_tiling
from edgeops.targets.neon.conv import ConvGeom, check_conv_inputs
from edgeops.targets.neon.gemm import gemm_flat
from edgeops.threads import SMALL_ELEMENTS, serial_if

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
_BUDGET = 64 * 1024 * 1024  # bytes of V + M per chunk of images

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


def applies(g: ConvGeom) -> bool | str:
    """True, or why Winograd F(2x2,3x3) does not apply (the registry predicate uses this)."""
    if (g.r, g.s) != (3, 3):
        return f"winograd F(2x2,3x3) needs a 3x3 kernel, got {g.r}x{g.s}"
    if (g.sh, g.sw, g.dh, g.dw) != (1, 1, 1, 1):
        return "winograd F(2x2,3x3) needs stride 1 and dilation 1"
    if g.group != 1:
        return f"winograd F(2x2,3x3) is implemented for group 1, got group={g.group}"
    return True


def transform_weights(w: np.ndarray) -> np.ndarray:
    """U[e = 4*xi + nu, k, c] = (G w[k, c] G^T)[xi, nu], in float64 then rounded once."""
    u = _G @ w.astype(np.float64) @ _G.T                      # (K, C, 4, 4)
    return np.ascontiguousarray(u.transpose(2, 3, 0, 1).reshape(16, w.shape[0], w.shape[1]),
                                np.float32)


# Transformed weights keyed by the weight array's identity (weights are model constants; the
# transform costs as much as the whole conv at 64 channels). Used only while the same array
# object is alive; ``cache_weights=False`` for weights modified in place.
_U_CACHE: dict[tuple, tuple] = {}


def cached_weights(w: np.ndarray, cache: bool = True) -> np.ndarray:
    import weakref
    key = (id(w), w.ctypes.data, w.shape)
    hit = _U_CACHE.get(key) if cache else None
    if hit is not None and hit[0]() is w:
        return hit[1]
    u = transform_weights(w)
    if cache:
        if len(_U_CACHE) >= 64:
            _U_CACHE.pop(next(iter(_U_CACHE)))
        _U_CACHE[key] = (weakref.ref(w), u)
    return u


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _input_transform(x, n0, nimg, C, H, W, TH, TW, ph, pw, v):
    """v[e, c, p] = (B^T d B)[e] for the 4x4 tile d at (2ty - ph, 2tx - pw) of image n0+i,
    p = (i*TH + ty)*TW + tx. Vectorised ACROSS tiles: the plane is copied zero-padded and split
    into even/odd columns, so tap (a, b) of every tile in a tile row is one contiguous run, and
    each of the 16 outputs is a contiguous store (a per-tile gather is slower)."""
    P = nimg * TH * TW
    hp = 2 * TH + 2
    wq = TW + 1
    for t in prange(nimg * C):
        i = t // C
        c = t % C
        xp = x[((n0 + i) * C + c) * H * W:((n0 + i) * C + c + 1) * H * W]
        xq = np.zeros((2, hp, wq), np.float32)
        tmp = np.empty(16 * TW, np.float32)
        for r in range(hp):
            ih = r - ph
            if 0 <= ih < H:
                xr = xp[ih * W:(ih + 1) * W]
                for f in range(2):
                    # padded column j = 2*jj + f holds x column j - pw when inside [0, W)
                    lo = max(0, (pw - f + 1) // 2)
                    hi = min(wq, (W + pw - f + 1) // 2)
                    dst = xq[f, r]
                    for jj in range(lo, hi):
                        dst[jj] = xr[2 * jj + f - pw]
        for ty in range(TH):
            r0 = 2 * ty
            base = (i * TH + ty) * TW
            # d[a][b] over tx: row r0+a, column 2tx+b -> phase b&1, offset b>>1
            d00, d01 = xq[0, r0, 0:TW], xq[1, r0, 0:TW]
            d02, d03 = xq[0, r0, 1:TW + 1], xq[1, r0, 1:TW + 1]
            d10, d11 = xq[0, r0 + 1, 0:TW], xq[1, r0 + 1, 0:TW]
            d12, d13 = xq[0, r0 + 1, 1:TW + 1], xq[1, r0 + 1, 1:TW + 1]
            d20, d21 = xq[0, r0 + 2, 0:TW], xq[1, r0 + 2, 0:TW]
            d22, d23 = xq[0, r0 + 2, 1:TW + 1], xq[1, r0 + 2, 1:TW + 1]
            d30, d31 = xq[0, r0 + 3, 0:TW], xq[1, r0 + 3, 0:TW]
            d32, d33 = xq[0, r0 + 3, 1:TW + 1], xq[1, r0 + 3, 1:TW + 1]
            # all 16 results of the tile row go to ONE scratch array (tmp[e*TW + q]): with a
            # single destination object LLVM vectorises the loop; 16 separate output views
            # needed too many runtime alias checks and ran scalar
            for q in range(TW):
                # rows of B^T d
                t00 = d00[q] - d20[q]
                t01 = d01[q] - d21[q]
                t02 = d02[q] - d22[q]
                t03 = d03[q] - d23[q]
                t10 = d10[q] + d20[q]
                t11 = d11[q] + d21[q]
                t12 = d12[q] + d22[q]
                t13 = d13[q] + d23[q]
                t20 = d20[q] - d10[q]
                t21 = d21[q] - d11[q]
                t22 = d22[q] - d12[q]
                t23 = d23[q] - d13[q]
                t30 = d10[q] - d30[q]
                t31 = d11[q] - d31[q]
                t32 = d12[q] - d32[q]
                t33 = d13[q] - d33[q]
                # columns: (.) B
                tmp[q] = t00 - t02
                tmp[TW + q] = t01 + t02
                tmp[2 * TW + q] = t02 - t01
                tmp[3 * TW + q] = t01 - t03
                tmp[4 * TW + q] = t10 - t12
                tmp[5 * TW + q] = t11 + t12
                tmp[6 * TW + q] = t12 - t11
                tmp[7 * TW + q] = t11 - t13
                tmp[8 * TW + q] = t20 - t22
                tmp[9 * TW + q] = t21 + t22
                tmp[10 * TW + q] = t22 - t21
                tmp[11 * TW + q] = t21 - t23
                tmp[12 * TW + q] = t30 - t32
                tmp[13 * TW + q] = t31 + t32
                tmp[14 * TW + q] = t32 - t31
                tmp[15 * TW + q] = t31 - t33
            for e in range(16):
                dst = v[(e * C + c) * P + base:(e * C + c) * P + base + TW]
                srct = tmp[e * TW:(e + 1) * TW]
                for q in range(TW):
                    dst[q] = srct[q]


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _output_transform(m, n0, nimg, K, OH, OW, TH, TW, bias, has_bias, y, act, p0, p1):
    """y[n, k, 2ty+i, 2tx+j] = act((A^T m A)[i, j] + bias[k]), vectorised across the tiles of a
    tile row (contiguous loads of the 16 planes), written through two padded row buffers."""
    P = nimg * TH * TW
    for t in prange(nimg * K):
        i = t // K
        k = t % K
        yp = y[((n0 + i) * K + k) * OH * OW:((n0 + i) * K + k + 1) * OH * OW]
        bv = bias[k] if has_bias else np.float32(0)
        row0 = np.empty(2 * TW, np.float32)
        row1 = np.empty(2 * TW, np.float32)
        for ty in range(TH):
            base = (i * TH + ty) * TW
            mb = k * P + base
            st = K * P
            m0 = m[0 * st + mb:0 * st + mb + TW]
            m1 = m[1 * st + mb:1 * st + mb + TW]
            m2 = m[2 * st + mb:2 * st + mb + TW]
            m3 = m[3 * st + mb:3 * st + mb + TW]
            m4 = m[4 * st + mb:4 * st + mb + TW]
            m5 = m[5 * st + mb:5 * st + mb + TW]
            m6 = m[6 * st + mb:6 * st + mb + TW]
            m7 = m[7 * st + mb:7 * st + mb + TW]
            m8 = m[8 * st + mb:8 * st + mb + TW]
            m9 = m[9 * st + mb:9 * st + mb + TW]
            m10 = m[10 * st + mb:10 * st + mb + TW]
            m11 = m[11 * st + mb:11 * st + mb + TW]
            m12 = m[12 * st + mb:12 * st + mb + TW]
            m13 = m[13 * st + mb:13 * st + mb + TW]
            m14 = m[14 * st + mb:14 * st + mb + TW]
            m15 = m[15 * st + mb:15 * st + mb + TW]
            for q in range(TW):
                # A^T m: rows (r0 + r1 + r2, r1 - r2 - r3) per column
                s0 = m0[q] + m4[q] + m8[q]
                s1 = m1[q] + m5[q] + m9[q]
                s2 = m2[q] + m6[q] + m10[q]
                s3 = m3[q] + m7[q] + m11[q]
                u0 = m4[q] - m8[q] - m12[q]
                u1 = m5[q] - m9[q] - m13[q]
                u2 = m6[q] - m10[q] - m14[q]
                u3 = m7[q] - m11[q] - m15[q]
                row0[2 * q] = s0 + s1 + s2 + bv
                row0[2 * q + 1] = s1 - s2 - s3 + bv
                row1[2 * q] = u0 + u1 + u2 + bv
                row1[2 * q + 1] = u1 - u2 - u3 + bv
            oy = 2 * ty
            ep.act_copy(row0, yp[oy * OW:(oy + 1) * OW], OW, act, p0, p1)
            if oy + 1 < OH:
                ep.act_copy(row1, yp[(oy + 1) * OW:(oy + 2) * OW], OW, act, p0, p1)


def conv2d_winograd(x, w, b, g: ConvGeom, act=(0, 0.0, 0.0), blocking: Blocking | None = None,
                    tiling=None, u: np.ndarray | None = None, cache_weights: bool = True
                    ) -> np.ndarray:
    """Y = act(conv3x3(X, W) + B) with Winograd F(2x2,3x3). ``u`` may carry pre-transformed
    weights (``transform_weights(W)``); otherwise they are computed once per weight array
    (``cached_weights``)."""
    why = applies(g)
    if why is not True:
        raise EdgeOpsError(f"neon winograd: {why}; use conv2d_im2col")
    check_conv_inputs(x, w, b, g, who="neon winograd")
    blocking = blocking or from_tiling(tiling)
    if u is None:
        u = cached_weights(w, cache_weights and w.flags.c_contiguous)
    TH, TW = (g.oh + 1) // 2, (g.ow + 1) // 2
    y = np.empty((g.n, g.k, g.oh, g.ow), np.float32)
    bias = np.zeros(1, np.float32) if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
    per_img = 16 * (g.c + g.k) * TH * TW * 4
    chunk = max(1, min(g.n, _BUDGET // max(per_img, 1)))
    xf = np.ascontiguousarray(x).reshape(-1)
    uf = u.reshape(-1)
    e = np.arange(16, dtype=np.int64)
    for n0 in range(0, g.n, chunk):
        nimg = min(chunk, g.n - n0)
        P = nimg * TH * TW
        v = np.empty(16 * g.c * P, np.float32)
        m = np.empty(16 * g.k * P, np.float32)
        with serial_if(v.size < SMALL_ELEMENTS):
            _input_transform(xf, n0, nimg, g.c, g.h, g.w, TH, TW, g.ph, g.pw, v)
        gemm_flat(g.k, P, g.c, uf, e * (g.k * g.c), g.c, 1, v, e * (g.c * P), P, 1, m,
                  e * (g.k * P), P, blocking=blocking)
        with serial_if(m.size < SMALL_ELEMENTS):
            _output_transform(m, n0, nimg, g.k, g.oh, g.ow, TH, TW, bias, b is not None,
                              y.reshape(-1), act[0], float(act[1]), float(act[2]))
    return y
