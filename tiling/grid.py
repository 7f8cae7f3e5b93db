"""Traffic and latency over a grid of two tile sizes around a tiling (the ``tune --plot`` heatmap).

``tile_grid(op, board, tiling)`` varies two tile sizes of the outermost level of ``tiling``
(by default the two largest output dims) over their candidate values, keeps every other choice
(loop orders, buffers, split, inner tiles clipped to the new outer tile, a GEMM-view tile to its
block), and evaluates the whole grid in one vectorised call. Illegal points are NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeops.errors import TilingError
from edgeops.simulator import tilemath as tm
from edgeops.tiling.api import as_space, problem_for
from edgeops.tiling.batch import batch_from_tilings, nest_plans, view_block_max
from edgeops.tiling.candidates import tile_values
from edgeops.tiling.legality import fit
from edgeops.tiling.model import evaluate
from edgeops.tiling.problem import legal_granule
from edgeops.tiling.tiling import Tiling


@dataclass
class Grid:
    op: str
    board: str
    level: str
    x_dim: str
    y_dim: str
    xs: np.ndarray
    ys: np.ndarray
    offchip_bytes: np.ndarray     # [len(ys), len(xs)], NaN where illegal
    latency_s: np.ndarray
    best: tuple[int, int]          # the tiling's own (x, y) tile sizes

    def to_dict(self) -> dict:
        nan = lambda a: [[None if np.isnan(v) else float(v) for v in row] for row in a]
        return {"op": self.op, "board": self.board, "level": self.level, "x_dim": self.x_dim,
                "y_dim": self.y_dim, "xs": self.xs.tolist(), "ys": self.ys.tolist(),
                "offchip_bytes": nan(self.offchip_bytes), "latency_s": nan(self.latency_s),
                "best": list(self.best)}


def pick_dims(p, t: Tiling) -> tuple[str, str]:
    """The two level-0 dims worth plotting: output dims (those of the accumulated operand)
    before reduction dims, larger first."""
    size = p.nest.size
    out = set().union(*[o.dims for o in p.nest.operands if o.acc])
    dims = [d for d, _ in t.levels[0].tile if size.get(d, 1) > 1]
    dims.sort(key=lambda d: (d not in out, -size[d]))
    if len(dims) < 2:
        raise TilingError(f"{p.space.signature}: fewer than two dims to vary at level "
                          f"{t.levels[0].name}; nothing to draw a heatmap over")
    return dims[0], dims[1]


def tile_grid(op, board, tiling: Tiling, *, dims: tuple[str, str] | None = None, limit: int = 16,
              target: str | None = None) -> Grid:
    """Evaluate ``tiling`` with its level-0 tiles of ``dims`` replaced by every pair of candidate
    sizes (at most ``limit`` per dim). Precondition: ``tiling`` fits the op (TilingError)."""
    sp = as_space(op)
    p = problem_for(sp, board, tiling.decomposition, target)
    fit(p, tiling)
    dx, dy = dims or pick_dims(p, tiling)
    size = p.nest.size
    for d in (dx, dy):
        if d not in size:
            raise TilingError(f"{sp.signature}: level {tiling.levels[0].name} has no dim {d!r}; "
                              f"it has {list(size)}")
    lv = tiling.levels[0]
    # the tiling's own sizes are always on the grid
    xs = np.unique(np.append(tile_values(size[dx], legal_granule(p, 0, dx), limit), lv.size(dx)))
    ys = np.unique(np.append(tile_values(size[dy], legal_granule(p, 0, dy), limit), lv.size(dy)))
    X, Y = np.meshgrid(xs, ys)
    n = X.size
    b = batch_from_tilings(p, [tiling] * n)
    tiles = b.cand.tiles
    tiles[0][dx] = X.reshape(-1).astype(np.int64)
    tiles[0][dy] = Y.reshape(-1).astype(np.int64)
    for j in range(1, len(nest_plans(p))):
        for d in tiles[j]:
            if d in tiles[j - 1]:
                tiles[j][d] = np.minimum(tiles[j][d], tiles[j - 1][d])
    if p.view is not None:
        bmax = view_block_max(p, b)
        g = p.hw.cube_granules(p.dtype) if p.hw.family == "ascend" else {"m": 1, "n": 1, "k": 1}
        for d in "mnk":
            cap = tm.roundup(np.maximum(np.asarray(bmax[d]), 1), g[d])
            b.view_tiles[d] = np.minimum(b.view_tiles[d], cap).astype(np.int64)
    s = evaluate(p, b)
    off = np.where(s.legal, s.offchip_bytes.astype(float), np.nan).reshape(X.shape)
    lat = np.where(s.legal, np.asarray(s.latency_s, float), np.nan).reshape(X.shape)
    return Grid(sp.signature, p.hw.board.name, lv.name, dx, dy, xs, ys, off, lat,
                (lv.size(dx), lv.size(dy)))
