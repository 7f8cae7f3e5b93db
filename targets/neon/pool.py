"""MaxPool / AveragePool (2-D, NCHW) and GlobalAveragePool, with a fused activation.

Separable windows: per output row, the window's valid input rows are reduced into one scratch
row (contiguous vector passes) padded with the identity (-inf, 0), then one pass over the output
columns applies every column tap with no bounds to check.
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
from edgeops.threads import alone_or_pool

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}
U = np.uint64


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _pool_kernel(x, y, planes, H, W, OH, OW, R, S, sh, sw, dh, dw, ph, pw, eh, is_max,
                 include_pad, act, p0, p1, cols, wp):
    # Separable: per output row, the window's valid input rows are reduced into one row of W
    # (contiguous: vectorises), written into the middle of a padded row ``vp`` of ``wp``
    # elements whose margins hold the identity (-inf for max, 0 for average): every tap of every
    # output column then reads inside ``vp`` and one pass over the output columns applies all
    # the taps, with no per-tap bounds. Up to three valid rows are reduced in one pass (a max
    # window repeats a valid row where fewer are inside), and three-tap windows with column
    # stride 1 or 2 and two-tap ones with stride 2 (the usual 3x3 and 2x2 pools) get their own
    # one-pass loops: on 27x27 planes one output row is 13 columns, so each extra pass over a
    # row costs about as much as its work (figures: docs/notes/neon-kernels.md; the same sums in
    # the same order, so the same bits).
    # ``cols``: per output column, its number of counted taps (average pooling's divisor part).
    # Indices are flat and unsigned (U): a signed index gets Numba's wrap-around select, which
    # keeps loads from vectorising, and a slice view per row or tap costs more than the work
    # (reference counting).
    fill = np.float32(-np.inf) if is_max else np.float32(0)
    for t in prange(planes):
        xb = t * H * W
        yb = t * OH * OW
        vp = np.empty(wp, np.float32)
        for i in range(wp):
            vp[i] = fill
        for oh in range(OH):
            nrows = 0       # rows average pooling counts
            nvalid = 0      # rows inside the input: r0, r0 + dh, ... (a window's valid rows
            r0 = 0          # are consecutive taps)
            for r in range(R):
                ih = oh * sh + r * dh - ph
                if include_pad and -ph <= ih < H + eh:
                    nrows += 1
                if ih < 0 or ih >= H:
                    continue
                if not include_pad:
                    nrows += 1
                if nvalid == 0:
                    r0 = ih
                nvalid += 1
            yr = U(yb + oh * OW)
            d = np.float32(max(nrows, 1))   # average pooling's divisor: cols[q] * d
            if nvalid == 0:             # a window wholly in the padding
                for q in range(OW):
                    y[yr + U(q)] = fill if is_max else fill / (cols[q] * d)
            else:
                _rows(x, vp, U(xb), W, pw, r0, dh, nvalid, is_max)
                _taps(vp, y, yr, OW, S, sw, dw, is_max, cols, d)
            if act != ep.NONE:
                out = y[yr:yr + U(OW)]
                ep.act_copy(out, out, OW, act, p0, p1)


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _rows(x, vp, xb, W, pw, r0, dh, nvalid, is_max):
    """The window's ``nvalid`` valid input rows (r0, r0 + dh, ...) reduced into
    ``vp[pw:pw + W]``; a max over fewer than three repeats its last row."""
    o = U(pw)
    a0 = xb + U(r0 * W)
    a1 = xb + U((r0 + min(1, nvalid - 1) * dh) * W)
    a2 = xb + U((r0 + min(2, nvalid - 1) * dh) * W)
    if is_max and nvalid <= 3:
        for i in range(W):
            vp[o + U(i)] = max(max(x[a0 + U(i)], x[a1 + U(i)]), x[a2 + U(i)])
    elif nvalid == 3:
        for i in range(W):
            vp[o + U(i)] = x[a0 + U(i)] + x[a1 + U(i)] + x[a2 + U(i)]
    elif nvalid == 2:
        for i in range(W):
            vp[o + U(i)] = x[a0 + U(i)] + x[a1 + U(i)]
    else:
        for i in range(W):
            vp[o + U(i)] = x[a0 + U(i)]
        for k in range(1, nvalid):  # more than three rows: one more pass each
            ar = xb + U((r0 + k * dh) * W)
            if is_max:
                for i in range(W):
                    vp[o + U(i)] = max(vp[o + U(i)], x[ar + U(i)])
            else:
                for i in range(W):
                    vp[o + U(i)] += x[ar + U(i)]


@njit(cache=True, inline="always", fastmath=_FM, error_model="numpy")
def _taps(vp, y, yr, OW, S, sw, dw, is_max, cols, d):
    """Output row ``y[yr:yr + OW]`` from the padded reduced row: tap s of column q reads
    ``vp[q * sw + s * dw]``; an average is divided by ``cols[q] * d`` in the same pass."""
    if S == 3 and dw == 1 and sw == 2:
        if is_max:
            for q in range(OW):
                y[yr + U(q)] = max(max(vp[U(2 * q)], vp[U(2 * q + 1)]), vp[U(2 * q + 2)])
        else:
            for q in range(OW):
                y[yr + U(q)] = (vp[U(2 * q)] + vp[U(2 * q + 1)] + vp[U(2 * q + 2)]) / (cols[q] * d)
    elif S == 3 and dw == 1 and sw == 1:
        if is_max:
            for q in range(OW):
                y[yr + U(q)] = max(max(vp[U(q)], vp[U(q + 1)]), vp[U(q + 2)])
        else:
            for q in range(OW):
                y[yr + U(q)] = (vp[U(q)] + vp[U(q + 1)] + vp[U(q + 2)]) / (cols[q] * d)
    elif S == 2 and dw == 1 and sw == 2:
        if is_max:
            for q in range(OW):
                y[yr + U(q)] = max(vp[U(2 * q)], vp[U(2 * q + 1)])
        else:
            for q in range(OW):
                y[yr + U(q)] = (vp[U(2 * q)] + vp[U(2 * q + 1)]) / (cols[q] * d)
    else:
        for q in range(OW):
            y[yr + U(q)] = vp[U(q * sw)]
        for s in range(1, S):
            o = U(s * dw)
            if is_max:
                for q in range(OW):
                    y[yr + U(q)] = max(y[yr + U(q)], vp[o + U(q * sw)])
            else:
                for q in range(OW):
                    y[yr + U(q)] += vp[o + U(q * sw)]
        if not is_max:
            for q in range(OW):
                y[yr + U(q)] = y[yr + U(q)] / (cols[q] * d)


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
    k = _call(x.shape, kind, kernel, strides, dilations, pads_begin, pads_end, out_hw,
              count_include_pad, act)
    y = np.empty(k["y_shape"], np.float32)
    with alone_or_pool(k["key"], x.size):
        _pool_kernel(x.reshape(-1), y.reshape(-1), *k["args"])
    return y


def _call(shape, kind, kernel, strides, dilations, pads_begin, pads_end, out_hw,
          count_include_pad, act) -> dict:
    """The pooling kernel's arguments after X and Y, Y's shape and the thread-choice key."""
    n, c, h, w = shape
    (oh, ow), (r, s) = out_hw, kernel
    a = act if isinstance(act, tuple) else ep.activation(act)
    sw, dw, pw = int(strides[1]), int(dilations[1]), int(pads_begin[1])
    cols = _columns(w, ow, s, sw, dw, pw, int(pads_end[1]), bool(count_include_pad))
    wp = max(w + pw, (ow - 1) * sw + (s - 1) * dw + 1)     # the padded row every tap reads in
    key = ("pool", tuple(shape), kind, tuple(kernel), tuple(strides), tuple(dilations),
           tuple(pads_begin), tuple(pads_end), a)
    return {"y_shape": (n, c, oh, ow), "key": key,
            "args": (n * c, h, w, oh, ow, r, s, strides[0], sw, dilations[0], dw,
                     pads_begin[0], pw, pads_end[0], kind == "max", bool(count_include_pad),
                     a[0], a[1], a[2], cols, wp)}


@functools.lru_cache(maxsize=1024)
def _columns(W, OW, S, sw, dw, pw, ew, include_pad):
    """Column counts of a row geometry, worked out once (a read-only array: numpy per call
    otherwise is a noticeable share of a small pooling node)."""
    cols = _column_counts(W, OW, S, sw, dw, pw, ew, include_pad)
    cols.flags.writeable = False
    return cols


def pool_from_attrs(x, kind: str, attrs: dict, act=None) -> np.ndarray:
    """MaxPool/AveragePool with ONNX attributes (2-D only)."""
    if x.ndim != 4:
        raise EdgeOpsError(f"neon pool: only 2-D pooling (4-D X) is implemented, got {x.shape}")
    ks, b, e, out, st, d = _geometry(x.shape, attrs)
    return pool2d(x, kind, ks, st, d, b, e, out, bool(attrs.get("count_include_pad", 0)), act)


def pool_call(shape, kind: str, attrs: dict, act=None) -> dict:
    """What :func:`pool_from_attrs` calls its kernel with for X of ``shape`` (a native step
    holds it): the arguments after X and Y, Y's shape and the thread-choice key."""
    ks, b, e, out, st, d = _geometry(shape, attrs)
    return _call(shape, kind, ks, st, d, b, e, out, bool(attrs.get("count_include_pad", 0)), act)


def _geometry(shape, attrs):
    from edgeops.ops import _window as win
    try:
        key = (tuple(shape[2:]), tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items())))
        geo = _GEOMS.get(key)
    except TypeError:       # an unhashable attribute value: work it out every time
        key, geo = None, None
    if geo is None:
        ks = tuple(attrs["kernel_shape"])
        full = {"auto_pad": "NOTSET", "strides": None, "dilations": None, "pads": None, **attrs}
        geo = (ks, *win.geometry("Pool", full, shape[2:], ks, bool(attrs.get("ceil_mode", 0))))
        if key is not None:
            if len(_GEOMS) >= 4096:
                _GEOMS.clear()
            _GEOMS[key] = geo
    return geo


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
