"""Packing of GEMM operands into the micro-kernel's panel layouts (see ``_microkernel.py``).

Operands arrive as a flat buffer plus (offset, row stride, column stride) in elements, so that a
transposed, batched or sliced operand needs no copy and every layout shares ONE compiled packer
(Numba would otherwise specialise on C/F/any layouts). Ragged edges are zero-padded: the
micro-kernel always computes full tiles and the epilogue stores only the valid corner.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from edgeops.targets.neon._microkernel import MR, NR, QMR, QNR


@njit(cache=True, error_model="numpy")
def pack_a(a, aoff, rs, cs, i0, mb, p0, kb, ap, mr):
    """A[i0:i0+mb, p0:p0+kb] -> ceil(mb/mr) panels of kb x mr."""
    npan = (mb + mr - 1) // mr
    for r in range(npan):
        base = r * kb * mr
        rows = min(mr, mb - r * mr)
        src0 = aoff + (i0 + r * mr) * rs + p0 * cs
        if rows == mr:
            # p outer: mr sequential read streams, one contiguous write per step (writing with a
            # stride of mr instead is slower: docs/notes/neon-kernels.md)
            for p in range(kb):
                src = src0 + p * cs
                dst = base + p * mr
                for i in range(mr):
                    ap[dst + i] = a[src + i * rs]
        else:
            for p in range(kb):
                src = src0 + p * cs
                dst = base + p * mr
                for i in range(rows):
                    ap[dst + i] = a[src + i * rs]
                for i in range(rows, mr):
                    ap[dst + i] = 0


@njit(cache=True, error_model="numpy")
def pack_b(b, boff, rs, cs, p0, kb, j0, nb, bp, nr):
    """B[p0:p0+kb, j0:j0+nb] -> ceil(nb/nr) panels of kb x nr."""
    npan = (nb + nr - 1) // nr
    full = nb // nr
    if cs == 1:
        # row-major B: walk each row of B once, left to right (panel-major reads jump by a row
        # stride every nr floats and are slower)
        for p in range(kb):
            src = boff + (p0 + p) * rs + j0
            for jp in range(full):
                dst = jp * kb * nr + p * nr
                s0 = src + jp * nr
                for j in range(nr):
                    bp[dst + j] = b[s0 + j]
        start = full
    else:
        start = 0
    for jp in range(start, npan):
        base = jp * kb * nr
        cols = min(nr, nb - jp * nr)
        src0 = boff + p0 * rs + (j0 + jp * nr) * cs
        for p in range(kb):
            src = src0 + p * rs
            dst = base + p * nr
            for j in range(cols):
                bp[dst + j] = b[src + j * cs]
            for j in range(cols, nr):
                bp[dst + j] = 0


@njit(cache=True, error_model="numpy")
def pack_b_all(b, boff, rs, cs, K, N, kc, bp):
    """The whole of B[K, N] packed once (held weights): K blocks of ``kc`` rows (the last one
    ragged), each as ceil(N/NR) panels of kb x NR, block ``pc`` starting at ``pc * npad``
    (npad = N rounded up to NR), so panel ``j0 / NR`` of block ``pc`` is at
    ``pc * npad + j0 * kb``. The kernel reads it exactly as the per-call packed panels."""
    npad = (N + NR - 1) // NR * NR
    for pc in range(0, K, kc):
        kb = min(kc, K - pc)
        pack_b(b, boff, rs, cs, pc, kb, 0, N, bp[pc * npad:], NR)


def packed_b_size(K: int, N: int) -> int:
    """Elements of :func:`pack_b_all`'s output."""
    return K * (-(-N // NR) * NR)


@njit(cache=True, error_model="numpy")
def pack_a_pairs(a, aoff, rs, cs, i0, mb, p0, kb, ap, mr, shift):
    """int8/uint8 A -> int16 pair panels: ap[r*kq*2mr + q*2mr + 2i + t] = A[i, p0+2q+t] - shift.
    ``shift`` (the activation zero point, or 0) is subtracted here so that the kernel's products
    are already the zero-point-corrected ones; an odd K is padded with a zero step."""
    kq = (kb + 1) // 2
    npan = (mb + mr - 1) // mr
    for r in range(npan):
        base = r * kq * 2 * mr
        rows = min(mr, mb - r * mr)
        for i in range(mr):
            if i < rows:
                src = aoff + (i0 + r * mr + i) * rs + p0 * cs
                for p in range(kb):
                    v = np.int16(a[src + p * cs]) - shift
                    ap[base + (p >> 1) * 2 * mr + 2 * i + (p & 1)] = v
                if kb & 1:
                    ap[base + (kq - 1) * 2 * mr + 2 * i + 1] = 0
            else:
                for p in range(2 * kq):
                    ap[base + (p >> 1) * 2 * mr + 2 * i + (p & 1)] = 0


@njit(cache=True, error_model="numpy")
def pack_b_pairs(b, boff, rs, cs, p0, kb, j0, nb, bp, nr, shift):
    """int8/uint8 B -> int16 pair panels: bp[jp*kq*2nr + q*2nr + 2j + t] = B[p0+2q+t, j] - shift
    (``shift``: the zero point of B when B is the activation, as in conv's W @ cols)."""
    kq = (kb + 1) // 2
    npan = (nb + nr - 1) // nr
    for jp in range(npan):
        base = jp * kq * 2 * nr
        cols = min(nr, nb - jp * nr)
        for p in range(2 * kq):
            dst = base + (p >> 1) * 2 * nr + (p & 1)
            if p < kb:
                src = boff + (p0 + p) * rs + (j0 + jp * nr) * cs
                for j in range(cols):
                    bp[dst + 2 * j] = np.int16(b[src + j * cs]) - shift
                for j in range(cols, nr):
                    bp[dst + 2 * j] = 0
            else:
                for j in range(nr):
                    bp[dst + 2 * j] = 0


def panel_bytes(mc: int, nc: int, kc: int) -> tuple[int, int]:
    """Sizes (elements) of the packed A block and B block for a blocking; used by callers that
    preallocate (and by the planner hook to check a tiling fits)."""
    return (-(-mc // MR)) * MR * kc, (-(-nc // NR)) * NR * kc


__all__ = ["pack_a", "pack_b", "pack_b_all", "packed_b_size", "pack_a_pairs", "pack_b_pairs", "panel_bytes", "MR", "NR", "QMR",
           "QNR"]
