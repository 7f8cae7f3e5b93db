"""Random legal tilings of an operator, for cross-checking the emulator against the simulator.

The search only returns good tilings; a cross-check needs bad ones too -- reduction loops
outside the accumulator (partial-sum spills and reloads), ragged tails, every loop order,
single and double buffers, core splits. Candidates are drawn at random from the problem's own
description (its levels, dims, allowed orders, granules, split dims) and kept when
``edgeops.tiling.check`` accepts them.
"""
from __future__ import annotations

import numpy as np

from edgeops.errors import TilingError
from edgeops.tiling import check, problem_for
from edgeops.tiling.problem import legal_granule
from edgeops.tiling.tiling import LevelTiling, Tiling


def _pick(rng, limit: int, g: int, full: int) -> int:
    """A tile size <= limit: a multiple of the granule (ragged tails likely), or the whole dim."""
    top = -(-limit // g)
    if rng.random() < 0.2:
        return min(limit, full) if limit >= full else limit
    return int(min(limit, g * rng.integers(1, top + 1))) if g > 1 else int(rng.integers(1, limit + 1))


def random_tilings(op, board, n: int, seed: int = 0, decomposition: str | None = None,
                   buffers: int | None = None, fixed: dict | None = None,
                   max_tries: int = 4000) -> list[Tiling]:
    """Up to ``n`` distinct legal tilings of ``op`` on ``board`` (``buffers``: force every
    operand's buffer count to 1 or 2; ``fixed``: {dim: tile} at the first level)."""
    p = problem_for(op, board, decomposition)
    rng = np.random.default_rng(seed)
    size = p.nest.size
    out, seen = [], set()
    for _ in range(max_tries):
        if len(out) >= n:
            break
        levels, parent = [], dict(size)
        for j, pl in enumerate(p.plans):
            if pl.view:
                t = _view_tiles(p, rng, parent)
            else:
                t = {}
                for d in pl.dims:
                    g = legal_granule(p, j, d)
                    lim = parent[d] if j else -(-size[d] // g) * g
                    t[d] = (fixed or {}).get(d) if j == 0 and d in (fixed or {}) else \
                        _pick(rng, lim, g, size[d])
                parent = {d: min(t[d], parent[d]) for d in pl.dims}
            order = pl.perms[rng.integers(len(pl.perms))]
            bufs = tuple(sorted((r, buffers or int(rng.integers(1, 3))) for r in pl.roles))
            levels.append(LevelTiling(pl.name, tuple(t.items()), tuple(order), bufs, p.levels[j].holds))
        split = _split(p, rng, levels[0], size)
        til = Tiling(p.space.kind, p.decomposition, p.hw.target, tuple(levels), split)
        if til in seen:
            continue
        try:
            check(p, til)
        except TilingError:
            continue
        seen.add(til)
        out.append(til)
    return out


def _view_tiles(p, rng, parent) -> dict:
    v = p.view
    blocks = {"m": int(np.prod([parent[d] for d in v.m_dims])), "k": parent[v.k_dim] * v.taps,
              "n": parent[v.n_dim]}
    g = p.hw.cube_granules(p.dtype)
    return {x: _pick(rng, -(-blocks[x] // g[x]) * g[x], g[x], blocks[x]) for x in "mnk"}


def _split(p, rng, lv0: LevelTiling, size) -> tuple:
    """Split the leading non-trivial level-0 loop (and maybe the next) across some cores."""
    lead = [d for d in lv0.order if lv0.size(d) < size[d]][:2]
    if not lead or lead[0] not in p.split_dims or rng.random() < 0.25:
        return ()
    parts = int(rng.integers(2, p.cores + 1)) if p.cores > 1 else 1
    split = [(lead[0], parts)] if parts > 1 else []
    if len(lead) > 1 and lead[1] in p.split_dims and p.cores // max(parts, 1) >= 2 and rng.random() < 0.4:
        split.append((lead[1], int(rng.integers(2, p.cores // parts + 1))))
    return tuple(split)
