"""I/O lower bounds: compulsory traffic and, for GEMM, the Smith et al. bound.

Compulsory: every input element the op reads is read once and every output written once (a
strided window that skips input rows does not count them). For a GEMM with ``S`` words of fast
memory, Smith, van de Geijn et al. ("A Tight I/O Lower Bound for Matrix Multiplication", 2019)
prove ``Q >= 2*M*N*K / sqrt(S) - 2*S`` words moved between slow and fast memory. We use ``S`` =
every on-chip memory the GEMM's operands can occupy, so the bound holds for every legal tiling;
with double buffering only half of it is usable (``double_buffered=True``). Batched GEMMs
multiply by the batch count.
"""
from __future__ import annotations

import math

from edgeops.simulator import tilemath as tm
from edgeops.simulator.hardware import ACC_DTYPE, ELEM_BYTES
from edgeops.tiling.spaces import Space


def smith_bound_words(M: int, N: int, K: int, S_words: float) -> float:
    """Smith et al.: minimum words moved for an M x N x K GEMM with S words on chip (>= 0).

    Precondition: ``S_words > 0`` (ValueError).
    """
    if S_words <= 0:
        raise ValueError(f"S_words must be > 0, got {S_words}")
    return max(0.0, 2.0 * M * N * K / math.sqrt(S_words) - 2.0 * S_words)


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


def lower_bound_bytes(p, double_buffered: bool = False, S_words: float | None = None) -> int | None:
    """Smith bound in bytes (words x input element size) for a GEMM problem; None otherwise."""
    if not p.gemm_dims or p.decomposition not in ("gemm",):
        return None
    M, N, K, B = p.gemm_dims
    S = S_words if S_words is not None else onchip_words(p, double_buffered)
    words = B * smith_bound_words(M, N, K, S)
    return int(words * p.elem)


def acc_elem(dtype: str) -> int:
    return ELEM_BYTES[ACC_DTYPE[dtype]]
