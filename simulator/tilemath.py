"""Vectorised arithmetic of nested tilings of one loop dimension.

Everything here takes Python ints or numpy int64 arrays (one entry per tiling candidate) and
returns the same shape, so the search can evaluate millions of candidates at once.

A dimension of size ``D`` cut by a chain of tile sizes ``t1 >= t2 >= ...`` (outermost first; a
tile never exceeds its parent, a larger request is clamped to it) yields, at the innermost level,
a multiset of tile sizes: every block of size ``s`` is split into ``s // t`` full tiles and one
ragged tail of ``s % t``. :func:`classes` returns that multiset as (size, count) array pairs
(at most ``2**levels`` of them); sums of any per-tile function follow from it exactly, which is
how ragged tails are counted without enumerating tiles.

Sliding windows (convolution / pooling input read through output rows) are the one place where
a tile's position matters: the first and last tiles lose the rows that fall into the padding.
:func:`window_rows_clipped` sums the real (unpadded) input rows read by a one-level tiling in
closed form.
"""
from __future__ import annotations

import numpy as np


def cdiv(a, b):
    """Ceiling division for ints or int arrays."""
    return -(-a // b)


def roundup(a, g):
    return cdiv(a, g) * g


def classes(size, chain) -> list[tuple[np.ndarray, np.ndarray]]:
    """(tile size, count) pairs of the innermost level of ``chain`` over a dim of ``size``.

    Preconditions: ``size >= 1``; every tile size ``>= 1``. Sizes of empty classes are 0 with
    count 0, so ``sum(c * f(s))`` is exact whenever ``f(0)`` is finite.
    """
    out = [(np.asarray(size, dtype=np.int64), np.ones_like(np.asarray(size, dtype=np.int64)))]
    for t in chain:
        t = np.asarray(t, dtype=np.int64)
        nxt = []
        for s, c in out:
            tt = np.minimum(t, np.maximum(s, 1))
            q = s // tt
            r = s - q * tt
            nxt.append((tt * (q > 0), c * q))
            nxt.append((r, c * (r > 0)))
        out = nxt
    return out


def count(size, chain):
    """Number of innermost-level tiles (blocks included ragged ones)."""
    if not len(chain):
        return np.ones_like(np.asarray(size, dtype=np.int64))
    return sum(c for _, c in classes(size, chain))


def padded_sum(size, chain, g):
    """Sum over innermost tiles of the tile size rounded up to ``g`` (``g=1``: equals ``size``)."""
    return sum(c * roundup(s, g) for s, c in classes(size, chain))


def window_rows(t, stride, extent):
    """Input rows a tile of ``t`` output rows spans, padding included: (t-1)*stride + extent."""
    t = np.asarray(t, dtype=np.int64)
    return np.where(t > 0, (t - 1) * stride + extent, 0)


def window_sum_unclipped(size, chain, stride, extent):
    """Sum of :func:`window_rows` over the innermost tiles (halo re-reads included)."""
    return sum(c * window_rows(s, stride, extent) for s, c in classes(size, chain))


def window_rows_clipped(out, t, stride, extent, pad_begin, in_size):
    """Real input rows (padding excluded) read by tiling ``out`` output rows in tiles of ``t``.

    Tile ``i`` covers output rows ``[i*t, min((i+1)*t, out))`` and reads input rows
    ``[o0*stride - pad_begin, (o1-1)*stride - pad_begin + extent - 1]`` clipped to
    ``[0, in_size)``. Closed form: the unclipped sum minus the rows cut at the top (an arithmetic
    series over the first tiles) and at the bottom (a series over the last full tiles plus the
    tail). Exact when every tile touches at least one real row, which holds whenever both pads are
    smaller than ``extent`` (see :func:`window_rows_clipped_enum` otherwise).
    """
    t = np.asarray(t, dtype=np.int64)
    t = np.minimum(t, out)
    n = cdiv(out, t)
    total = stride * out + n * (extent - stride)
    ts = t * stride
    # top: tile i loses max(0, pad_begin - i*t*stride) rows
    if pad_begin > 0:
        k = np.minimum(n, cdiv(pad_begin, ts))
        total = total - (k * pad_begin - ts * k * (k - 1) // 2)
    # bottom: full tile i (1-based j = i+1) ends at row j*t*s - s - pad + extent - 1
    c0 = stride + pad_begin + in_size - extent
    q = out // t
    j0 = np.maximum(1, c0 // ts + 1)
    m = np.maximum(q - j0 + 1, 0)
    total = total - np.where(m > 0, ts * (q * (q + 1) // 2 - (j0 - 1) * j0 // 2) - c0 * m, 0)
    tail_excess = max(0, (out - 1) * stride - pad_begin + extent - in_size)
    total = total - np.where(out % t > 0, tail_excess, 0)
    return total


def window_rows_clipped_enum(out, t, stride, extent, pad_begin, in_size) -> int:
    """Reference for :func:`window_rows_clipped` by enumerating tiles (scalar ``t``)."""
    total = 0
    for o0 in range(0, out, t):
        o1 = min(o0 + t, out)
        lo = o0 * stride - pad_begin
        hi = (o1 - 1) * stride - pad_begin + extent - 1
        total += max(0, min(hi, in_size - 1) - max(lo, 0) + 1)
    return total


def window_rows_used(out, stride, dilation, kernel, pad_begin, in_size) -> int:
    """Input rows any output row actually reads (compulsory traffic of a strided window)."""
    used = np.zeros(in_size, dtype=bool)
    taps = np.arange(kernel) * dilation
    for o in range(out):
        rows = o * stride - pad_begin + taps
        used[rows[(rows >= 0) & (rows < in_size)]] = True
    return int(used.sum())
