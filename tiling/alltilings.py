"""Every legal tiling of a small space, for checking the search against the true optimum.

Enumerates, independently of the search's candidate lists: every multiple of the legal granule
(every integer where there is none) up to the dim at every level with nesting respected, every
allowed loop order, every buffer count (per level), every core split of level 0 and, for a GEMM
view, every granule multiple up to the largest block. Illegal ones are removed by the legality
mask at evaluation.
"""
from __future__ import annotations

import numpy as np

from edgeops.errors import TilingError
from edgeops.simulator import tilemath as tm
from edgeops.tiling.batch import nest_plans
from edgeops.tiling.candidates import granules
from edgeops.tiling.enumerate import Config, defaults, expand


def all_values(D: int, g: int) -> np.ndarray:
    return np.arange(g, tm.roundup(D, g) + 1, g, dtype=np.int64)


def all_tilings(p, limit: int):
    """Yield the whole space as one Batch (TilingError when it exceeds ``limit``)."""
    plans = nest_plans(p)
    vals = {j: {d: all_values(p.nest.size[d], g) for d, g in granules(p, j).items()}
            for j in range(len(plans))}
    view_vals = None
    if p.view is not None:
        g = p.hw.cube_granules(p.dtype) if p.hw.family == "ascend" else {"m": 1, "n": 1, "k": 1}
        v = p.view
        size = p.nest.size
        mx = {"m": int(np.prod([size[d] for d in v.m_dims])), "k": size[v.k_dim] * v.taps,
              "n": size[v.n_dim]}
        view_vals = {d: all_values(mx[d], g[d]) for d in "mnk"}
        n_view = int(np.prod([len(x) for x in view_vals.values()]))
        if n_view > limit:
            raise TilingError(f"space too large to enumerate ({n_view:,} view tiles alone > {limit:,})")
    b = expand(p, [Config((), (), ())], 0, len(plans) - 1, defaults(p), vals,
               view=p.view is not None, view_values=view_vals, max_n=limit)
    if b is None or b.n > limit:
        raise TilingError(f"space too large to enumerate exhaustively (> {limit:,} tilings); "
                          f"use search()")
    yield b
