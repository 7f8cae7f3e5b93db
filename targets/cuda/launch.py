"""Launch configurations: which compiled tile configuration and block size a call uses.

Thread-block tiles come from the tiling's ``smem`` level (``edgeops.tiling.search`` with a
Jetson board) when one is given: the compiled configuration nearest to its (m, n) tile. Without
a tiling the default is derived from the board: the largest configuration that still gives every
SM a block (``board.cores['sm']``), among those whose shared memory fits a block's static limit
and that keep at least a quarter occupancy (``edgeops.simulator.gpu.occupancy``; register-heavy
SGEMM tiles run at 1/4 to 1/3).
"""
from __future__ import annotations

import math
from typing import NamedTuple


class Config(NamedTuple):
    """A compiled tiled-kernel shape: block tile bm x bn, K slice bk, per-thread tm x tn."""
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def smem_bytes(self, operands_b: int = 1) -> int:
        """Shared memory of one block: an A slice and ``operands_b`` B slices, fp32."""
        return 4 * self.bk * (self.bm + operands_b * self.bn)

    def registers_estimate(self) -> int:
        """Registers per thread: accumulators + fragments + ~32 for indices/addresses."""
        return self.tm * self.tn + self.tm + self.tn + 32


# The compiled set: small ones keep the CUDA simulator fast, large ones reuse more per DRAM byte.
CONFIGS: dict[str, Config] = {
    "t8": Config(8, 8, 8, 1, 1),        # 64 threads
    "t16": Config(16, 16, 16, 1, 1),    # 256 threads
    "t32": Config(32, 32, 16, 2, 2),    # 256 threads
    "t64": Config(64, 64, 16, 4, 4),    # 256 threads
    "t128": Config(128, 128, 8, 8, 8),  # 256 threads, 64 accumulators per thread
}
STATIC_SMEM_LIMIT = 48 * 1024    # static __shared__ per block without the opt-in attribute
NORM_THREADS = (32, 64, 128, 256)


def _board(board):
    if board is None:
        return None
    from edgeops import boards
    return boards.load(board) if isinstance(board, str) else board


def from_tiling(tiling) -> Config | None:
    """The compiled configuration nearest (in log2 of m and n) to the tiling's smem tile."""
    if tiling is None:
        return None
    try:
        lv = tiling.level("smem")
        tm, tn = lv.size("m"), lv.size("n")
    except Exception:  # noqa: BLE001 - a tiling without an smem m/n tile says nothing here
        return None
    def dist(c: Config) -> float:
        return abs(math.log2(c.bm / max(tm, 1))) + abs(math.log2(c.bn / max(tn, 1)))
    return min(CONFIGS.values(), key=lambda c: (dist(c), c.bm))


def default_config(m: int, n: int, board=None, operands_b: int = 1) -> Config:
    b = _board(board)
    sms = 8
    if b is not None:
        sms = sum(c.count for c in b.cores if c.name == "sm") or sms
    fits = [c for c in CONFIGS.values() if c.smem_bytes(operands_b) <= STATIC_SMEM_LIMIT]
    if b is not None and b.gpu is not None:
        from edgeops.simulator.gpu import occupancy
        full = [c for c in fits
                if occupancy(b.gpu, c.threads, c.smem_bytes(operands_b),
                             c.registers_estimate()).occupancy >= 0.25]
        fits = full or fits
    fits = sorted(fits, key=lambda c: c.bm * c.bn)
    pick = fits[0]
    for c in fits:
        if math.ceil(m / c.bm) * math.ceil(n / c.bn) >= sms:
            pick = c
    return pick


def choose(m: int, n: int, tiling=None, board=None, operands_b: int = 1) -> Config:
    return from_tiling(tiling) or default_config(m, n, board, operands_b)


def norm_threads(cols: int, requested: int | None = None) -> int:
    """Block size of a row reduction: requested, else the smallest listed size covering the row
    (capped at 256)."""
    if requested is not None:
        if requested not in NORM_THREADS:
            raise ValueError(f"block size {requested} not compiled; choose one of {NORM_THREADS}")
        return requested
    for t in NORM_THREADS:
        if t >= cols:
            return t
    return NORM_THREADS[-1]


# kernels whose block tile comes from the tiling's smem (m, n) tile
TILED_KERNELS = ("cuda.gemm_tiled", "cuda.matmul_tiled", "cuda.swiglu", "cuda.conv_implicit_gemm",
                 "cuda.conv_bn_act_implicit_gemm")


def accepts_tiling(kernel_name: str, tiling) -> bool | str:
    """The lowering hook: True when ``kernel_name`` reads ``tiling`` (a cuda tiling with an smem
    level that cuts m and n), otherwise the reason it would be ignored."""
    if kernel_name not in TILED_KERNELS:
        return f"{kernel_name} takes its launch size from the shape, not from a tiling"
    if getattr(tiling, "target", None) != "cuda":
        return f"{kernel_name} reads cuda tilings, not {getattr(tiling, 'target', None)!r} ones"
    try:
        lv = tiling.level("smem")
        lv.size("m"), lv.size("n")
    except Exception:  # noqa: BLE001
        return f"{kernel_name} reads the smem level's m and n tile; this tiling has none"
    return True
