"""MaxPool / AveragePool (2-D, NCHW) and GlobalAveragePool, with a fused activation.

Separable windows: per output row, the window's valid input rows are reduced into one scratch
row (contiguous vector passes), then one pass per column tap over the output columns it reaches.
Average-pool divisors are separable too (valid rows x valid columns), so counting needs no
per-element mask. Geometry (pads incl. auto_pad and the ceil_mode
overhang) is resolved by the op definitions' rules in ``edgeops.ops._window``.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon._threads import alone_or_pool

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}
U = np.uint64


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _span(off, sw, W, OW):
    lo = 0 if off >= 0 else (-off + sw - 1) // sw
    hi = min(OW, (W - 1 - off) // sw + 1) if W - 1 - off >= 0 else 0
    return min(lo, hi), hi


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _pool_kernel(x, y, planes, H, W, OH, OW, R, S, sh, sw, dh, dw, ph, pw, eh, ew, is_max,
                 include_pad, act, p0, p1, cols, spans):
    # Separable: per output row, the window's valid input rows are reduced into one row ``v``
    # of W (contiguous: vectorises), then each tap adds its valid output columns of that row.
    # ``cols``: per output column, its number of counted taps (average pooling's divisor part);
    # ``spans``: per tap, the output columns [lo, hi) it reads inside the row (two integer
    # divisions each: worked out once, not per row).
    # Indices are flat and unsigned (U): a signed index gets Numba's wrap-around select, which
    # keeps loads from vectorising, and a slice view per row or tap costs more than the work
    # (reference counting): ~25 ns each, measured.
    for t in prange(planes):
        xb = t * H * W
        yb = t * OH * OW
        v = np.empty(W, np.float32)
        for oh in range(OH):
            first = True
            nrows = 0
            for r in range(R):
                ih = oh * sh + r * dh - ph
                if include_pad and -ph <= ih < H + eh:
                    nrows += 1
                if ih < 0 or ih >= H:
                    continue
                if not include_pad:
                    nrows += 1
                xr = U(xb + ih * W)
                if first:
                    for i in range(W):
                        v[i] = x[xr + U(i)]
                    first = False
                elif is_max:
                    for i in range(W):
                        v[i] = max(v[i], x[xr + U(i)])
                else:
                    for i in range(W):
                        v[i] += x[xr + U(i)]
            yr = yb + oh * OW
            init = np.float32(-np.inf) if is_max else np.float32(0)
            for ow in range(OW):
                y[U(yr + ow)] = init
            if not first:
                for s in range(S):
                    off = s * dw - pw
                    lo, hi = spans[2 * s], spans[2 * s + 1]
                    if hi <= lo:
                        continue
                    yo = U(yr + lo)
                    vo = U(lo * sw + off)
                    n = hi - lo
                    if sw == 1:
                        if is_max:
                            for q in range(n):
                                y[yo + U(q)] = max(y[yo + U(q)], v[vo + U(q)])
                        else:
                            for q in range(n):
                                y[yo + U(q)] += v[vo + U(q)]
                    elif sw == 2:
                        if is_max:
                            for q in range(n):
                                y[yo + U(q)] = max(y[yo + U(q)], v[vo + U(2 * q)])
                        else:
                            for q in range(n):
                                y[yo + U(q)] += v[vo + U(2 * q)]
                    else:
                        if is_max:
                            for q in range(n):
                                y[yo + U(q)] = max(y[yo + U(q)], v[vo + U(q * sw)])
                        else:
                            for q in range(n):
                                y[yo + U(q)] += v[vo + U(q * sw)]
            if not is_max:
                d = np.float32(max(nrows, 1))
                for ow in range(OW):
                    y[U(yr + ow)] = y[U(yr + ow)] / (cols[ow] * d)
            if act != ep.NONE:
                out = y[yr:yr + OW]
                ep.act_copy(out, out, OW, act, p0, p1)


@njit(cache=True)
def _spans(W, OW, S, sw, dw, pw):
    out = np.empty(2 * S, np.int64)
    for s in range(S):
        out[2 * s], out[2 * s + 1] = _span(s * dw - pw, sw, W, OW)
    return out


def _column_counts(W, OW, S, sw, dw, pw, ew, include_pad) -> np.ndarray:
    """Per output column, how many of its taps average pooling counts: the taps inside the
    input, or inside the padded input with ``count_include_pad``."""
    iw = np.arange(OW)[:, None] * sw + np.arange(S)[None, :] * dw - pw
    ok = (iw >= -pw) & (iw < W + ew) if include_pad else (iw >= 0) & (iw < W)
    return ok.sum(axis=1).astype(np.float32)


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
    cols, spans = _columns(w, ow, s, int(strides[1]), int(dilations[1]), int(pads_begin[1]),
                           int(pads_end[1]), bool(count_include_pad))
    key = ("pool", x.shape, kind, tuple(kernel), tuple(strides), tuple(dilations),
           tuple(pads_begin), tuple(pads_end), a)
    with alone_or_pool(key, x.size):
        _pool_kernel(x.reshape(-1), y.reshape(-1), n * c, h, w, oh, ow, r, s, strides[0],
                     strides[1], dilations[0], dilations[1], pads_begin[0], pads_begin[1],
                     pads_end[0], pads_end[1], kind == "max", bool(count_include_pad), a[0], a[1],
                     a[2], cols, spans)
    return y


@functools.lru_cache(maxsize=1024)
def _columns(W, OW, S, sw, dw, pw, ew, include_pad):
    """(column counts, tap spans) of a row geometry, worked out once (read-only arrays: ~15 us
    of numpy per call otherwise, a tenth of a small pooling node)."""
    cols = _column_counts(W, OW, S, sw, dw, pw, ew, include_pad)
    spans = _spans(W, OW, S, sw, dw, pw)
    cols.flags.writeable = spans.flags.writeable = False
    return cols, spans


def pool_from_attrs(x, kind: str, attrs: dict, act=None) -> np.ndarray:
    """MaxPool/AveragePool with ONNX attributes (2-D only)."""
    from edgeops.ops import _window as win
    if x.ndim != 4:
        raise EdgeOpsError(f"neon pool: only 2-D pooling (4-D X) is implemented, got {x.shape}")
    try:
        key = (tuple(x.shape[2:]), tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items())))
        geo = _GEOMS.get(key)
    except TypeError:       # an unhashable attribute value: work it out every time
        key, geo = None, None
    if geo is None:
        ks = tuple(attrs["kernel_shape"])
        full = {"auto_pad": "NOTSET", "strides": None, "dilations": None, "pads": None, **attrs}
        geo = (ks, *win.geometry("Pool", full, x.shape[2:], ks, bool(attrs.get("ceil_mode", 0))))
        if key is not None:
            if len(_GEOMS) >= 4096:
                _GEOMS.clear()
            _GEOMS[key] = geo
    ks, b, e, out, st, d = geo
    return pool2d(x, kind, ks, st, d, b, e, out, bool(attrs.get("count_include_pad", 0)), act)


_GEOMS: dict = {}     # (spatial shape, attribute values) -> window geometry


def global_avgpool(x) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim < 3:
        raise EdgeOpsError("neon global_avgpool: X must be a float32 array (N, C, spatial...)")
    x = np.ascontiguousarray(x)
    size = int(np.prod(x.shape[2:], dtype=np.int64))
    y = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), np.float32)
    with alone_or_pool(("gap", x.shape), x.size):
        _gap_kernel(x.reshape(-1), y.reshape(-1), x.shape[0] * x.shape[1], size)
    return y
