"""MaxPool / AveragePool (2-D, NCHW) and GlobalAveragePool, with a fused activation.

Same row scheme as the depthwise conv: one output row in a scratch buffer, one vector pass per
window tap over the valid ``ow`` range. Average-pool divisors are separable (valid rows x valid
columns), so counting needs no per-element mask. Geometry (pads incl. auto_pad and the ceil_mode
overhang) is resolved by the op definitions' rules in ``edgeops.ops._window``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon._threads import SMALL_ELEMENTS, serial_if

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _span(off, sw, W, OW):
    lo = 0 if off >= 0 else (-off + sw - 1) // sw
    hi = min(OW, (W - 1 - off) // sw + 1) if W - 1 - off >= 0 else 0
    return min(lo, hi), hi


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _pool_kernel(x, y, planes, H, W, OH, OW, R, S, sh, sw, dh, dw, ph, pw, eh, ew, is_max,
                 include_pad, act, p0, p1):
    for t in prange(planes):
        xp = x[t * H * W:(t + 1) * H * W]
        yp = y[t * OH * OW:(t + 1) * OH * OW]
        row = np.empty(OW, np.float32)
        cnt = np.empty(OW, np.float32)
        for oh in range(OH):
            for ow in range(OW):
                row[ow] = -np.inf if is_max else 0
            nrows = 0
            for r in range(R):
                ih = oh * sh + r * dh - ph
                if include_pad and -ph <= ih < H + eh:
                    nrows += 1
                if ih < 0 or ih >= H:
                    continue
                if not include_pad:
                    nrows += 1
                xr = xp[ih * W:(ih + 1) * W]
                for s in range(S):
                    off = s * dw - pw
                    lo, hi = _span(off, sw, W, OW)
                    if hi <= lo:
                        continue
                    rv = row[lo:hi]
                    if sw == 1:  # a step-less slice stays contiguous (a stepped one does not)
                        xs1 = xr[lo + off:hi + off]
                        if is_max:
                            for q in range(hi - lo):
                                rv[q] = max(rv[q], xs1[q])
                        else:
                            for q in range(hi - lo):
                                rv[q] += xs1[q]
                    else:
                        xs = xr[lo * sw + off:(hi - 1) * sw + off + 1:sw]
                        if is_max:
                            for q in range(hi - lo):
                                rv[q] = max(rv[q], xs[q])
                        else:
                            for q in range(hi - lo):
                                rv[q] += xs[q]
            if not is_max:
                for ow in range(OW):
                    cnt[ow] = 0
                for s in range(S):
                    off = s * dw - pw
                    if include_pad:
                        lo, hi = _span(off + pw, sw, W + pw + ew, OW)
                    else:
                        lo, hi = _span(off, sw, W, OW)
                    for ow in range(lo, hi):
                        cnt[ow] += 1
                for ow in range(OW):
                    row[ow] = row[ow] / (cnt[ow] * nrows)
            ep.act_copy(row, yp[oh * OW:(oh + 1) * OW], OW, act, p0, p1)


@njit(parallel=True, cache=True, fastmath={"reassoc", "contract", "nsz"}, error_model="numpy")
def _gap_kernel(x, y, planes, size):
    for t in prange(planes):
        s = 0.0
        for i in range(size):
            s += x[t * size + i]
        y[t] = np.float32(s / size)


def pool2d(x, kind: str, kernel, strides, dilations, pads_begin, pads_end, out_hw,
           count_include_pad=False, act=None) -> np.ndarray:
    """kind "max" | "avg". ``pads_end`` includes any ceil_mode overhang for max; for avg pass the
    real end pads (overhang taps are skipped by bounds and never counted)."""
    if kind not in ("max", "avg"):
        raise EdgeOpsError(f"neon pool: kind must be 'max' or 'avg', got {kind!r}")
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4:
        raise EdgeOpsError(f"neon pool: X must be a 4-D float32 array (N, C, H, W), got "
                           f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    x = np.ascontiguousarray(x)
    n, c, h, w = x.shape
    (oh, ow), (r, s) = out_hw, kernel
    y = np.empty((n, c, oh, ow), np.float32)
    a = act if isinstance(act, tuple) else ep.activation(act)
    with serial_if(x.size < SMALL_ELEMENTS):
        _pool_kernel(x.reshape(-1), y.reshape(-1), n * c, h, w, oh, ow, r, s, strides[0],
                     strides[1], dilations[0], dilations[1], pads_begin[0], pads_begin[1],
                     pads_end[0], pads_end[1], kind == "max", bool(count_include_pad), a[0], a[1],
                     a[2])
    return y


def pool_from_attrs(x, kind: str, attrs: dict, act=None) -> np.ndarray:
    """MaxPool/AveragePool with ONNX attributes (2-D only)."""
    from edgeops.ops import _window as win
    if x.ndim != 4:
        raise EdgeOpsError(f"neon pool: only 2-D pooling (4-D X) is implemented, got {x.shape}")
    ks = tuple(attrs["kernel_shape"])
    full = {"auto_pad": "NOTSET", "strides": None, "dilations": None, "pads": None, **attrs}
    b, e, out, st, d = win.geometry("Pool", full, x.shape[2:], ks, bool(attrs.get("ceil_mode", 0)))
    return pool2d(x, kind, ks, st, d, b, e, out, bool(attrs.get("count_include_pad", 0)), act)


def global_avgpool(x) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim < 3:
        raise EdgeOpsError("neon global_avgpool: X must be a float32 array (N, C, spatial...)")
    x = np.ascontiguousarray(x)
    size = int(np.prod(x.shape[2:], dtype=np.int64))
    y = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), np.float32)
    with serial_if(x.size < SMALL_ELEMENTS):
        _gap_kernel(x.reshape(-1), y.reshape(-1), x.shape[0] * x.shape[1], size)
    return y
