"""Roofline data: the roof of the cores a package's kernels run on, the board total, and where
each predicted node sits under them.

Compute roofs come from the board file: a unit's ``flops_per_cycle`` x ``per_core`` x its core
type's clock x the cores used. The kernel roof is the unit the simulator runs the matrix profile
on (the fastest with a rate for the dtype), over its core type's cores -- or, on a CPU, over
``threads`` cores: the kernels' cluster first, then the other clusters, fastest per core first
(rk3588: 4 A76 = 153.6 GFLOP/s fp32; 8 threads add the A55s for the 211.2 the board lists).
The board total sums every unit over all its cores. The bandwidth slope is the fastest path
out of the off-chip memory.

A point above its roof carries the reason (``Point.reason``); each reason names a ceiling the
point does respect (``Point.explained``), so a point above every explanation says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from edgeops.errors import BoardError

# Winograd F(2x2, 3x3): 16 multiplies per 2x2 output tile and channel pair where direct
# convolution does 4 x 9 = 36; its FLOPs are counted as the direct convolution's
WINOGRAD_FLOP_RATIO = 36 / 16
_WIDER = {"int8": ("int8", "fp16", "fp32"), "fp16": ("fp16", "fp32"), "int32": ("fp32",)}
_SLACK = 1 + 1e-9     # float noise: a point exactly on its roof is not above it


@dataclass(frozen=True)
class Roof:
    label: str
    flops_s: float          # compute roof, FLOP/s
    bytes_s: float          # off-chip bandwidth, bytes/s
    cores: int

    def at(self, ai: float) -> float:
        """Attainable FLOP/s at arithmetic intensity ``ai`` (FLOP per off-chip byte)."""
        return min(self.flops_s, ai * self.bytes_s)


@dataclass(frozen=True)
class Point:
    label: str
    ai: float               # FLOP per off-chip byte
    achieved: float         # FLOP/s: counted FLOPs / predicted latency
    ceiling: float          # the kernel roof at ``ai``
    reason: str | None      # why it sits above ``ceiling`` (None: it does not)
    explained: float        # the ceiling the reason accounts for (== ceiling when not above)

    @property
    def above(self) -> bool:
        return self.achieved > self.ceiling * _SLACK

    def to_dict(self) -> dict:
        return {"label": self.label, "ai": self.ai, "achieved_flops_s": self.achieved,
                "roof_flops_s": self.ceiling, "above": self.above, "reason": self.reason}


def per_core_flops(unit, dtype: str, hz: float, wider: bool = True) -> float:
    """FLOP/s of one core's instances of a board ``unit`` for ``dtype``; with ``wider`` a dtype
    the unit lacks runs at the next wider one it has (as the simulator's units do), else 0."""
    for dt in _WIDER.get(dtype, (dtype,)) if wider else (dtype,):
        if unit.flops_per_cycle.get(dt, 0) > 0:
            return unit.flops_per_cycle[dt] * unit.per_core * hz
    return 0.0


def offchip_bandwidth(board) -> float:
    off = board.offchip.name
    return max((p.bandwidth_bytes_per_s for p in board.paths if p.src == off), default=0.0)


def _clusters(board, dtype: str, kind_of=None, wider=True) -> list[tuple[str, int, float]]:
    """(core type, count, per-core FLOP/s summed over its units) per core type with a rate."""
    out = []
    for c in board.cores:
        rate = sum(per_core_flops(u, dtype, board.core_hz(c.name), wider) for u in board.units
                   if u.core == c.name and (kind_of is None or u.name in kind_of))
        if rate > 0:
            out.append((c.name, c.count, rate))
    return out


def kernel_roof(board, dtype: str = "fp16", target: str | None = None,
                threads: int | None = None) -> Roof:
    """The roof of the cores the kernels run on (``threads``: CPU threads; None = the kernel
    unit's cores, what the simulator's tilings split over)."""
    from edgeops.simulator.hardware import from_board
    hw = from_board(board, target)
    rate = lambda u: per_core_flops(u, dtype, board.core_hz(u.core)) * board.core(u.core).count
    unit = board.unit(hw.unit("matrix", dtype).name)
    if rate(unit) <= 0:     # no matrix rate (Ascend's Cube in fp32): the fastest unit with one
        unit = max((board.unit(u.name) for u in (*hw.matrix_alts, hw.vector_unit)), key=rate)
    if rate(unit) <= 0:
        raise BoardError(f"board {board.name!r}: no unit of target {hw.target!r} has a {dtype} rate")
    core = board.core(unit.core)
    own = per_core_flops(unit, dtype, board.core_hz(core.name))
    left = core.count if threads is None or hw.family != "cpu" else max(1, int(threads))
    n = min(left, core.count)
    flops, parts, used = own * n, [f"{n} x {core.name} ({unit.name})"], n
    left -= n
    if left > 0:        # more threads than the kernels' cluster: the other CPU clusters
        simd = {u.name for u in board.units if u.core != core.name}
        for name, count, rate in sorted(_clusters(board, dtype, simd), key=lambda c: -c[2]):
            k = min(left, count)
            if k <= 0:
                break
            flops, used, left = flops + rate * k, used + k, left - k
            parts.append(f"{k} x {name}")
    label = " + ".join(parts) + (f", {threads} threads" if threads and hw.family == "cpu" else "")
    return Roof(label, flops, offchip_bandwidth(board), used)


def board_roof(board, dtype: str = "fp16") -> Roof:
    """Every unit with a rate for ``dtype`` over all its cores: the peak ``edgeops boards``
    lists (``Board.peak_flops``), whose units are the ones the board file rates for it."""
    cl = _clusters(board, dtype, wider=False)
    return Roof("board total (" + " + ".join(f"{n} x {c}" for c, n, _ in cl) + ")",
                sum(n * r for _, n, r in cl), offchip_bandwidth(board), sum(n for _, n, _ in cl))


def points_from_nodes(nodes: list[dict]) -> list[dict]:
    """Roofline points of ``simulate`` rows (tiled nodes): what ``place`` needs to say why."""
    out = []
    for r in nodes:
        if r.get("model") != "tiled":
            continue
        split = (r.get("tiling") or {}).get("split") or {}
        out.append({"label": r["node"], "flops": r["flops"], "offchip_bytes": r["offchip_bytes"],
                    "latency_s": r["latency_s"], "decomposition": r.get("decomposition"),
                    "bytes": r.get("bytes") or {}, "cores": math.prod(split.values()) if split else 1})
    return out


def place(points: list[dict], roof: Roof, board) -> list[Point]:
    """Each point ({label, flops, offchip_bytes, latency_s}, optionally decomposition, bytes per
    hop, cores) under ``roof``, with the reason when it sits above it."""
    off = board.offchip.name
    out = []
    for p in points:
        if not (p.get("flops") and p.get("latency_s") and p.get("offchip_bytes")):
            continue
        ai, ach = p["flops"] / p["offchip_bytes"], p["flops"] / p["latency_s"]
        ceil = roof.at(ai)
        if ach <= ceil * _SLACK:
            out.append(Point(p.get("label", ""), ai, ach, ceil, None, ceil))
            continue
        why, comp, bw_flops = [], roof.flops_s, ai * roof.bytes_s
        if p.get("decomposition") == "winograd":
            comp *= WINOGRAD_FLOP_RATIO
            why.append(f"Winograd: FLOPs counted as direct convolution's, {WINOGRAD_FLOP_RATIO:.2f}x "
                       f"what it multiplies")
        cores = int(p.get("cores") or 1)
        if cores > roof.cores:
            comp *= cores / roof.cores
            why.append(f"the tiling splits over {cores} cores, the roof has {roof.cores}")
        hops = p.get("bytes") or {}
        rd = sum(v for k, v in hops.items() if k.split("->")[0] == off)
        wr = sum(v for k, v in hops.items() if k.split("->")[-1] == off)
        if rd and wr and ach > bw_flops * _SLACK:
            # separate DMA engines (an NPU's MTE2 in, MTE3/FixPipe out) each reach the bandwidth
            bw_flops = p["flops"] / max(rd, wr) * roof.bytes_s
            why.append(f"off-chip reads ({rd:,} B) and writes ({wr:,} B) overlap on separate "
                       f"DMA engines in the model, each up to {roof.bytes_s / 1e9:.1f} GB/s")
        explained = min(comp, bw_flops)
        if ach > explained * _SLACK:
            why.append(f"not explained: {ach / 1e9:.3g} GFLOP/s above {explained / 1e9:.3g}")
        out.append(Point(p.get("label", ""), ai, ach, ceil, "; ".join(why), explained))
    return out


def roofline_data(points: list[dict], board, *, dtype: str = "fp16", target: str | None = None,
                  threads: int | None = None) -> dict:
    """JSON-able: both roofs and every point (``--plot``'s numbers, for ``--json``)."""
    k, t = kernel_roof(board, dtype, target, threads), board_roof(board, dtype)
    return {"dtype": dtype,
            "roofs": [{"name": name, "label": r.label, "flops_s": r.flops_s, "bytes_s": r.bytes_s,
                       "cores": r.cores} for name, r in (("kernels", k), ("board", t))],
            "points": [pt.to_dict() for pt in place(points, k, board)]}
