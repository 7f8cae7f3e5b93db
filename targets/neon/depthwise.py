"""Direct depthwise Conv2D (group == C, K = C * multiplier), NCHW, fused bias + activation.

A depthwise conv does R*S multiply-adds per output: im2col would copy R*S times the input to
feed a GEMM with K = R*S, which is all overhead. Per (image, output channel) plane the input is
copied once, zero-padded and split into stride phases; each output row is then R*S contiguous
vector passes (one per tap) into a row buffer, and bias + activation are applied on the way
out. Parallel over planes.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon._microkernel import VL
from edgeops.targets.neon._threads import SMALL_ELEMENTS, serial_if
from edgeops.targets.neon.conv import ConvGeom, check_conv_inputs

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _dw_kernel(x, w, bias, has_bias, y, N, C, H, W, K, R, S, OH, OW, sh, sw, dh, dw, ph, pw,
               act, p0, p1):
    mult = K // C
    # the row buffer and every tap run are padded to whole vectors: no scalar remainder loop
    # (a 56-wide row is 3.5 AVX-512 vectors; the remainder cost as much as the rest)
    owp = ((OW + VL - 1) // VL) * VL
    hp = (OH - 1) * sh + (R - 1) * dh + 1                    # padded rows the windows touch
    wq = ((S - 1) * dw) // sw + owp                          # columns per stride phase
    for t in prange(N * K):
        n = t // K
        k = t % K
        c = k // mult
        xp = x[(n * C + c) * H * W:(n * C + c + 1) * H * W]
        # zero-padded copy split into sw column phases: xq[f, i, j] = xpad[i, j*sw + f]. Every
        # tap then reads a CONTIGUOUS run of its phase (stride-2 convs included) with no bounds
        # tests; the copy is one pass over an L1/L2-sized plane.
        xq = np.zeros((sw, hp, wq), np.float32)
        for i in range(hp):
            ih = i - ph
            if ih < 0 or ih >= H:
                continue
            xr = xp[ih * W:(ih + 1) * W]
            if sw == 1:
                lo = max(0, pw)
                cnt = min(W, wq - pw) - max(0, -pw)
                if cnt > 0:
                    dst = xq[0, i, lo:lo + cnt]
                    src = xr[max(0, -pw):max(0, -pw) + cnt]
                    for j in range(cnt):
                        dst[j] = src[j]
            else:
                for f in range(sw):
                    dst = xq[f, i]
                    for j in range(wq):
                        iw = j * sw + f - pw
                        if 0 <= iw < W:
                            dst[j] = xr[iw]
        yp = y[(n * K + k) * OH * OW:(n * K + k + 1) * OH * OW]
        wk = w[k * R * S:(k + 1) * R * S]
        bv = bias[k] if has_bias else np.float32(0)
        row = np.empty(owp, np.float32)
        for oh in range(OH):
            if R == 3 and S == 3:
                # the common 3x3 case: all nine taps per vector in registers, one store
                i0, i1, i2 = oh * sh, oh * sh + dh, oh * sh + 2 * dh
                f1, c1 = dw % sw, dw // sw
                f2, c2 = (2 * dw) % sw, (2 * dw) // sw
                a0, a1, a2 = xq[0, i0, 0:owp], xq[f1, i0, c1:c1 + owp], xq[f2, i0, c2:c2 + owp]
                b0, b1, b2 = xq[0, i1, 0:owp], xq[f1, i1, c1:c1 + owp], xq[f2, i1, c2:c2 + owp]
                d0, d1, d2 = xq[0, i2, 0:owp], xq[f1, i2, c1:c1 + owp], xq[f2, i2, c2:c2 + owp]
                w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wk[0], wk[1], wk[2], wk[3], wk[4], wk[5],
                                                      wk[6], wk[7], wk[8])
                for q in range(owp):
                    row[q] = (bv + w0 * a0[q] + w1 * a1[q] + w2 * a2[q] + w3 * b0[q]
                              + w4 * b1[q] + w5 * b2[q] + w6 * d0[q] + w7 * d1[q] + w8 * d2[q])
            else:
                for q in range(owp):
                    row[q] = bv
                for r in range(R):
                    for s in range(S):
                        col = s * dw
                        src = xq[col % sw, oh * sh + r * dh, col // sw:col // sw + owp]
                        wv = wk[r * S + s]
                        for q in range(owp):
                            row[q] += wv * src[q]
            ep.act_copy(row, yp[oh * OW:(oh + 1) * OW], OW, act, p0, p1)


def conv2d_depthwise(x, w, b, g: ConvGeom, act=(0, 0.0, 0.0), tiling=None) -> np.ndarray:
    """Y = act(depthwise_conv(X, W) + B). ``tiling`` is accepted for a uniform signature; the
    direct loop's only blocking is one output row, which always fits L1."""
    if not g.is_depthwise:
        raise EdgeOpsError(f"neon depthwise: needs group == C and K a multiple of C, got "
                           f"group={g.group}, C={g.c}, K={g.k}; use conv2d_im2col")
    check_conv_inputs(x, w, b, g, who="neon depthwise")
    y = np.empty((g.n, g.k, g.oh, g.ow), np.float32)
    bias = np.zeros(1, np.float32) if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
    with serial_if(y.size < SMALL_ELEMENTS):
        _dw_kernel(np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(w).reshape(-1),
                   bias, b is not None, y.reshape(-1), g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.oh,
                   g.ow, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw, act[0], float(act[1]), float(act[2]))
    return y
