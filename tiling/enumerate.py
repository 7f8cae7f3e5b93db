"""Enumerating tilings of a problem into batches (explicit search spaces, as arrays).

A *config* fixes the outer levels of a tiling: per nest level its tile chain, order index and
buffer count, plus the core split. ``expand`` enumerates every choice of some further levels
below each config (tile sizes from a per-dim list, every allowed order, every buffer count, and at
level 0 every core split), completing deeper levels with defaults; tile chains go into per-dim
tables so the evaluation works on the tables, not per candidate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeops.simulator import tilemath as tm
from edgeops.tiling.batch import Batch, nest_plans, view_block_max
from edgeops.tiling.candidates import (bufs_options, build_batch, capacity_extra, granules,
                                       order_split_combos, product_index, tile_values)
from edgeops.tiling.model import evaluate
from edgeops.tiling.naive import _order


@dataclass(frozen=True)
class Config:
    tiles: tuple          # per nest level: tuple of tile sizes in plan dim order
    orders: tuple         # per nest level: order index
    bufs: tuple           # per nest level: buffer count
    parts: tuple = ()     # ((dim, cores), ...)


def defaults(p) -> dict:
    """Default inner tiles (largest uniform power-of-two side that fits), order and buffers."""
    plans = nest_plans(p)
    b_def = 2 if p.hw.family in ("ascend", "gpu") else 1
    size = p.nest.size
    out = {"order": [plans[j].perms.index(_order(plans[j].perms, size, None)) for j in range(len(plans))],
           "bufs": b_def, "tiles": [], "view": None}
    sides = [2 ** i for i in range(13)]
    for j in range(len(plans)):
        gr = granules(p, j)
        if j == 0:
            out["tiles"].append({d: tm.roundup(size[d], gr[d]) for d in plans[0].dims})
            continue
        best = {d: gr[d] for d in plans[j].dims}
        for s in sides:
            cand = {d: min(tm.roundup(size[d], gr[d]), max(gr[d], tm.roundup(s, gr[d]))) for d in plans[j].dims}
            if _level_fits(p, j, out["tiles"] + [cand], out, b_def):
                best = cand
        out["tiles"].append(best)
    if p.view is not None:
        j = len(plans)
        best = {d: 1 for d in "mnk"}
        g = p.hw.cube_granules(p.dtype) if p.hw.family == "ascend" else {"m": 1, "n": 1, "k": 1}
        for s in sides:
            cand = {d: max(g[d], tm.roundup(s, g[d])) for d in "mnk"}
            if _level_fits(p, j, out["tiles"], out, b_def, view=cand):
                best = cand
        out["view"] = best
    return out


def _level_fits(p, j, tiles, d, b_def, view=None) -> bool:
    plans = nest_plans(p)
    full = [{k: np.array([v]) for k, v in (tiles[i] if i < len(tiles) else tiles[-1]).items()}
            for i in range(len(plans))]
    orders = [np.array([o]) for o in d["order"]]
    vt = None
    if p.view is not None:
        v = view or {"m": 1, "n": 1, "k": 1}
        vt = ({k: np.array([x]) for k, x in v.items()}, np.array([0]), np.array([b_def]))
    b = build_batch(p, full, {}, orders, [np.array([b_def])] * len(plans), {}, vt)
    s = evaluate(p, b)
    name = p.plans[j].name
    for (lname, mem), entries in s.ev.usage.items():
        if lname != name:
            continue
        m = p.hw.memory(mem)
        tot = sum(n * tm.roundup(by, m.alignment) for _, by, n in entries)
        if np.any(tot > m.capacity):
            return False
    return True


def level_values(p, j: int, limit: int) -> dict[str, np.ndarray]:
    pl = p.plans[j]
    gr = granules(p, j)
    ex = capacity_extra(p, j)
    return {d: tile_values(p.nest.size[d], gr[d], limit, ex) for d in pl.dims}


def expand(p, configs: list[Config], lo: int, hi: int, dflt: dict, values: dict,
           view: bool = False, view_limit: int = 8, view_values: dict | None = None,
           max_n: int | None = None) -> Batch | None:
    """Enumerate nest levels ``lo..hi`` (inclusive; ``hi < lo``: none) below each config, and the
    GEMM view level too when ``view``. ``values[j][d]``: candidate sizes at level ``j``."""
    plans = nest_plans(p)
    L = len(plans)
    dims = plans[0].dims
    rows = {d: [] for d in dims}
    idx_parts = {d: [] for d in dims}
    orders = [[] for _ in range(L)]
    bufs = [[] for _ in range(L)]
    parts_list: list[dict] = []
    counts = []
    vt_parts = []
    offset = {d: 0 for d in dims}
    bopts = bufs_options(p)
    if max_n is not None and _count(p, configs, lo, hi, values, view, view_limit, bopts) > max_n:
        return None
    for cfg in configs:
        # per-dim chains
        chains = {}
        for k, d in enumerate(dims):
            ch = np.array([[cfg.tiles[l][k] for l in range(lo)]], dtype=np.int64).reshape(1, lo)
            for l in range(lo, hi + 1):
                v = values[l][d]
                last = ch[:, -1:] if ch.shape[1] else np.full((1, 1), np.iinfo(np.int64).max)
                ok = v[None, :] <= last
                r, c = np.nonzero(ok)
                ch = np.concatenate([ch[r], v[c][:, None]], axis=1)
            for l in range(max(lo, hi + 1), L):
                last = ch[:, -1]
                ch = np.concatenate([ch, np.minimum(last, dflt["tiles"][l][d])[:, None]], axis=1)
            chains[d] = ch
        # order / split / buffer choices of the enumerated levels
        lev = list(range(lo, hi + 1))
        choice_lists = []
        for l in lev:
            if l == 0:
                choice_lists.append(order_split_combos(p))
            else:
                choice_lists.append([(i, {}) for i in range(len(plans[l].perms))])
            choice_lists.append(bopts)
        sizes = [len(chains[d]) for d in dims] + [len(c) for c in choice_lists]
        if view:
            vsizes = [6, len(bopts)]
            sizes += vsizes
        idx = product_index(sizes)
        n = len(idx[0]) if idx else 1
        counts.append(n)
        for k, d in enumerate(dims):
            rows[d].append(chains[d])
            idx_parts[d].append(idx[k] + offset[d])
            offset[d] += len(chains[d])
        ci = len(dims)
        for l in range(L):
            if l < lo:
                orders[l].append(np.full(n, cfg.orders[l]))
                bufs[l].append(np.full(n, cfg.bufs[l]))
            elif l <= hi:
                ch_list = choice_lists[2 * (l - lo)]
                sel = idx[ci]
                orders[l].append(np.array([c[0] for c in ch_list])[sel])
                if l == 0:
                    parts_list.append((ch_list, sel, n))
                bufs[l].append(np.array(bopts)[idx[ci + 1]])
                ci += 2
            else:
                orders[l].append(np.full(n, dflt["order"][l]))
                bufs[l].append(np.full(n, dflt["bufs"]))
        if lo > 0 or hi < 0:
            parts_list.append((None, dict(cfg.parts), n))
        if view:
            vt_parts.append((idx[ci], idx[ci + 1]))
    tables = [{d: np.concatenate(rows[d])[:, l] for d in dims} for l in range(L)]
    index = {d: np.concatenate(idx_parts[d]) for d in dims}
    orders = [np.concatenate(o) for o in orders]
    bufs = [np.concatenate(b) for b in bufs]
    parts = _parts(parts_list, p)
    b = build_batch(p, tables, index, orders, bufs, parts)
    if p.view is not None:
        b = _with_view(p, b, dflt, view, vt_parts, bopts, view_limit, view_values)
    return b


def _count(p, configs, lo, hi, values, view, view_limit, bopts) -> int:
    """Size of an ``expand`` without building it (the view part estimated from the dims)."""
    plans = nest_plans(p)
    total = 0
    for cfg in configs:
        n = 1
        for k, d in enumerate(plans[0].dims):
            ch = np.array([cfg.tiles[lo - 1][k]]) if lo > 0 else np.array([np.iinfo(np.int64).max])
            for l in range(lo, hi + 1):
                v = values[l][d]
                ch = np.concatenate([v[v <= x] for x in ch]) if len(ch) else ch
            n *= len(ch)
        for l in range(lo, hi + 1):
            n *= (len(order_split_combos(p)) if l == 0 else len(plans[l].perms)) * len(bopts)
        total += n
    if view and p.view is not None:
        v, size = p.view, p.nest.size
        mx = {"m": int(np.prod([size[d] for d in v.m_dims])), "k": size[v.k_dim] * v.taps,
              "n": size[v.n_dim]}
        g = p.hw.cube_granules(p.dtype) if p.hw.family == "ascend" else {"m": 1, "n": 1, "k": 1}
        per = 6 * len(bopts)
        for d in "mnk":
            per *= len(tile_values(mx[d], g[d], view_limit))
        total *= per
    return total


def _parts(parts_list, p) -> dict:
    dims = sorted({d for item in parts_list for d in (
        (k for c in item[0] for k in c[1]) if item[0] is not None else item[1])})
    out = {d: [] for d in dims}
    for ch_list, sel, n in parts_list:
        for d in dims:
            if ch_list is None:
                out[d].append(np.full(n, sel.get(d, 1)))
            else:
                out[d].append(np.array([c[1].get(d, 1) for c in ch_list])[sel])
    return {d: np.concatenate(v) for d, v in out.items()}


def _with_view(p, b: Batch, dflt, view: bool, vt_parts, bopts, limit, values=None) -> Batch:
    """Add GEMM-view tiles as tables: the defaults, or (``view``) an enumeration. A view tile
    larger than a candidate's block stands for the whole block (see model.tiling_from_batch)."""
    g = p.hw.cube_granules(p.dtype) if p.hw.family == "ascend" else {"m": 1, "n": 1, "k": 1}
    n = b.n
    if not view:
        b.view_tiles = {d: np.array([dflt["view"][d]]) for d in "mnk"}
        b.view_index = {d: np.zeros(n, dtype=np.int64) for d in "mnk"}
        b.view_order = np.zeros(n, dtype=np.int64)
        b.view_bufs = {r: np.full(n, dflt["bufs"]) for r in p.plans[-1].roles}
        return b
    if values is None:
        bm = view_block_max(p, b)
        values = {d: tile_values(int(np.max(bm[d])), g[d], limit) for d in "mnk"}
    vidx = product_index([len(values[d]) for d in "mnk"])
    rep = len(vidx[0])
    order_sel = np.concatenate([o for o, _ in vt_parts])
    buf_sel = np.concatenate([x for _, x in vt_parts])
    take = np.repeat(np.arange(n), rep)
    b2 = _repeat(b, take)
    b2.view_tiles = {d: values[d] for d in "mnk"}
    b2.view_index = {d: np.tile(vidx[k], n) for k, d in enumerate("mnk")}
    b2.view_order = order_sel[take]
    b2.view_bufs = {r: np.array(bopts)[buf_sel[take]] for r in p.plans[-1].roles}
    return b2


def _repeat(b: Batch, take: np.ndarray) -> Batch:
    c = b.cand
    cand = type(c)(c.tiles, [o[take] for o in c.orders], c.perms,
                   [{r: np.asarray(v)[take] if np.ndim(v) else v for r, v in lv.items()} for lv in c.bufs],
                   {d: np.asarray(v)[take] for d, v in c.parts.items()},
                   {d: v[take] for d, v in c.index.items()})
    return Batch(cand)


def configs_of(p, b: Batch, picks, upto: int) -> list[Config]:
    """The configs (levels < upto, with the split) of the chosen candidates, deduplicated."""
    plans = nest_plans(p)
    c = b.cand
    out, seen = [], set()
    for i in picks:
        tiles = tuple(tuple(int(c.tiles[l][d][c.index[d][i]]) for d in plans[0].dims)
                      for l in range(upto))
        orders = tuple(int(c.orders[l][i]) for l in range(upto))
        bufs = tuple(int(np.asarray(next(iter(c.bufs[l].values())))[i]) for l in range(upto))
        parts = tuple((d, int(v[i])) for d, v in sorted(c.parts.items()) if int(v[i]) > 1)
        cfg = Config(tiles, orders, bufs, parts)
        if cfg not in seen:
            seen.add(cfg)
            out.append(cfg)
    return out
