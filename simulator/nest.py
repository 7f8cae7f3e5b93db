"""Closed-form traffic of a tiled loop nest over a memory hierarchy (vectorised).

This module is the traffic *specification*: an emulator that executes the same tiling must move
exactly these bytes on every path. The conventions:

Loop nest. Level ``j`` (outermost on-chip level first) has a tile size per loop dim and a loop
order (outermost first) over the tiles of its parent block (level ``j-1``; the whole problem for
the first level). Tile sizes need not divide anything: every block is cut into ``b // t`` full
tiles and one ragged tail. The loops that the tiling splits across cores (``parts[d] > 1``) are
hoisted outermost and their tiles are cut into ``parts[d]`` contiguous ranges, one per core
(the busiest core gets ``ceil(tiles / parts)`` of them; that is what timing charges).

Loads. The combined nest is level 0's loops, then level 1's inside each level-0 tile, and so on.
A loop whose tile equals its parent tile (a single iteration in every block) is *degenerate* and
does not exist in the program. An operand held at level ``j`` is loaded (parent memory -> its
memory at ``j``) at the start of every iteration of its *innermost relevant loop*: the innermost
non-degenerate loop, at any level ``<= j``, whose index it depends on. The load sits in that
loop's body whatever the trip counts (the program never checks whether the data happen to be
there already). So for each loop dim ``d`` the load count factorises: relevant ``d``: the sum over
all level-``j`` tiles of the tile's footprint; irrelevant ``d``: with the innermost relevant loop
at level ``l``, the number of level-``l`` tiles of ``d`` if ``d``'s level-``l`` loop is outside it,
else the number of level-``l-1`` blocks of ``d`` (above level 0: 1, or for a dim split across
cores the number of core ranges, since every core loads its own copy).

Accumulator. The accumulated output (role ``acc``) is visited the same way. The first visit of a
tile starts from zero; every visit ends with a write to the parent (a spill of partial sums in the
accumulator dtype, or the final result: in the output dtype when the parent is off-chip, else in
the accumulator dtype); every later visit first reloads the partial sums (accumulator dtype).

Transfers. Each load or store of one tile is one DMA transfer (a strided multi-dimensional copy);
the transfer count multiplies the path's setup latency. Bursts: a transfer that touches the
off-chip memory puts each of its contiguous runs (in the off-chip layout) on the bus rounded up to
the path's burst. ``Move.run`` gives the run of a full tile (every transfer charged like it);
``Move.runs`` -- when a move sets it -- lists (number of runs, bytes per run) per size class of
tile, the runs being the real ones for the layout (a conv output tile in NCHW breaks at every
``ow`` row of its block, a tail tile's rows are short), and the bus carries
``sum n_runs * roundup(run, burst)``. A normalisation's input (``passes_dim``)
is read twice when level 0 splits its row (a statistics pass, then the normalising pass), once
when a whole row is on chip.

Paths are named ``"src->dst"`` with the board's memory names. On an Ascend board: ``gm->l1``
(A and B tiles, MTE2), ``l1->l0a`` / ``l1->l0b`` (MTE1; for a convolution ``l1->l0a`` is the
im2col expansion, see ``gemmview.py``), ``l0c->gm`` (FixPipe: final results in the output dtype
and spilled partial sums in the accumulator dtype), ``gm->l0c`` (partial sums reloaded for a
later visit; it has no board path and is timed on the FixPipe link's figures), ``gm->ub`` /
``ub->gm`` (vector ops, MTE2 / MTE3), ``gm->fixpipe`` (a GEMM's bias, ``bias=1``: FixPipe reads
one accumulator-dtype value per output channel (and batch entry) of every final C tile; counted
in the bytes, not timed: it rides along with the store). Counts are whole-op totals over all cores.

Bytes. A move that touches the off-chip memory carries only real data: ragged tails move fewer
bytes and a convolution's input window is clipped to the real rows (padding is never read). A
move between two on-chip memories into a ``padded`` level (Ascend L0A/L0B, the CPU register file)
carries every tile rounded up to the level's granule per dim (a 20-row fp16 tile moves 32 rows: two
fractals); window footprints on chip are unclipped ((t-1)*stride + extent rows, padding
materialised).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from edgeops.simulator import tilemath as tm


@dataclass(frozen=True)
class Window:
    """Operand axis read through a sliding window over output loop dim ``dim``."""
    dim: str
    in_size: int
    stride: int
    dilation: int
    kernel: int
    pad_begin: int
    pad_end: int

    @property
    def extent(self) -> int:
        return (self.kernel - 1) * self.dilation + 1


@dataclass(frozen=True)
class Operand:
    role: str                        # A, B, C (matrix) / in, out (vector)
    dims: tuple[str, ...]            # loop dims it depends on, in memory layout order
    elem: int                        # bytes per element in memory (the output dtype for acc)
    const: int = 1                   # elements per index point (R*S taps of a conv weight)
    windows: tuple[Window, ...] = ()
    acc: bool = False
    acc_elem: int = 0                # bytes per partial sum
    passes_dim: str | None = None    # a row split along this dim costs a second read pass
    out_div: int = 1                 # the final store writes 1/out_div of the accumulator
                                     # (SwiGLU's epilogue gates 2F columns into F)
    bias: tuple[str, ...] = ()       # a bias added on the final store (FixPipe): the dims each
                                     # element of a final tile reads its own value along

    def window(self, d: str) -> Window | None:
        return next((w for w in self.windows if w.dim == d), None)


@dataclass(frozen=True)
class Nest:
    dims: tuple[tuple[str, int], ...]        # loop dim -> size
    operands: tuple[Operand, ...]
    gemm: tuple[tuple[str, str], ...] = ()   # loop dim -> gemm-view dim (m/n/k/b) for granules

    @property
    def size(self) -> dict[str, int]:
        return dict(self.dims)

    def gdim(self, d: str) -> str:
        return dict(self.gemm).get(d, "b")


@dataclass
class Move:
    """Bytes one operand moves between two memories, and in how many DMA transfers."""
    role: str
    src: str
    dst: str
    level: int
    bytes: np.ndarray
    transfers: np.ndarray
    bufs: np.ndarray                  # buffers of the on-chip end (2 = overlapped with compute)
    run: np.ndarray | int = 0         # contiguous bytes per row on the off-chip side (burst)
    kind: str = "load"                # load | spill | reload | store | param (bias: bytes only)
    runs: tuple = ()                  # exact burst classes when known: ((n_runs, run_bytes), ...)
                                      # -- the bus carries sum n_runs * roundup(run_bytes, burst)
                                      # (replaces ``run``; see gemmview.py for conv outputs)

    @property
    def key(self) -> str:
        return f"{self.src}->{self.dst}"


@dataclass
class Candidates:
    """A batch of tilings of one nest as arrays (one entry per candidate).

    ``tiles[j][d]`` holds level ``j``'s tile of dim ``d``: a full-length array, or -- when ``index``
    has ``d`` -- a short table of distinct tile chains that ``index[d]`` picks from per candidate
    (row ``u`` of every level's table is one chain). Per-dim arithmetic then runs on the tables
    only, which is what makes millions of candidates per second possible.
    """
    tiles: list[dict[str, np.ndarray]]        # per level: dim -> tile size (or table)
    orders: list[np.ndarray]                  # per level: index into perms[level]
    perms: list[list[tuple[str, ...]]]        # per level: the loop orders (outermost first)
    bufs: list[dict[str, np.ndarray]]         # per level: role -> buffers (1 or 2)
    parts: dict[str, np.ndarray] = field(default_factory=dict)   # dim -> core ranges
    index: dict[str, np.ndarray] = field(default_factory=dict)   # dim -> row of its table

    @property
    def n(self) -> int:
        for a in list(self.orders) + list(self.index.values()):
            if np.ndim(a):
                return len(a)
        return 1


def gather(a, idx):
    return np.take(a, idx) if idx is not None and np.ndim(a) else a


def effective_tiles(nest: Nest, cand: Candidates) -> list[dict[str, np.ndarray]]:
    """Tile sizes clamped to the dim and to the parent tile (per-dim arrays or tables)."""
    out, prev = [], {d: np.int64(s) for d, s in nest.dims}
    for lv in cand.tiles:
        cur = {d: np.minimum(np.asarray(lv[d], dtype=np.int64), prev[d]) for d, _ in nest.dims}
        out.append(cur)
        prev = cur
    return out


@lru_cache(maxsize=4096)
def _pos_table(perms: tuple, dims: tuple) -> dict[str, np.ndarray]:
    return {d: np.array([p.index(d) if d in p else -1 for p in perms]) for d in dims}


@lru_cache(maxsize=4096)
def _outer_table(perms: tuple, dims: tuple, relevant: frozenset) -> dict[str, np.ndarray]:
    """For each dim: per order index, is its loop outside the innermost relevant loop?"""
    tbl = {d: np.zeros(len(perms), dtype=bool) for d in dims}
    for i, p in enumerate(perms):
        inner = max((k for k, d in enumerate(p) if d in relevant), default=-1)
        for k, d in enumerate(p):
            tbl[d][i] = k < inner
    return tbl


class NestEval:
    """Per-dim tile classes of a candidate batch, computed once and shared by all operands."""

    def __init__(self, nest: Nest, cand: Candidates, levels, offchip: str):
        self.nest, self.cand, self.levels, self.offchip = nest, cand, levels, offchip
        self.size = nest.size
        self.idx = {d: cand.index.get(d) for d in self.size}
        chains = {d: [] for d in self.size}
        self.cls, self.ntiles = [], []
        for lv in cand.tiles:
            cl, nt = {}, {}
            for d in self.size:
                chains[d].append(lv[d])
                cl[d] = tm.classes(self.size[d], chains[d])
                nt[d] = sum(c for _, c in cl[d])
            self.cls.append(cl)
            self.ntiles.append(nt)
        self.eff = effective_tiles(nest, cand)
        self._memo: dict = {}

    def g(self, d: str, key, fn):
        """Per-candidate value of a per-dim quantity (computed on the table, then gathered)."""
        k = (d, key)
        if k not in self._memo:
            self._memo[k] = gather(fn(), self.idx.get(d))
        return self._memo[k]

    def classes_n(self, j: int, d: str) -> list:
        """Size classes of dim ``d`` at level ``j`` as per-candidate arrays (``j < 0``: whole dim)."""
        if j < 0:
            return [(np.int64(self.size[d]), np.int64(1))]
        return [(self.g(d, ("cs", j, i), lambda s=s: s), self.g(d, ("cc", j, i), lambda c=c: c))
                for i, (s, c) in enumerate(self.cls[j][d])]

    def parent(self, j: int, role: str) -> tuple[str, int]:
        for i in range(j - 1, -1, -1):
            m = self.levels[i].memory_of(role)
            if m is not None:
                return m, i
        return self.offchip, -1

    def nt(self, j: int, d: str):
        if j < 0:
            return np.int64(1)
        return self.g(d, ("nt", j), lambda: self.ntiles[j][d])

    def footprint_sum(self, op: Operand, j: int, d: str, real: bool, g: int):
        w = op.window(d)
        if w is None:
            if real or g == 1:
                return np.int64(self.size[d])
            return self.g(d, ("pad", j, g), lambda: sum(c * tm.roundup(s, g) for s, c in self.cls[j][d]))
        return self.g(d, ("win", j, real, w), lambda: self._window_sum(w, j, d, real))

    def _window_sum(self, w: Window, j: int, d: str, real: bool):
        if real and j == 0:
            if w.pad_begin < w.extent and w.pad_end < w.extent:
                return tm.window_rows_clipped(self.size[d], self.eff[0][d], w.stride, w.extent,
                                              w.pad_begin, w.in_size)
            t = np.asarray(self.eff[0][d])
            uniq, inv = np.unique(t, return_inverse=True)
            vals = np.array([tm.window_rows_clipped_enum(self.size[d], int(u), w.stride, w.extent,
                                                         w.pad_begin, w.in_size) for u in uniq])
            return vals[inv].reshape(t.shape)
        return sum(c * tm.window_rows(s, w.stride, w.extent) for s, c in self.cls[j][d])

    def pos(self, l: int, d: str):
        """Position of ``d``'s loop in level ``l``'s order, per candidate."""
        return self.g("_", ("pos", l, d), lambda: np.take(
            _pos_table(tuple(self.cand.perms[l]), tuple(self.size))[d], self.cand.orders[l]))

    def nondeg(self, l: int, d: str):
        """Does ``d``'s loop at level ``l`` iterate (tile smaller than its parent tile)?"""
        parent = (lambda: self.size[d]) if l == 0 else (lambda: self.eff[l - 1][d])
        return self.g(d, ("nd", l), lambda: self.eff[l][d] < parent())

    def innermost(self, rel: frozenset, l: int):
        """Position of the innermost non-degenerate loop of a ``rel`` dim at level ``l`` (-1: none)."""
        key = ("_", ("inner", rel, l))
        if key not in self._memo:
            p = np.int64(-1)
            for d in self.size:
                if d in rel:
                    p = np.maximum(p, np.where(self.nondeg(l, d), self.pos(l, d), -1))
            self._memo[key] = p
        return self._memo[key]

    def reload_factor(self, rel: frozenset, j: int, d: str):
        """Factor of irrelevant dim ``d`` in the load count of an operand held at level ``j``."""
        key = ("_", ("rf", rel, j, d))
        if key in self._memo:
            return self._memo[key]
        p = self.cand.parts.get(d)
        f = np.int64(1) if p is None else np.minimum(p, self.nt(0, d))
        for l in range(j + 1):
            pstar = self.innermost(rel, l)
            here = np.where(self.pos(l, d) < pstar, self.nt(l, d), f if l == 0 else self.nt(l - 1, d))
            f = np.where(pstar >= 0, here, f)
        self._memo[key] = f
        return f

    def moves(self) -> list[Move]:
        out = []
        for op in self.nest.operands:
            for j, lvl in enumerate(self.levels):
                mem = lvl.memory_of(op.role)
                if mem is None:
                    continue
                src, _ = self.parent(j, op.role)
                real = src == self.offchip or not lvl.padded
                distinct_e, distinct_n = np.int64(op.const), np.int64(1)
                for d in op.dims:
                    g = lvl.granule_of(self.nest.gdim(d))
                    distinct_e = distinct_e * self.footprint_sum(op, j, d, real, g)
                    distinct_n = distinct_n * self.nt(j, d)
                rep = np.int64(1)
                for d in self.size:
                    if d not in op.dims:
                        rep = rep * self.reload_factor(frozenset(op.dims), j, d)
                if op.passes_dim is not None and j == 0:
                    split = self.g(op.passes_dim, ("split", 0),
                                   lambda: self.eff[0][op.passes_dim] < self.size[op.passes_dim])
                    rep = rep * np.where(split, 2, 1)
                elems, count = distinct_e * rep, distinct_n * rep
                bufs = np.asarray(self.cand.bufs[j].get(op.role, 1))
                run = self.run_bytes(op, j) if src == self.offchip else 0
                if not op.acc:
                    out.append(Move(op.role, src, mem, j, elems * op.elem, count, bufs, run))
                    continue
                final = op.elem if src == self.offchip else op.acc_elem
                extra = elems - distinct_e
                out.append(Move(op.role, mem, src, j, extra * op.acc_elem + distinct_e * final
                                // (op.out_div if src == self.offchip else 1),
                                count, bufs, run, "store"))
                if op.acc_elem and np.any(extra):
                    out.append(Move(op.role, src, mem, j, extra * op.acc_elem, count - distinct_n,
                                    bufs, run, "reload"))
                if op.bias and src == self.offchip:
                    out.append(self.bias_move(op, j))
        return out

    def bias_move(self, op: Operand, j: int) -> Move:
        """The bias the final store of every accumulator tile reads (one accumulator-dtype value
        per element along ``op.bias`` -- per output channel and batch entry -- per tile of the
        other dims). FixPipe reads it on its way out; it is counted, not timed."""
        elems, count = np.int64(1), np.int64(1)
        for d in op.dims:
            n = self.nt(j, d)
            elems = elems * (self.footprint_sum(op, j, d, True, 1) if d in op.bias else n)
            count = count * n
        return Move("bias", self.offchip, "fixpipe", j, elems * op.acc_elem, count,
                    np.int64(2), 0, "param")

    def run_bytes(self, op: Operand, j: int):
        """Contiguous bytes per row of a tile in the off-chip layout (innermost dims first)."""
        run, full = np.int64(op.elem), True
        for d in reversed(op.dims):
            w = op.window(d)
            ext = self.g(d, ("ext", j, w), lambda: np.minimum(
                tm.window_rows(self.eff[j][d], w.stride, w.extent), w.in_size) if w else self.eff[j][d])
            run = np.where(full, run * ext, run)
            full = full & self.g(d, ("full", j), lambda: self.eff[j][d] >= self.size[d])
        return run

    def capacity(self, j: int) -> dict[str, list]:
        """Per memory of level ``j``: [(role, bytes of one full tile, buffers)]."""
        lvl, use = self.levels[j], {}
        for op in self.nest.operands:
            mem = lvl.memory_of(op.role)
            if mem is None:
                continue
            elems = np.int64(op.const)
            for d in op.dims:
                w, gr = op.window(d), lvl.granule_of(self.nest.gdim(d))
                elems = elems * self.g(d, ("tile", j, w, gr), lambda: (
                    tm.window_rows(self.eff[j][d], w.stride, w.extent) if w
                    else tm.roundup(self.eff[j][d], gr)))
            b = elems * (op.acc_elem if op.acc else op.elem)
            use.setdefault(mem, []).append((op.role, b, np.asarray(self.cand.bufs[j].get(op.role, 1))))
        return use

    def compute_macs(self, granules: dict[str, int], const: int = 1):
        """Multiply-accumulates the innermost tiles execute, each tile padded per dim."""
        j = len(self.cand.tiles) - 1
        macs = np.int64(const)
        for d in self.size:
            g = granules.get(self.nest.gdim(d), 1)
            macs = macs * (np.int64(self.size[d]) if g == 1 else self.g(
                d, ("pad", j, g), lambda: sum(c * tm.roundup(s, g) for s, c in self.cls[j][d])))
        return macs

    def steps(self):
        j = len(self.cand.tiles) - 1
        out = np.int64(1)
        for d in self.size:
            out = out * self.nt(j, d)
        return out
