"""I/O lower bounds: compulsory traffic and, for GEMM, the Smith et al. bound.

Compulsory: every input element the op reads is read once and every output written once (a
strided window that skips input rows does not count them). For a GEMM with ``S`` words of fast
memory, Smith, van de Geijn et al. ("A Tight I/O Lower Bound for Matrix Multiplication", 2019)
prove ``Q >= 2*M*N*K / sqrt(S) - 2*S`` words moved between slow and fast memory. We use ``S`` =
every on-chip memory the GEMM's operands can occupy on one core (a chip-wide cache counts its
per-core share, as legality does), so the bound holds for every legal tiling; with double
buffering only half of it is usable (``double_buffered=True``). ``lower_bound_bytes`` is the
larger of the two: each is a lower bound, and Smith's ``- 2*S`` can put it below compulsory.
"""
from __future__ import annotations

import math

from edgeops.simulator import tilemath as tm
from edgeops.simulator.hardware import ACC_DTYPE, ELEM_BYTES
from edgeops.tiling.spaces import Space


def smith_bound_words(M: int, N: int, K: int, S_words: float, cores: int = 1) -> float:
    """Smith et al.: minimum words moved for an M x N x K GEMM with S words on chip (>= 0).

    ``cores``: the work may be spread over that many cores of S words each; each core's share
    obeys the bound on its own, so the sum loses 2*S per core (the first term is additive).
    Precondition: ``S_words > 0`` and ``cores >= 1`` (ValueError).
    """
    if S_words <= 0:
        raise ValueError(f"S_words must be > 0, got {S_words}")
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    return max(0.0, 2.0 * M * N * K / math.sqrt(S_words) - 2.0 * cores * S_words)


def _out_elem(sp: Space) -> int:
    if sp.dtype == "int8":
        return 1 if sp.get("act") == "quant" else 4
    return ELEM_BYTES[sp.dtype]


def compulsory_bytes(sp: Space) -> int:
    """Bytes the op must move at least: each input read once, each output written once."""
    e, k = ELEM_BYTES[sp.dtype], sp.kind
    if k in ("gemm", "matmul"):
        B = sp.get("B", 1)
        bb = 1 if sp.get("bshared", 0) else B
        return (B * sp["M"] * sp["K"] + bb * sp["K"] * sp["N"]) * e + B * sp["M"] * sp["N"] * _out_elem(sp)
    if k == "swiglu":
        return (sp["M"] * sp["D"] + 2 * sp["D"] * sp["F"] + sp["M"] * sp["F"]) * e
    if k in ("conv2d", "pool"):
        oh, ow = sp.conv_out
        d = sp.get("dilation", 1)
        pb = sp["pad"]
        rows = tm.window_rows_used(oh, sp["stride"], d, sp["R"], pb, sp["H"])
        cols = tm.window_rows_used(ow, sp["stride"], d, sp["S"], pb, sp["W"])
        x = sp["N"] * sp["C"] * rows * cols * e
        if k == "pool":
            return x + sp["N"] * sp["C"] * oh * ow * e
        w = sp["K"] * (sp["C"] // sp["groups"]) * sp["R"] * sp["S"] * e
        return x + w + sp["N"] * sp["K"] * oh * ow * _out_elem(sp)
    if k == "eltwise":
        return (sp["inputs"] + 1) * sp["numel"] * e
    params = {"layernorm": 2 * sp.get("D", 0), "groupnorm": 2 * sp.get("C", 0)}.get(k, 0)
    return (2 * sp.numel + params) * e


def onchip_words(p, double_buffered: bool = False) -> float:
    """Words of on-chip memory the problem's operands can occupy (per core)."""
    mems = {m for lv in p.levels for _, m in lv.holds}
    total = sum(p.hw.memory(m).capacity for m in mems)
    return total / p.elem / (2 if double_buffered else 1)


def lower_bound_bytes(p, double_buffered: bool = False, S_words: float | None = None) -> int:
    """Bytes every legal tiling of ``p`` moves off-chip at least: compulsory, and for a plain
    GEMM / MatMul also the Smith bound (words x input element size)."""
    comp = compulsory_bytes(p.space)
    # Smith's count assumes every C element is stored: not so for SwiGLU's gated epilogue, and
    # im2col / Winograd move a different GEMM than the op's. There, compulsory is what holds.
    if not p.gemm_dims or p.decomposition != "gemm" or p.space.kind not in ("gemm", "matmul"):
        return comp
    M, N, K, B = p.gemm_dims
    S = S_words if S_words is not None else onchip_words(p, double_buffered)
    cores = max(1, p.cores) if p.split_dims else 1
    # the batch folds into M: the Loomis-Whitney count per segment holds for the batched triples
    words = smith_bound_words(B * M, N, K, S, cores)
    # Smith subtracts 2*S per core for data resident at the start and end, so it can fall below
    # the compulsory traffic (every operand read and the result written once): take the larger
    return max(comp, int(words * p.elem))


def acc_elem(dtype: str) -> int:
    return ELEM_BYTES[ACC_DTYPE[dtype]]
