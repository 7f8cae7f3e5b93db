"""A :class:`Batch`: a set of tilings of one :class:`~edgeops.tiling.problem.Problem` as arrays (the
simulator's :class:`~edgeops.simulator.nest.Candidates` plus the GEMM view's tiles), and the way
between it and ``Tiling`` values. Candidates, legality and the model all build on it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeops.simulator.gemmview import GEMM_PERMS, max_block
from edgeops.simulator.nest import Candidates, NestEval
from edgeops.tiling.tiling import LevelTiling, Tiling


@dataclass
class Batch:
    cand: Candidates
    view_tiles: dict | None = None
    view_order: np.ndarray | None = None
    view_bufs: dict | None = None
    view_index: dict | None = None    # view dim -> row of view_tiles[dim] (table mode)

    @property
    def n(self) -> int:
        if self.cand.orders:
            return self.cand.n
        return len(self.view_order)


def nest_plans(p):
    return [pl for pl in p.plans if not pl.view]


def view_block_max(p, b: Batch) -> dict:
    """Largest block of the level above the GEMM view, per candidate (m, n, k)."""
    plans = nest_plans(p)
    ev = NestEval(p.nest, b.cand, p.levels[:len(plans)], p.hw.offchip.name)
    cls = lambda d: ev.classes_n(len(plans) - 1, d)
    v = p.view
    return {"m": max_block([cls(d) for d in v.m_dims]),
            "k": max_block([[(s * v.taps, c) for s, c in cls(v.k_dim)]]),
            "n": max_block([cls(v.n_dim)])}


# ---- Tiling <-> arrays ----------------------------------------------------------------------

def batch_from_tilings(p, tilings: list[Tiling]) -> Batch:
    """Arrays of already fitted tilings (see ``legality.fit``)."""
    plans = nest_plans(p)
    tiles, orders, bufs = [], [], []
    for j, pl in enumerate(plans):
        lvs = [t.levels[j] for t in tilings]
        tiles.append({d: np.array([lv.size(d) for lv in lvs], dtype=np.int64) for d in pl.dims})
        orders.append(np.array([pl.perms.index(lv.order) for lv in lvs]))
        bufs.append({r: np.array([lv.bufs(r) for lv in lvs]) for r in pl.roles})
    split_dims = sorted({d for t in tilings for d, _ in t.split})
    parts = {d: np.array([dict(t.split).get(d, 1) for t in tilings]) for d in split_dims}
    cand = Candidates(tiles, orders, [list(pl.perms) for pl in plans], bufs, parts)
    b = Batch(cand)
    if p.view is not None:
        lvs = [t.levels[-1] for t in tilings]
        b.view_tiles = {d: np.array([lv.size(d) for lv in lvs], dtype=np.int64) for d in "mnk"}
        b.view_order = np.array([GEMM_PERMS.index(lv.order) for lv in lvs])
        b.view_bufs = {r: np.array([lv.bufs(r) for lv in lvs]) for r in p.plans[-1].roles}
    return b


def _pick(a, i, idx=None):
    a = np.asarray(a)
    if idx is not None and a.ndim:
        return int(a[idx[i]])
    return int(a[i]) if a.ndim else int(a)


def tiling_from_batch(p, b: Batch, i: int) -> Tiling:
    """Build the ``Tiling`` of candidate ``i`` (only for the few the search returns)."""
    levels = []
    c = b.cand
    for j, pl in enumerate(nest_plans(p)):
        lv = p.levels[j]
        tile = tuple((d, _pick(c.tiles[j][d], i, c.index.get(d))) for d in pl.dims)
        order = pl.perms[_pick(c.orders[j], i)]
        bufs = tuple(sorted((r, _pick(c.bufs[j][r], i)) for r in pl.roles if r in c.bufs[j]))
        levels.append(LevelTiling(pl.name, tile, order, bufs, lv.holds))
    if p.view is not None:
        pl, lv = p.plans[-1], p.levels[-1]
        from edgeops.simulator.tilemath import roundup
        one = Batch(Candidates([{d: np.array([t]) for d, t in lvt.tile} for lvt in levels],
                               [np.array([0])] * len(levels), [list(x.perms) for x in nest_plans(p)],
                               [{}] * len(levels)))
        bmax = view_block_max(p, one)
        g = p.hw.cube_granules(p.dtype) if p.hw.family == "ascend" else {"m": 1, "n": 1, "k": 1}
        vi = b.view_index or {}
        # a view tile larger than its block means the whole block: store that (legal) size
        tile = tuple((d, min(_pick(b.view_tiles[d], i, vi.get(d)),
                             int(roundup(int(np.reshape(bmax[d], -1)[0]), g[d])))) for d in "mnk")
        order = GEMM_PERMS[_pick(b.view_order, i)]
        bufs = tuple(sorted((r, _pick(b.view_bufs[r], i)) for r in pl.roles if r in b.view_bufs))
        levels.append(LevelTiling(pl.name, tile, order, bufs, lv.holds))
    split = tuple((d, _pick(v, i)) for d, v in sorted(c.parts.items()) if _pick(v, i) > 1)
    return Tiling(p.space.kind, p.decomposition, p.hw.target if p.hw.family != "flat" else "flat",
                  tuple(levels), split)


def take(b: Batch, sl) -> Batch:
    """Candidates ``sl`` (a slice or an index array) of a batch; tables are shared."""
    c = b.cand
    cut = lambda a: a[sl] if np.ndim(a) else a
    cand = Candidates(c.tiles if c.index else [{d: cut(v) for d, v in lv.items()} for lv in c.tiles],
                      [cut(o) for o in c.orders], c.perms,
                      [{r: cut(v) for r, v in lv.items()} for lv in c.bufs],
                      {d: cut(v) for d, v in c.parts.items()}, {d: cut(v) for d, v in c.index.items()})
    out = Batch(cand)
    if b.view_tiles is not None:
        vi = b.view_index
        out.view_tiles = b.view_tiles if vi else {d: cut(v) for d, v in b.view_tiles.items()}
        out.view_index = {d: cut(v) for d, v in vi.items()} if vi else None
        out.view_order = cut(b.view_order)
        out.view_bufs = {r: cut(v) for r, v in b.view_bufs.items()}
    return out
