"""Observers: from the values a tensor took during calibration to its quantization range, and
the INT8 arithmetic of :mod:`edgeops.ops.qarith` (symmetric int8 weights per output channel, int8/uint8
activations per tensor with a zero point, int32 bias with scale s_in * s_w, QuantizeLinear
rounding: half to even, saturate).

Each activation observer keeps an exact running min/max and a bounded sample of the values
(every value while the sample is small; a uniform random subsample beyond ``SAMPLE_CAP``), and
computes its range from them at the end (collect -> compute).
"""
from __future__ import annotations

import numpy as np

from edgeops.errors import EdgeOpsError

METHODS = ("minmax", "percentile", "entropy", "mse")
SAMPLE_CAP = 1 << 21
QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}
WEIGHT_QMAX = 127      # symmetric int8 weights use [-127, 127] so that -w quantizes to -q


# ---- the arithmetic ------------------------------------------------------------------------

def quantize(x, scale, zero_point, qmin: int, qmax: int, axis: int | None = None) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point)."""
    x = np.asarray(x, np.float32)
    scale, zero_point = _bcast(scale, x, axis), _bcast(zero_point, x, axis)
    return np.clip(np.rint(x / scale) + zero_point, qmin, qmax)


def dequantize(q, scale, zero_point, axis: int | None = None) -> np.ndarray:
    q = np.asarray(q)
    return ((q.astype(np.int32) - _bcast(zero_point, q, axis).astype(np.int32)).astype(np.float32)
            * _bcast(scale, q, axis))


def fake_quantize(x, scale, zero_point, qmin, qmax, axis=None) -> np.ndarray:
    return dequantize(quantize(x, scale, zero_point, qmin, qmax, axis).astype(np.int32),
                      scale, zero_point, axis)


def _bcast(v, x, axis):
    v = np.asarray(v)
    if v.ndim == 0 or axis is None:
        return v
    shape = [1] * np.ndim(x)
    shape[axis] = -1
    return v.reshape(shape)


def activation_qparams(rmin: float, rmax: float, qtype: str = "int8") -> tuple[np.float32, int]:
    """(scale, zero point) of a per-tensor asymmetric range; the range always contains 0 so that
    zero (padding, ReLU) is exact."""
    qmin, qmax = QRANGE[qtype]
    rmin, rmax = min(float(rmin), 0.0), max(float(rmax), 0.0)
    scale = np.float32((rmax - rmin) / (qmax - qmin))
    if not scale > 0:
        return np.float32(1.0), (0 if qtype == "int8" else 0)
    zp = int(np.clip(np.rint(qmin - rmin / float(scale)), qmin, qmax))
    return scale, zp


def weight_qparams(w: np.ndarray, axis: int | None) -> np.ndarray:
    """Symmetric int8 scales: one per output channel along ``axis`` (or one per tensor)."""
    w = np.asarray(w, np.float32)
    if axis is None:
        amax = np.abs(w).max(initial=0.0)
    else:
        amax = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1, initial=0.0)
    scale = (np.asarray(amax, np.float64) / WEIGHT_QMAX).astype(np.float32)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


def weight_qparams_mse(w: np.ndarray, axis: int | None, grid=np.linspace(0.5, 1.0, 51)) -> np.ndarray:
    """Symmetric int8 scales whose clipping (a fraction of each channel's |w| max) gives the
    least squared error of the dequantized weights."""
    w = np.asarray(w, np.float32)
    rows = w.reshape(1, -1) if axis is None else np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    amax = np.abs(rows).max(axis=1, keepdims=True)
    best_err = np.full(len(rows), np.inf)
    best = np.ones(len(rows), np.float32)
    for a in grid:
        s = (amax * a / WEIGHT_QMAX).astype(np.float32)
        s = np.where(s > 0, s, np.float32(1.0))
        err = ((np.clip(np.rint(rows / s), -WEIGHT_QMAX, WEIGHT_QMAX) * s - rows) ** 2).sum(axis=1)
        better = err < best_err
        best_err[better], best[better] = err[better], s[better, 0]
    return best if axis is not None else best.reshape(())


def quantize_weight(w, axis, method: str = "minmax"):
    """(int8 weights, scales, zero points of 0) — symmetric, per output channel when axis
    given; ``method`` "minmax" (scale = max|w| / 127) or "mse" (clipped for least error)."""
    s = weight_qparams(w, axis) if method == "minmax" else weight_qparams_mse(w, axis)
    q = quantize(w, s, 0, -WEIGHT_QMAX, WEIGHT_QMAX, axis).astype(np.int8)
    return q, s, np.zeros(s.shape, np.int8)


def quantize_bias(b, s_in, s_w):
    """int32 bias with scale s_in * s_w (per channel when s_w is), zero point 0."""
    scale = (np.float32(s_in) * np.asarray(s_w, np.float32)).astype(np.float32)
    scale = np.broadcast_to(scale, np.shape(b)).astype(np.float32) if np.ndim(scale) else scale
    q = np.clip(np.rint(np.asarray(b, np.float64) / scale), -2**31, 2**31 - 1).astype(np.int32)
    return q, scale


# ---- observers ---------------------------------------------------------------------------------

class Observer:
    """Collects one activation tensor's values; ``compute()`` gives its (rmin, rmax)."""

    def __init__(self, qtype: str = "int8", seed: int = 0):
        self.qtype = qtype
        self.min, self.max = np.inf, -np.inf
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.rng = np.random.default_rng(seed)

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32).reshape(-1)
        if x.size == 0:
            return
        self.min, self.max = min(self.min, float(x.min())), max(self.max, float(x.max()))
        self.n += x.size
        kept = sum(p.size for p in self.parts)
        if kept + x.size > SAMPLE_CAP:   # keep the sample a uniform share of all values seen
            frac = SAMPLE_CAP / self.n
            self.parts = [p[self.rng.random(p.size) < frac * 1.0] for p in self.parts]
            x = x[self.rng.random(x.size) < frac]
        self.parts.append(x.copy())

    @property
    def values(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0, np.float32)

    def compute(self) -> tuple[float, float]:
        if self.n == 0:
            raise EdgeOpsError("an observer saw no data")
        return self._range()

    def _range(self):
        return self.min, self.max


class MinMaxObserver(Observer):
    pass


class PercentileObserver(Observer):
    def __init__(self, qtype="int8", seed=0, percentile: float = 99.999):
        super().__init__(qtype, seed)
        self.percentile = percentile

    def _range(self):
        v = self.values
        lo, hi = np.percentile(v, [100.0 - self.percentile, self.percentile])
        return float(lo), float(hi)


class EntropyObserver(Observer):
    """TensorRT's entropy calibration: a 2048-bin histogram of |x|; the threshold whose
    128-level quantization of the clipped histogram has the least KL divergence from it."""
    bins, levels = 2048, 128

    def _range(self):
        v = self.values
        amax = max(abs(self.min), abs(self.max))
        if amax == 0:
            return 0.0, 0.0
        hist, edges = np.histogram(np.abs(v), bins=self.bins, range=(0.0, amax))
        # as NVIDIA's pytorch-quantization: the zero spike (ReLU, padding) would dominate the
        # KL and pull the threshold in, and a one-sided tensor gets all 256 codes on [0, T]
        hist[0] = hist[1]
        t, _ = entropy_threshold(hist, edges, self.levels, neg=max(-self.min, 0.0))
        # the range is symmetric in TensorRT; clipping it to what was seen keeps one-sided
        # tensors (after ReLU) from wasting half the codes
        return max(self.min, -t), min(self.max, t)


def kl_for_bins(hist: np.ndarray, i: int, levels: int = 128) -> float:
    """KL(P || Q) of keeping the first ``i`` bins: P folds the outliers into bin i-1; Q merges
    the i bins into ``levels`` groups and spreads each group evenly over its non-empty bins."""
    hist = np.asarray(hist, np.float64)
    p = hist[:i].copy()
    p[i - 1] += hist[i:].sum()
    nz = hist[:i] != 0
    group = (np.arange(i) * levels) // i            # which of the levels each bin merges into
    sums = np.bincount(group, weights=hist[:i], minlength=levels)
    counts = np.bincount(group, weights=nz, minlength=levels)
    q = np.where(nz, sums[group] / np.maximum(counts[group], 1), 0.0)
    if p.sum() == 0 or q.sum() == 0:
        return np.inf
    p, q = p / p.sum(), q / q.sum()
    m = p > 0
    qm = np.maximum(q[m], 1e-12)      # smoothing, as TensorRT: an empty Q bin under mass in P
    return float(np.sum(p[m] * np.log(p[m] / qm)))


def entropy_threshold(hist, edges, levels: int = 128, neg: float | None = None
                      ) -> tuple[float, np.ndarray]:
    """(threshold, KL for every candidate bin count levels..len(hist)).

    ``neg``: how far below zero the tensor reaches (None: symmetric, TensorRT's case). The
    range is [-min(neg, T), T] with a zero point, so the codes that land on [0, T] number
    2 * levels * T / (T + min(neg, T)): all 256 for a one-sided tensor, 128 for a symmetric one."""
    n = len(hist)
    def lv(i):
        if neg is None:
            return levels
        t = float(edges[i])
        return int(min(2 * levels, max(levels, round(2 * levels * t / (t + min(neg, t))))))
    kls = np.array([kl_for_bins(hist, i, lv(i)) for i in range(levels, n + 1)])
    best = int(np.argmin(kls)) + levels
    return float(edges[best]), kls


class MSEObserver(Observer):
    """The clipping of the seen range (both ends scaled by one factor) whose fake-quantized
    values have the least mean squared error."""
    grid = np.linspace(0.2, 1.0, 81)

    def _range(self):
        v = self.values
        if v.size > 1 << 18:
            v = v[self.rng.choice(v.size, 1 << 18, replace=False)]
        qmin, qmax = QRANGE[self.qtype]
        best, arg = np.inf, (self.min, self.max)
        for a in self.grid:
            lo, hi = self.min * a, self.max * a
            s, z = activation_qparams(lo, hi, self.qtype)
            err = float(np.mean((fake_quantize(v, s, z, qmin, qmax) - v) ** 2))
            if err < best:
                best, arg = err, (lo, hi)
        return arg


OBSERVERS = {"minmax": MinMaxObserver, "percentile": PercentileObserver,
             "entropy": EntropyObserver, "mse": MSEObserver}


def make_observer(method: str, qtype: str = "int8", **kw) -> Observer:
    if method not in OBSERVERS:
        raise EdgeOpsError(f"unknown calibration method {method!r}; choose one of {', '.join(METHODS)}")
    if qtype not in QRANGE:
        raise EdgeOpsError(f"activation type must be int8 or uint8, not {qtype!r}")
    return OBSERVERS[method](qtype, **kw)
