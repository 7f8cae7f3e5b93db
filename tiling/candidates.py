"""Candidate tilings as arrays: tile-size lists, split options and the batches the search evaluates.

Tile sizes are not restricted to divisors or powers of two. When a dim has few legal sizes (at
most the list limit) all of them are candidates. Otherwise: off-chip traffic depends on how many
tiles a dim is cut into (real bytes: ragged tails move less), so for every tile count ``c`` the
smallest size giving it, ``roundup(ceil(D / c), granule)``, is a candidate; so are the granule's
power-of-two multiples and values near the square root of the level's capacity. Counts 1..16 are
all kept, larger ones geometrically, so tails stay small where it matters.
"""
from __future__ import annotations

import math

import numpy as np

from edgeops.simulator import tilemath as tm
from edgeops.simulator.nest import Candidates
from edgeops.tiling.batch import Batch, nest_plans
from edgeops.tiling.problem import legal_granule


def tile_values(D: int, g: int = 1, limit: int = 24, extra=()) -> np.ndarray:
    """Candidate tile sizes of a dim of size ``D`` (multiples of ``g`` up to ``roundup(D, g)``).

    Preconditions: ``D >= 1``, ``g >= 1``, ``limit >= 2`` (ValueError otherwise).
    """
    if D < 1 or g < 1 or limit < 2:
        raise ValueError(f"tile_values needs D >= 1, g >= 1, limit >= 2; got D={D}, g={g}, limit={limit}")
    top = tm.roundup(D, g)
    n = tm.cdiv(D, g)
    if n <= limit:             # few enough: every legal size (a longer row can burst better)
        return np.arange(g, top + 1, g, dtype=np.int64)
    counts = set(range(1, min(n, 16) + 1)) | {n}
    c = 16.0
    while c < n:
        c *= 1.25
        counts.add(min(n, int(round(c))))
    vals = {tm.roundup(tm.cdiv(D, c), g) for c in counts}
    v = g
    while v <= top:
        vals.add(v)
        v *= 2
    vals |= {min(top, tm.roundup(int(x), g)) for x in extra if x >= 1}
    vals = np.array(sorted(vals), dtype=np.int64)
    if len(vals) > limit:   # thin geometrically, keeping both ends
        keep = np.unique(np.round(np.geomspace(1, len(vals), limit)).astype(int) - 1)
        vals = vals[keep]
    return vals


def capacity_extra(p, j: int) -> list[int]:
    """Sizes near the square root of the smallest memory of level ``j`` (in elements)."""
    mems = {m for _, m in p.levels[j].holds}
    cap = min(p.hw.memory(m).capacity for m in mems) // max(1, p.elem)
    s = int(math.isqrt(max(cap, 1)))
    t = int(math.isqrt(max(cap, 1) + 1)) - 1   # largest t with t*t + 2t <= cap
    return [s, s - 1, t, max(1, s // 2), max(1, t - 1)]


def split_options(p, order: tuple[str, ...]) -> list[dict[str, int]]:
    """Core splits compatible with a level-0 order: its one or two leading non-trivial dims."""
    P = p.cores
    size = p.nest.size
    lead = [d for d in order if size.get(d, 1) > 1][:2]
    if P <= 1 or not lead or lead[0] not in p.split_dims:
        return [{}]
    opts = [{lead[0]: P}]
    if len(lead) > 1 and lead[1] in p.split_dims:
        for a in range(2, P):
            if P % a == 0:
                opts.append({lead[0]: a, lead[1]: P // a})
    return opts


def order_split_combos(p):
    """All (order index, split) pairs of level 0."""
    pl = p.plans[0]
    out = []
    for i, o in enumerate(pl.perms):
        for s in split_options(p, o):
            out.append((i, s))
    return out


def bufs_options(p) -> list[int]:
    return [1] if p.hw.family == "cpu" else [1, 2]


def _arr(x, n):
    return np.broadcast_to(np.asarray(x, dtype=np.int64), (n,)).copy()


def build_batch(p, tables: list[dict], index: dict, orders: list, bufs: list, parts: dict,
                view=None) -> Batch:
    """Assemble a Batch; ``tables[j][d]`` rows picked by ``index[d]``; the rest per candidate."""
    plans = nest_plans(p)
    cand = Candidates(tables, orders, [list(pl.perms) for pl in plans],
                      [{r: b for r in pl.roles} for pl, b in zip(plans, bufs)], parts, index)
    b = Batch(cand)
    if view is not None:
        b.view_tiles, b.view_order, vb = view
        b.view_bufs = {r: vb for r in p.plans[-1].roles}
    return b


def product_index(sizes: list[int]) -> list[np.ndarray]:
    """Index arrays of the Cartesian product of ``sizes`` (last varies fastest)."""
    total = int(np.prod(sizes, dtype=np.int64)) if sizes else 1
    return list(np.unravel_index(np.arange(total, dtype=np.int64), sizes)) if sizes else []


def granules(p, j: int) -> dict[str, int]:
    pl = p.plans[j]
    return {d: legal_granule(p, j, d) for d in pl.dims}
