"""Fused SwiGLU: Y = silu(X @ W1 + B1) * (X @ W2 + B2) in one pass over each output tile.

W1 and W2 are packed side by side, [W1 panel | W2 panel] per NR columns, so ONE micro-kernel
(``mk_f32_glu``, SMR x 2NR) computes the gate and the up tile from the same broadcast of X: X is
read once for both products, the two (M, F) intermediates of the unfused graph never reach
memory, and silu(gate) * up is applied while the tile is still in L1/L2.

Loop nest per work item (an mc-row block of X and an nc-column block of F)::

    for pc in D, step kc:          pack the X block (mc x kc)
      for jr in the nc block:      [W1|W2] micro-panel (prepacked once per call)
        for ir in rows, step SMR:  gate/up partial sums into a per-item mc x 2nc scratch (L2)
    epilogue: Y = silu(gate + B1) * (up + B2)

The weights are packed once and cached while the same weight arrays are passed (see
``packed_weights``), as ONNX Runtime prepacks constant MatMul weights.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon import _vmath as vm
from edgeops.targets.neon._microkernel import NR, SMR, mk_f32_glu
from edgeops.targets.neon._pack import pack_a
from edgeops.threads import SMALL_FLOPS, serial_if
from edgeops.targets.neon.blocking import Blocking, from_tiling

NR2 = 2 * NR

# fastmath: "contract" only (mul+add -> FMA: one rounding, no reassociation, NaN/inf kept)
_FM = {"contract"}


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _pack_weights(w1, w2, D, F, kc, bp):
    """bp[pc*npan*2NR + jp*kb*2NR + p*2NR + (0|NR) + j] = (W1|W2)[pc+p, jp*NR+j], zero-padded."""
    npan = (F + NR - 1) // NR
    for jp in prange(npan):
        for pc in range(0, D, kc):
            kb = min(kc, D - pc)
            base = pc * npan * NR2 + jp * kb * NR2
            full = (jp + 1) * NR <= F
            for p in range(kb):
                row = (pc + p) * F + jp * NR
                dst = base + p * NR2
                if full:  # branch-free copy: vectorises
                    for j in range(NR):
                        bp[dst + j] = w1[row + j]
                    for j in range(NR):
                        bp[dst + NR + j] = w2[row + j]
                else:
                    for j in range(NR):
                        inside = jp * NR + j < F
                        bp[dst + j] = w1[row + j] if inside else 0
                        bp[dst + NR + j] = w2[row + j] if inside else 0


@njit(parallel=True, cache=True, fastmath=_FM, error_model="numpy")
def _swiglu_kernel(x, M, D, F, bp, b1, b2, has_b1, has_b2, y, mc, pan_blk, kc):
    npan = (F + NR - 1) // NR
    n_ic = (M + mc - 1) // mc
    n_jc = (npan + pan_blk - 1) // pan_blk
    ldc = pan_blk * NR2
    for it in prange(n_ic * n_jc):
        ic = (it // n_jc) * mc
        jb = it % n_jc
        mb = min(mc, M - ic)
        rows = ((mb + SMR - 1) // SMR) * SMR
        ap = np.empty(rows * kc, np.float32)
        acc = np.empty(rows * ldc, np.float32)
        for pc in range(0, D, kc):
            kb = min(kc, D - pc)
            pack_a(x, 0, D, 1, ic, mb, pc, kb, ap, SMR)
            for jpl in range(pan_blk):
                jp = jb * pan_blk + jpl
                if jp >= npan:
                    break
                boff = pc * npan * NR2 + jp * kb * NR2
                for ir in range(0, mb, SMR):
                    mk_f32_glu(kb, ap, ir * kb, bp, boff, NR2, acc, ir * ldc + jpl * NR2, ldc,
                               pc > 0)
        for jpl in range(pan_blk):
            jp = jb * pan_blk + jpl
            if jp >= npan:
                break
            ncol = min(NR, F - jp * NR)
            for i in range(mb):
                src = i * ldc + jpl * NR2
                dst = (ic + i) * F + jp * NR
                for j in range(ncol):
                    g = acc[src + j]
                    u = acc[src + NR + j]
                    if has_b1:
                        g += b1[jp * NR + j]
                    if has_b2:
                        u += b2[jp * NR + j]
                    y[dst + j] = vm.silu32(g) * u


# Packed [W1|W2] panels keyed by the weight arrays' identity: weights are constants of a model,
# so, as ONNX Runtime prepacks MatMul weights at session start, the packing is paid once. An
# entry is used only while both original arrays are alive and are the same objects.
_PACKED: dict[tuple, tuple] = {}
_PACKED_MAX = 16


def packed_weights(w1: np.ndarray, w2: np.ndarray, kc: int, cache: bool = True) -> np.ndarray:
    import weakref
    D, F = w1.shape
    key = (id(w1), id(w2), w1.ctypes.data, w2.ctypes.data, D, F, kc)
    hit = _PACKED.get(key) if cache else None
    if hit is not None and hit[0]() is w1 and hit[1]() is w2:
        return hit[2]
    bp = np.empty(-(-F // NR) * NR2 * D, np.float32)
    _pack_weights(w1.reshape(-1), w2.reshape(-1), D, F, kc, bp)
    if cache:
        if len(_PACKED) >= _PACKED_MAX:
            _PACKED.pop(next(iter(_PACKED)))
        _PACKED[key] = (weakref.ref(w1), weakref.ref(w2), bp)
    return bp


def _f32(name, t):
    if not isinstance(t, np.ndarray) or t.dtype != np.float32:
        raise EdgeOpsError(f"neon swiglu: {name} must be a float32 numpy array, got "
                           f"{getattr(t, 'dtype', type(t).__name__)}")
    return np.ascontiguousarray(t)


def swiglu(x, w1, w2, b1=None, b2=None, *, blocking: Blocking | None = None,
           tiling=None, cache_weights: bool = True) -> np.ndarray:
    """ai.edgeops SwiGLU: X (..., D), W1 = W2 (D, F), B1/B2 (F,) optional -> (..., F).
    ``cache_weights``: reuse the packed weights while W1/W2 are the same (unmodified) arrays;
    pass False if they are modified in place between calls."""
    x = _f32("X", x)
    if not (isinstance(w1, np.ndarray) and w1.flags.c_contiguous):
        cache_weights = False  # a temporary contiguous copy has no stable identity
    if not (isinstance(w2, np.ndarray) and w2.flags.c_contiguous):
        cache_weights = False
    w1, w2 = _f32("W1", w1), _f32("W2", w2)
    if w1.ndim != 2 or w1.shape != w2.shape or x.ndim < 1 or x.shape[-1] != w1.shape[0]:
        raise EdgeOpsError(f"neon swiglu: need X (..., D), W1 = W2 (D, F); got X {x.shape}, "
                           f"W1 {w1.shape}, W2 {w2.shape}")
    D, F = w1.shape
    bs = []
    for name, b in (("B1", b1), ("B2", b2)):
        if b is not None:
            b = _f32(name, b).reshape(-1)
            if b.size != F:
                raise EdgeOpsError(f"neon swiglu: {name} has {b.size} entries, need F={F}")
        bs.append(b)
    M = int(np.prod(x.shape[:-1], dtype=np.int64))
    y = np.empty(x.shape[:-1] + (F,), np.float32)
    if M == 0 or F == 0:
        return y
    if D == 0:
        raise EdgeOpsError("neon swiglu: D == 0 is not supported")
    bl = (blocking or from_tiling(tiling)).normalized()
    # the per-item scratch (mc x 2nc) should stay in L2 next to the X block: cap nc at 256
    # columns (measured best: docs/notes/neon-kernels.md); mc likewise at 64 rows
    mc = max(SMR, min(bl.mc, 64) // SMR * SMR)
    pan_blk = max(1, min(bl.nc, 256) // NR)
    kc = bl.kc
    bp = packed_weights(w1, w2, kc, cache_weights)
    z = np.zeros(1, np.float32)
    with serial_if(4.0 * M * D * F < SMALL_FLOPS):
        _swiglu_kernel(x.reshape(-1), M, D, F, bp, z if bs[0] is None else bs[0],
                       z if bs[1] is None else bs[1], bs[0] is not None, bs[1] is not None,
                       y.reshape(-1), mc, pan_blk, kc)
    return y
