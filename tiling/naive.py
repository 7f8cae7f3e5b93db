"""The naive tiling, for studies: what field reports call "untiled".

Smallest legal tiles (one Cube fractal, one 32-byte UB block, one element on a CPU or a
single-memory board), one buffer everywhere, and the loop order that keeps the reduction
innermost under every output tile, so each output tile re-reads its inputs from off-chip
(GEMM: order b, m, n, k -- A is re-read once per N tile, B once per M tile). Work is still split
across every core along the outermost output loop, as any real kernel would.
"""
from __future__ import annotations

from edgeops.simulator import tilemath as tm
from edgeops.tiling.problem import legal_granule
from edgeops.tiling.tiling import LevelTiling, Tiling

REDUCTION = ("k", "c", "d")


def _order(perms, size, split_first: str | None):
    """The order that ends with the reduction and starts (after single-tile dims) with the split."""
    def key(p):
        red_last = p[-1] in REDUCTION or all(x not in REDUCTION for x in p)
        lead = [x for x in p if size.get(x, 2) > 1]
        return (not red_last, bool(split_first) and (not lead or lead[0] != split_first))
    return min(perms, key=key)


def naive_tiling(p) -> Tiling:
    size = p.nest.size
    levels = []
    split_dim = next((d for d in p.split_dims if size.get(d, 1) > 1), None)
    nest_plans = [pl for pl in p.plans if not pl.view]
    for j, pl in enumerate(nest_plans):
        tile = []
        for d in pl.dims:
            g = legal_granule(p, j, d)
            tile.append((d, min(g, tm.roundup(size[d], g))))
        order = _order(pl.perms, size, split_dim if j == 0 else None)
        bufs = tuple(sorted((r, 1) for r in pl.roles))
        levels.append(LevelTiling(pl.name, tuple(tile), order, bufs, p.levels[j].holds))
    if p.view is not None:
        pl = p.plans[-1]
        j = len(nest_plans)
        tile = tuple((d, legal_granule(p, j, d)) for d in "mnk")
        bufs = tuple(sorted((r, 1) for r in pl.roles))
        levels.append(LevelTiling(pl.name, tile, ("m", "n", "k"), bufs, p.levels[-1].holds))
    split = ()
    if split_dim is not None and p.cores > 1 and levels and levels[0].order[0] != split_dim:
        lead = [x for x in levels[0].order if size.get(x, 1) > 1]
        if not lead or lead[0] != split_dim:
            split_dim = None
    if split_dim is not None and p.cores > 1:
        split = ((split_dim, p.cores),)
    target = p.hw.target if p.hw.family != "flat" else "flat"
    return Tiling(p.space.kind, p.decomposition, target, tuple(levels), split)
