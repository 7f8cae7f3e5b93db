"""Cache blocking factors (mc, nc, kc) for the packed GEMM family, from a tiling or a board.

The NEON kernels take the blocking as RUNTIME arguments, so one compiled kernel serves every
tiling. Where the blocking comes from, in order:

1. an explicit ``Blocking`` (tests, benchmarks, the measured override table);
2. a tiling from ``edgeops.tiling`` (the planner, issue 3) — read through :func:`from_tiling`,
   the single place that knows the planner's field names (its API is not final yet);
3. :func:`blocking_for` a board: the classic Goto/BLIS rules from the board's cache sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from edgeops.errors import TilingError
from edgeops.targets.neon._microkernel import MR, NR


@dataclass(frozen=True)
class Blocking:
    """mc x kc block of A (lives in L2), kc x nc block of B (L3), kc x NR micro-panel of B (L1)."""
    mc: int
    nc: int
    kc: int
    source: str = "explicit"

    def __post_init__(self):
        for k in ("mc", "nc", "kc"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise TilingError(f"neon blocking: {k}={v!r} must be a positive integer")

    def normalized(self) -> "Blocking":
        """mc rounded up to whole MR panels, nc to whole NR panels, kc to an even count (the int8
        kernels step K in pairs). Ragged problem edges are fine; this only aligns the blocks."""
        up = lambda v, m: -(-v // m) * m  # noqa: E731
        return Blocking(up(self.mc, MR), up(self.nc, NR), up(self.kc, 2), self.source)

    def as_args(self) -> tuple[int, int, int]:
        b = self.normalized()
        return b.mc, b.nc, b.kc

    def fitted(self, M: int, N: int, K: int) -> tuple[int, int, int]:
        """(mc, nc, kc) for one problem: each factor shrunk to split its extent into equal
        blocks (K=576 with kc=512 runs 2 x 288, not 512 + a 64-step tail that wastes the packing
        and the C pass), never larger than the blocking asks for."""
        mc, nc, kc = self.as_args()
        return balance(M, mc, MR), balance(N, nc, NR), balance(K, kc, 2)


def balance(extent: int, block: int, align: int) -> int:
    """The smallest multiple of ``align`` that covers ``extent`` in as many blocks as ``block``
    would need; never above ``block`` rounded up to ``align``."""
    if extent <= 0:
        return block
    nblk = -(-extent // block)
    per = -(-extent // nblk)
    return min(-(-per // align) * align, -(-block // align) * align)


# Used only when no board file can be read (e.g. host.toml missing): a 32 KiB L1 / 1 MiB L2 /
# 32 MiB L3, 2-core part like the Zen 4 test host.
_FALLBACK = {"l1": 32 * 1024, "l2": 1024 * 1024, "l3": 32 * 1024 * 1024, "cores": 2}


def _caches(board) -> dict[str, int]:
    """L1/L2/L3 bytes per core from a board's on-chip memory levels (smallest first)."""
    on_chip = [m for m in board.memories if not m.offchip]
    per_core = sorted((m for m in on_chip if m.scope != "chip"), key=lambda m: m.size_bytes)
    shared = sorted((m for m in on_chip if m.scope == "chip"), key=lambda m: m.size_bytes)
    levels = [m.size_bytes for m in per_core] + [m.size_bytes for m in shared]
    cores = max((c.count for c in board.cores), default=1)
    out = dict(_FALLBACK)
    out["cores"] = cores
    for key, size in zip(("l1", "l2", "l3"), levels):
        out[key] = int(size)
    if len(levels) == 2:  # no L3 (e.g. a cluster-shared L2): B block shares the last level
        out["l3"] = out["l2"]
    return out


def _rule(l1: int, l2: int, l3: int, cores: int, elem: int = 4) -> Blocking:
    # kc: the B micro-panel (kc x NR), about 2x L1: the L2->L1 prefetcher streams the panel,
    # and a long kc halves the passes over C (figures: docs/notes/neon-kernels.md). Capped at
    # 2 KiB of K per row (512 fp32, 1024 int16 pairs) so the A micro-panel stays small.
    kc = max(128, min(2048 // elem, 2 * l1 // (NR * elem)))
    # mc: the A block (mc x kc) takes about a quarter of L2 (B micro-panels and C share the rest)
    mc = max(MR, min(1024, (l2 // 4) // (kc * elem)))
    # nc: the B block (kc x nc) takes a share of the last-level cache per core
    nc = max(NR, min(8192, (l3 // max(cores, 1) // 2) // (kc * elem)))
    return Blocking(mc, nc, kc, "rule").normalized()


@lru_cache(maxsize=32)
def _blocking_for_name(name: str, elem: int) -> Blocking:
    from edgeops import boards
    try:
        c = _caches(boards.load(name))
        src = f"board {name}"
    except Exception as e:  # noqa: BLE001 - a missing/partial board must not break kernels
        c, src = dict(_FALLBACK), f"fallback ({type(e).__name__}: {e})"
    b = _rule(c["l1"], c["l2"], c["l3"], c["cores"], elem)
    return Blocking(b.mc, b.nc, b.kc, src)


def blocking_for(board: Any = "host", dtype_bytes: int = 4) -> Blocking:
    """Default blocking for a board name/path/Board from its cache sizes."""
    if hasattr(board, "memories"):
        c = _caches(board)
        b = _rule(c["l1"], c["l2"], c["l3"], c["cores"], dtype_bytes)
        return Blocking(b.mc, b.nc, b.kc, f"board {board.name}")
    return _blocking_for_name(str(board), dtype_bytes)


# A planner K block below this is raised to it: each K block ends with a store (or re-load) of
# the whole MR x NR register tile, so a K block of a few steps spends more time moving C than
# multiplying (figures: docs/notes/neon-kernels.md). The
# planner's cost model does not see the micro-kernel, so it can ask for such blocks.
KC_MIN = 32

# the planner's register level: the micro-kernel's MR x NR tile is compile-time, not read
_REGISTER_LEVELS = ("reg", "regs", "register", "registers")


# from_tiling per frozen tiling object: a package node hands its kernel the same Tiling on every
# call, and reading it (levels, dims, the label) in Python costs more than the GEMM of a small
# 1x1 conv. Keyed by identity, the object kept alive beside its result (so its id
# cannot be reused); cleared whole when full.
_MEMO: dict[int, tuple] = {}
_MEMO_MAX = 4096


def from_tiling(tiling: Any, board: Any = "host") -> Blocking:
    """The blocking for a kernel call (see :func:`_from_tiling`); the answer for a frozen
    (immutable) tiling object is remembered per object and board."""
    if tiling is None or isinstance(tiling, Blocking):
        return _from_tiling(tiling, board)
    params = getattr(type(tiling), "__dataclass_params__", None)
    if params is None or not params.frozen or not isinstance(board, str):
        return _from_tiling(tiling, board)
    hit = _MEMO.get(id(tiling))
    if hit is not None and hit[0] is tiling and hit[1] == board:
        return hit[2]
    b = _from_tiling(tiling, board)
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[id(tiling)] = (tiling, board, b)
    return b


def _from_tiling(tiling: Any, board: Any = "host") -> Blocking:
    """The blocking for a kernel call: ``None`` -> board default; a ``Blocking``; a mapping or
    object with ``mc``/``nc``/``kc``; or a planner ``edgeops.tiling.Tiling``.

    The planner's CPU tilings list on-chip levels outermost first (``outer``, ``l1``, then the
    register level ``reg``), each with a tile per loop dim. Goto/BLIS reading: ``nc`` is the
    outermost level's N tile (the B block shared in L3/L2), ``mc`` and ``kc`` the next level's
    M and K tiles (the A block and the K depth of the micro-panels); a one-level tiling gives all
    three. The register level is skipped (the micro-kernel shape is compile-time), tiles are
    rounded up to whole micro-tiles (``Blocking.normalized``) and each is at least the board
    rule's (:func:`blocking_for`; ``kc`` also at least :data:`KC_MIN`). Conv tilings map onto the im2col GEMM (M = output channels ``k``,
    N = ``oh*ow``, K = ``c*r*s``). This function is the only place that knows the planner's
    field names."""
    if tiling is None:
        return blocking_for(board)
    if isinstance(tiling, Blocking):
        return tiling
    if hasattr(tiling, "neon_blocking"):
        return from_tiling(tiling.neon_blocking(), board)
    if isinstance(tiling, Mapping) and {"mc", "nc", "kc"} <= set(tiling):
        return Blocking(int(tiling["mc"]), int(tiling["nc"]), int(tiling["kc"]), "mapping")
    if all(hasattr(tiling, k) for k in ("mc", "nc", "kc")):
        return Blocking(int(tiling.mc), int(tiling.nc), int(tiling.kc), type(tiling).__name__)
    levels = [lv for lv in getattr(tiling, "levels", None) or ()
              if str(getattr(lv, "name", "")).lower() not in _REGISTER_LEVELS]
    if levels:
        dims = [_gemm_dims(dict(lv.tile)) for lv in levels]
        if all(d is not None for d in dims):
            outer, inner = dims[0], dims[1] if len(dims) > 1 else dims[0]
            # Each factor is raised to at least the board rule's: the planner's cost model sees
            # neither the micro-kernel nor the packing, and its small tiles (e.g. mc=8 nc=32
            # kc=32 for the encoder's MatMul) re-pack A for every nc block and pass over C every
            # kc steps: 2-3x slower than the rule on Zen 4 (docs/notes/neon-kernels.md). A
            # larger block stays the planner's (``fitted`` still shrinks it to the problem).
            rule = blocking_for(board).normalized()
            return Blocking(max(rule.mc, inner[0]), max(rule.nc, outer[1]),
                            max(KC_MIN, rule.kc, inner[2]),
                            f"tiling {getattr(tiling, 'describe', lambda: '')()}")
    raise TilingError(f"neon: cannot read GEMM blocking (mc, nc, kc) from {type(tiling).__name__} "
                      f"{tiling!r}; pass a Blocking, a mapping with mc/nc/kc, or a GEMM/conv "
                      f"Tiling whose levels tile m, n, k (or k, oh, ow, c, r, s)")


# kernels whose (mc, nc, kc) come from a tiling (``tiling=`` reaches ``from_tiling``); the
# direct depthwise and memory-bound kernels have no cache blocking to set
TILED_KERNELS = frozenset(
    ["neon.gemm_packed", "neon.matmul_packed", "neon.swiglu_fused"]
    + [f"neon.{op}_{d}" for op in ("conv", "conv_bn_act") for d in ("im2col", "winograd")])


def accepts_tiling(kernel_name: str, tiling: Any) -> bool | str:
    """The lowering hook (``edgeops.lower``): True when ``kernel_name`` reads ``tiling``'s
    blocking, otherwise the reason the planner's tiling would be ignored."""
    if kernel_name not in TILED_KERNELS:
        return f"{kernel_name} has no cache blocking to take from a tiling"
    target = getattr(tiling, "target", "neon")
    if target != "neon":
        return f"{kernel_name} reads neon tilings, not {target!r} ones"
    try:
        from_tiling(tiling)
    except TilingError as e:
        return str(e)
    return True


def _gemm_dims(tile: dict) -> tuple[int, int, int] | None:
    """(M, N, K) tile of a level: GEMM dims directly, conv dims through im2col."""
    t = {k.lower(): int(v) for k, v in tile.items()}
    if {"m", "n", "k"} <= set(t):
        return t["m"], t["n"], t["k"]
    if {"k", "c", "oh", "ow"} <= set(t):
        return t["k"], t["oh"] * t["ow"], t["c"] * t.get("r", 1) * t.get("s", 1)
    return None
