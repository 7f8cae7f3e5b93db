"""Conv2D (NCHW) as im2col + packed GEMM, with the ConvBnAct epilogue fused into the GEMM store.

Per image n and group g:  Y[n, g] (Kg x OH*OW) = W[g] (Kg x Cg*R*S) @ cols (Cg*R*S x OH*OW),
so the output lands in NCHW order with no transpose and the bias is a per-row (per output
channel) bias of the GEMM epilogue. A 1x1, stride-1, unpadded conv needs no im2col: the image
itself is the B operand. Images are processed in chunks so the column buffer stays bounded.

Geometry (pads, strides, dilations, output size) comes from the caller, already resolved by the
op definition (``edgeops.ops.conv.Conv.geometry``), so auto_pad rules live in one place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon.blocking import Blocking, from_tiling
from edgeops.targets.neon.gemm import gemm_flat
from edgeops.threads import SMALL_ELEMENTS, serial_if

_EMPTY = np.zeros(1, np.float32)
_COLS_BUDGET = 64 * 1024 * 1024  # bytes of im2col buffer per chunk of images

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@dataclass(frozen=True)
class ConvGeom:
    """A 2-D convolution's geometry, everything resolved (pads begin/end, output size)."""
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
    sh: int = 1
    sw: int = 1
    dh: int = 1
    dw: int = 1
    ph: int = 0      # top pad (bottom pad only shows up in oh)
    pw: int = 0      # left pad

    @property
    def cg(self) -> int:
        return self.c // self.group

    @property
    def kg(self) -> int:
        return self.k // self.group

    @property
    def macs(self) -> int:
        return self.n * self.k * self.oh * self.ow * self.cg * self.r * self.s

    @property
    def is_pointwise(self) -> bool:
        return (self.r, self.s, self.sh, self.sw, self.ph, self.pw) == (1, 1, 1, 1, 0, 0) \
            and (self.oh, self.ow) == (self.h, self.w)

    @property
    def is_depthwise(self) -> bool:
        return self.group == self.c and self.group > 1 and self.k % self.c == 0


# geom_from_attrs per (shapes, attributes): a package node asks for the same geometry on every
# call, and the op definition's window rules cost a noticeable share of a small 1x1 conv in
# Python (figures: docs/notes/neon-kernels.md). ConvGeom is frozen, so one instance can serve
# every caller.
_GEOMS: dict = {}
_GEOMS_MAX = 4096


def geom_from_attrs(x_shape, w_shape, attrs) -> ConvGeom:
    """ConvGeom from ONNX Conv/ConvBnAct attributes via the op definition's geometry rules
    (remembered per shapes and attribute values)."""
    try:
        key = (tuple(x_shape), tuple(w_shape), tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items())))
        hit = _GEOMS.get(key)
    except TypeError:       # an unhashable attribute value: work it out every time
        return _geom_from_attrs(x_shape, w_shape, attrs)
    if hit is None:
        hit = _geom_from_attrs(x_shape, w_shape, attrs)
        if len(_GEOMS) >= _GEOMS_MAX:
            _GEOMS.clear()
        _GEOMS[key] = hit
    return hit


def _geom_from_attrs(x_shape, w_shape, attrs) -> ConvGeom:
    from edgeops.ops.conv import Conv
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise EdgeOpsError(f"neon conv: only 2-D convolutions (4-D X and W) are implemented, got "
                           f"X {tuple(x_shape)}, W {tuple(w_shape)}; 1-D/3-D stay in ONNX Runtime")
    full = {"auto_pad": "NOTSET", "kernel_shape": None, "strides": None, "dilations": None,
            "pads": None, "group": 1, **{k: v for k, v in attrs.items() if v is not None}}
    begin, _end, out, s, d = Conv.geometry(full, tuple(x_shape), tuple(w_shape))
    n, c, h, w = x_shape
    return ConvGeom(n, c, h, w, w_shape[0], w_shape[2], w_shape[3], int(full["group"]),
                    out[0], out[1], s[0], s[1], d[0], d[1], begin[0], begin[1])


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _im2col(x, n0, nimg, C, H, W, G, Cg, R, S, OH, OW, sh, sw, dh, dw, ph, pw, cols, padval):
    """cols[((i*G + g)*Cg*R*S + (c*R + r)*S + s) * OH*OW + oh*OW + ow] = padded x. ``padval``
    fills the padding: 0, or the zero point for quantized activations (it represents 0.0)."""
    P = OH * OW
    rows = Cg * R * S
    for t in prange(nimg * G * rows):
        row = t % rows
        ig = t // rows
        i = ig // G
        g = ig % G
        c = row // (R * S)
        r = (row // S) % R
        s = row % S
        src = ((n0 + i) * C + g * Cg + c) * H * W
        for oh in range(OH):
            # slice views indexed by bare loop counters: no wrap-around select per element,
            # so the copies vectorise (see norms.py)
            cr = cols[t * P + oh * OW:t * P + (oh + 1) * OW]
            ih = oh * sh + r * dh - ph
            if ih < 0 or ih >= H:
                for ow in range(OW):
                    cr[ow] = padval
                continue
            xr = x[src + ih * W:src + (ih + 1) * W]
            off = s * dw - pw
            # ow range whose iw = ow*sw + off falls inside [0, W)
            lo = 0 if off >= 0 else (-off + sw - 1) // sw
            hi = min(OW, (W - 1 - off) // sw + 1) if W - 1 - off >= 0 else 0
            lo = min(lo, hi)
            for ow in range(lo):
                cr[ow] = padval
            if hi > lo:
                dst = cr[lo:hi]
                if sw == 1:
                    srcv = xr[lo + off:hi + off]
                    for q in range(hi - lo):
                        dst[q] = srcv[q]
                else:
                    srcv = xr[lo * sw + off:(hi - 1) * sw + off + 1:sw]
                    for q in range(hi - lo):
                        dst[q] = srcv[q]
            for ow in range(hi, OW):
                cr[ow] = padval


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _gemv(M, K, a, a_offs, b, b_offs, c, c_offs, bias, bias_offs, bias_mode, act, p0, p1):
    """C[c_off + i] = act(sum_k A[a_off + i*K + k] * B[b_off + k] + bias) per batch entry: the
    GEMM of a conv with one output pixel, which the 32-column register tile pads 32-fold.
    Eight partial sums over k mod 8, then added pairwise: a fixed order, so the Python
    and native paths give the same bits."""
    K8 = K // 8 * 8
    for bt in range(a_offs.shape[0]):
        ao, bo, co = a_offs[bt], b_offs[bt], c_offs[bt]
        xv = b[bo:bo + K]
        x2 = xv[:K8].reshape((K8 // 8, 8))
        for i in range(M):
            row = a[ao + i * K:ao + (i + 1) * K]
            # eight scalar chains over a (K/8, 8) view: bare loop counters and constant columns,
            # so no wrap-around selects (a heap array of partial sums would stay in memory)
            r2 = row[:K8].reshape((K8 // 8, 8))
            s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = np.float32(0)
            for j in range(K8 // 8):
                s0 += r2[j, 0] * x2[j, 0]
                s1 += r2[j, 1] * x2[j, 1]
                s2 += r2[j, 2] * x2[j, 2]
                s3 += r2[j, 3] * x2[j, 3]
                s4 += r2[j, 4] * x2[j, 4]
                s5 += r2[j, 5] * x2[j, 5]
                s6 += r2[j, 6] * x2[j, 6]
                s7 += r2[j, 7] * x2[j, 7]
            s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
            for k in range(K8, K):
                s += row[k] * xv[k]
            c[co + i] = s
        ep.finish_tile(c, co, 1, M, 1, bias, bias_offs[bt], bias_mode, 0, 0, act, p0, p1)


def check_conv_inputs(x, w, b, g: ConvGeom, dtype=np.float32, who="neon conv"):
    for name, t in (("X", x), ("W", w)):
        if not isinstance(t, np.ndarray) or t.dtype != dtype:
            raise EdgeOpsError(f"{who}: {name} must be a {np.dtype(dtype).name} numpy array, got "
                               f"{getattr(t, 'dtype', type(t).__name__)}")
    if x.shape != (g.n, g.c, g.h, g.w) or w.shape != (g.k, g.cg, g.r, g.s):
        raise EdgeOpsError(f"{who}: X {x.shape} / W {w.shape} do not match the geometry "
                           f"(N,C,H,W)=({g.n},{g.c},{g.h},{g.w}), W=({g.k},{g.cg},{g.r},{g.s})")
    if b is not None and np.size(b) != g.k:
        raise EdgeOpsError(f"{who}: bias has {np.size(b)} entries, need K={g.k}")
    if g.oh < 1 or g.ow < 1:
        raise EdgeOpsError(f"{who}: empty output {g.oh}x{g.ow}")


def conv2d_im2col(x, w, b, g: ConvGeom, act=(0, 0.0, 0.0), blocking: Blocking | None = None,
                  tiling=None) -> np.ndarray:
    """Y = act(conv(X, W) + B) via im2col + GEMM (any groups/strides/dilations/pads)."""
    check_conv_inputs(x, w, b, g)
    blocking = blocking or from_tiling(tiling)
    x = np.ascontiguousarray(x)
    wf = np.ascontiguousarray(w).reshape(-1)
    y = np.empty((g.n, g.k, g.oh, g.ow), np.float32)
    P, KK = g.oh * g.ow, g.cg * g.r * g.s
    bias = None if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
    mode = ep.BIAS_NONE if bias is None else ep.BIAS_ROW
    G = g.group
    if g.is_pointwise:
        # the image is already the (Cg x H*W) B operand of every (n, g)
        ng = np.arange(g.n * G, dtype=np.int64)
        gemm_flat(g.kg, P, KK, wf, (ng % G) * g.kg * KK, KK, 1, x.reshape(-1),
                  ng * (g.cg * P), P, 1, y.reshape(-1), ng * (g.kg * P), P, bias=bias,
                  bias_offs=(ng % G) * g.kg, bias_mode=mode, act=act, blocking=blocking)
        return y
    per_img = G * KK * P * 4
    chunk = max(1, min(g.n, _COLS_BUDGET // max(per_img, 1)))
    cols = np.empty(chunk * G * KK * P, np.float32)
    xf = x.reshape(-1)
    for n0 in range(0, g.n, chunk):
        nimg = min(chunk, g.n - n0)
        with serial_if(cols.size < SMALL_ELEMENTS):
            _im2col(xf, n0, nimg, g.c, g.h, g.w, G, g.cg, g.r, g.s, g.oh, g.ow, g.sh, g.sw, g.dh,
                    g.dw, g.ph, g.pw, cols, 0)
        ng = np.arange(nimg * G, dtype=np.int64)
        if P == 1:
            _gemv(g.kg, KK, wf, (ng % G) * g.kg * KK, cols, ng * KK, y.reshape(-1),
                  (n0 * G + ng) * g.kg, _EMPTY if bias is None else bias, (ng % G) * g.kg,
                  mode, act[0], float(act[1]), float(act[2]))
            continue
        gemm_flat(g.kg, P, KK, wf, (ng % G) * g.kg * KK, KK, 1, cols, ng * (KK * P), P, 1,
                  y.reshape(-1), (n0 * G + ng) * (g.kg * P), P, bias=bias,
                  bias_offs=(ng % G) * g.kg, bias_mode=mode, act=act, blocking=blocking)
    return y
