"""The innermost level of an implicit-GEMM convolution, seen as a GEMM over each outer block.

The Cube (and a CPU register micro-kernel) does not see a convolution: it sees, for every block
the level above holds (``n_b x oh_b x ow_b`` pixels, ``c_b`` input channels, ``k_b`` output
channels, one group at a time), the matrix product ``(M_b = n_b*oh_b*ow_b) x (K_b = c_b*R*S)`` by
``K_b x (N_b = k_b)``. The level's tiles ``(m0, n0, k0)`` cut that product; ``m0`` runs over the
block's flattened pixels (row-major n, oh, ow), ``k0`` over its flattened (c, r, s). A block
holding ``g_b > 1`` groups (the level above tiles g by more than 1) runs its GEMMs one group at a
time: the view's loops are (group, then the m/n/k loops in the view's order), and L0 budgets one
group's tile.

Traffic follows the conventions of :mod:`edgeops.simulator.nest` with the block as the parent:
A (the im2col matrix, built on the fly from the block's input window, e.g. Ascend load3d
L1 -> L0A) and B move padded to the level's granules; the accumulator C is visited once per
``k0`` step when ``k`` is outside C's innermost loop, else once per block, and a block of every
``c`` range visits it again (partial sums) -- unless the view's m and n tiles cover every block
and the group tile above is 1 (all of C's view loops degenerate), in which case C's innermost
loop is the conv nest's and the accumulator stays in place while the ``c`` loop runs inside it.
The group loop, when it exists (group tile > 1), is C's (and A's and B's) outermost relevant
view loop: every operand is then loaded, and C visited, once per group per block at least --
an L0 tile is never kept across blocks while the groups of a block take turns. Blocks come in at most two
sizes per dim and level (full or tail), so every sum over blocks is a short sum over classes.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from edgeops.simulator import tilemath as tm
from edgeops.simulator.nest import Move, gather

GEMM_PERMS = tuple(itertools.permutations(("m", "n", "k")))
_POS = {x: np.array([p.index(x) for p in GEMM_PERMS]) for x in "mnk"}


@dataclass(frozen=True)
class GemmView:
    m_dims: tuple[str, ...]     # loop dims flattened into the GEMM's m (pixels)
    k_dim: str                  # reduction loop dim (input channels); K = c * taps
    n_dim: str                  # output channels
    g_dim: str | None           # groups (one GEMM per group)
    taps: int                   # R * S
    a_elem: int
    b_elem: int
    c_elem: int                 # output dtype
    acc_elem: int


def _psum(size, t, g):
    """Sum over the tiles of one block of tile size rounded up to ``g``; ``t`` clamped to size."""
    t = np.minimum(t, np.maximum(size, 1))
    q = size // t
    return q * tm.roundup(t, g) + tm.roundup(size - q * t, g)


class _Group:
    """The per-block quantities of one GEMM-view dim: m (pixel dims), k (c x taps) or n (k).

    Each depends only on the size classes of its conv dims and on the view tile. When every one
    of those comes from a short table (search batches), they are computed once on the product of
    the tables and gathered per candidate; otherwise per candidate.
    """

    def __init__(self, ev, j, conv_dims, scale, tile, tile_idx):
        self.n = ev.cand.n
        self.scale = scale
        raw = [ev.cls[j - 1][d] if j > 0 else [(np.int64(ev.size[d]), np.int64(1))] for d in conv_dims]
        idx = [ev.idx.get(d) if j > 0 else None for d in conv_dims]
        tile = np.asarray(tile, dtype=np.int64)
        lens = [len(np.atleast_1d(cl[0][0])) for cl in raw] + [len(np.atleast_1d(tile))]
        tables = j == 0 or all(i is not None for i in idx)
        self.joint = tables and (tile_idx is not None or tile.ndim == 0) and np.prod(lens) <= max(self.n, 1)
        if self.joint:
            k = len(raw)
            shape = lens
            self.cls = []
            for i, cl in enumerate(raw):
                bshape = [1] * (k + 1)
                bshape[i] = lens[i]
                self.cls.append([(np.reshape(sz, bshape), np.reshape(ct, bshape)) for sz, ct in cl])
            tshape = [1] * k + [lens[-1]]
            self.t = np.reshape(tile, tshape)
            parts = [np.zeros(self.n, dtype=np.int64) if i is None else i for i in idx]
            parts.append(np.zeros(self.n, dtype=np.int64) if tile_idx is None else tile_idx)
            self.index = np.ravel_multi_index(parts, shape) if self.n > 1 or any(
                np.ndim(x) for x in parts) else np.int64(0)
        else:
            self.cls = [[(gather(sz, i), gather(ct, i)) for sz, ct in cl] for cl, i in zip(raw, idx)]
            self.t = gather(tile, tile_idx)
        self._memo = {}

    def sum(self, key, f):
        """Per candidate: sum over the blocks of count x f(block size, tile)."""
        if key not in self._memo:
            total = 0
            for combo in itertools.product(*self.cls):
                cnt, size = np.int64(1), np.int64(self.scale)
                for sz, ct in combo:
                    cnt = cnt * ct
                    size = size * sz
                if not np.any(cnt):
                    continue
                total = total + cnt * f(size, self.t)
            if self.joint:
                total = np.take(np.broadcast_to(total, np.broadcast_shapes(
                    np.shape(total), np.shape(self.t))).ravel(), self.index)
            self._memo[key] = total
        return self._memo[key]

    def per_class(self, key, f):
        """Per candidate, one entry per block class: (count, f(per-dim sizes, tile)) -- f returns
        a tuple of arrays (each multiplied by nothing: the caller weighs by the count)."""
        if key not in self._memo:
            out = []
            for combo in itertools.product(*self.cls):
                cnt = np.int64(1)
                for _, ct in combo:
                    cnt = cnt * ct
                vals = f([sz for sz, _ in combo], self.t)
                if self.joint:
                    shp = np.broadcast_shapes(np.shape(self.t), *(np.shape(sz) for sz, _ in combo))
                    pick = lambda v: np.take(np.broadcast_to(v, shp).ravel(), self.index)
                    cnt, vals = pick(cnt), tuple(pick(v) for v in vals)
                out.append((cnt, vals))
            self._memo[key] = out
        return self._memo[key]

    def largest(self):
        """Largest block (the first class of every dim is its full tile)."""
        if "max" not in self._memo:
            size = np.int64(self.scale)
            for cl in self.cls:
                size = size * cl[0][0]
            if self.joint:
                size = np.take(np.broadcast_to(size * np.ones_like(self.t), np.broadcast_shapes(
                    np.shape(size), np.shape(self.t))).ravel(), self.index)
            self._memo["max"] = size
        return self._memo["max"]

    def tile(self):
        if "t" not in self._memo:
            t = self.t
            if self.joint:
                t = np.take(np.broadcast_to(t, self._shape()).ravel(), self.index)
            self._memo["t"] = t
        return self._memo["t"]

    def _shape(self):
        shp = np.shape(self.t)
        for cl in self.cls:
            shp = np.broadcast_shapes(shp, np.shape(cl[0][0]))
        return shp


def view_moves(view: GemmView, ev, j: int, tiles: dict, order, bufs: dict, lvl, granules,
               tile_index: dict | None = None):
    """Moves, capacity, padded MACs and steps of the GEMM-view level ``j`` (blocks from ``j-1``).

    ``ev``: the :class:`~edgeops.simulator.nest.NestEval` of the conv-space levels above
    (``j == 0``: the whole problem is one block). ``tiles[x]`` (x in m, n, k) are per-candidate
    arrays, or tables picked by ``tile_index[x]``. A tile larger than its block is clamped to it.
    """
    size = ev.size
    ti = tile_index or {}
    gm, gn, gk = (lvl.granule_of(x) for x in ("m", "n", "k"))
    cm, cn, ck = (granules.get(x, 1) for x in ("m", "n", "k"))
    grp = {"m": _Group(ev, j, view.m_dims, 1, tiles["m"], ti.get("m")),
           "k": _Group(ev, j, (view.k_dim,), view.taps, tiles["k"], ti.get("k")),
           "n": _Group(ev, j, (view.n_dim,), 1, tiles["n"], ti.get("n"))}
    G = np.int64(size[view.g_dim]) if view.g_dim else np.int64(1)
    S = lambda x, g: grp[x].sum(("S", g), lambda s, t: _psum(s, t, g))
    N = lambda x: grp[x].sum("N", lambda s, t: tm.cdiv(s, np.minimum(t, np.maximum(s, 1))))
    one = lambda x: grp[x].sum("one", lambda s, t: np.ones_like(s * t))
    nm, nk, nn = N("m"), N("k"), N("n")
    bm, bk, bn = one("m"), one("k"), one("n")
    mmax, kmax, nmax = grp["m"].largest(), grp["k"].largest(), grp["n"].largest()
    m0, k0, n0 = grp["m"].tile(), grp["k"].tile(), grp["n"].tile()
    # degenerate view loops (one tile covers every block) do not exist: an operand whose
    # relevant view loops (the group loop included) are all degenerate keeps its tile across
    # blocks as the nest above says
    nd = {"m": m0 < mmax, "n": n0 < nmax, "k": k0 < kmax}
    pos = {x: np.take(_POS[x], order) for x in "mnk"}
    conv_rel = {op.role: frozenset(op.dims) for op in ev.nest.operands}

    # the per-block loop over the block's groups is a view loop too, outermost, relevant to A,
    # B and C alike: it exists when the block holds more than one group (g tile > 1), and then
    # every operand's L0 tile is (re)loaded per group per block -- L0 holds one group's tile
    if view.g_dim is None:
        g_live = np.bool_(False)
    elif j == 0:
        g_live = np.bool_(size[view.g_dim] > 1)
    else:
        g_live = ev.g(view.g_dim, ("eff", j - 1), lambda: ev.eff[j - 1][view.g_dim]) > 1

    def factor(role, rel, x, per_tile, per_block, conv_dims):
        pstar = np.int64(-1)
        for y in rel:
            pstar = np.maximum(pstar, np.where(nd[y], pos[y], -1))
        here = np.where(pos[x] < pstar, per_tile, per_block)
        above = np.int64(1)
        if j > 0:
            for d in conv_dims:
                above = above * ev.reload_factor(conv_rel[role], j - 1, d)
        return np.where(pstar >= 0, here, np.where(g_live, per_block, above))

    fn = factor("A", "mk", "n", nn, bn, (view.n_dim,))       # A per n0 tile, per block or less
    fm = factor("B", "kn", "m", nm, bm, view.m_dims)
    fk = factor("C", "mn", "k", nk, bk, (view.k_dim,))       # accumulator visits along k
    a_src, b_src, c_src = (ev.parent(j, r)[0] for r in ("A", "B", "C"))
    a_real, b_real, c_real = (x == ev.offchip for x in (a_src, b_src, c_src))
    moves = [
        Move("A", a_src, lvl.memory_of("A"), j,
             S("m", 1 if a_real else gm) * S("k", 1 if a_real else gk) * fn * G * view.a_elem,
             nm * nk * fn * G, np.asarray(bufs.get("A", 1))),
        Move("B", b_src, lvl.memory_of("B"), j,
             S("k", 1 if b_real else gk) * S("n", 1 if b_real else gn) * fm * G * view.b_elem,
             nk * nn * fm * G, np.asarray(bufs.get("B", 1))),
    ]
    cm_sum = S("m", 1 if c_real else gm)
    cn_sum = S("n", 1 if c_real else gn)
    distinct = cm_sum * cn_sum * G
    visits = distinct * fk
    final = view.c_elem if c_real else view.acc_elem
    tiles_c = nm * nn * G
    run = np.minimum(m0, mmax) * view.c_elem if c_real else 0
    cbufs = np.asarray(bufs.get("C", 1))
    st_runs = rl_runs = ()
    if c_real and len(view.m_dims) == 3:
        segs = _c_segments(grp["m"], size, view, n0, nmax)
        kg = np.int64(size[view.n_dim]) * G
        st_runs = tuple((kg * cnt * sg, px * view.c_elem) for cnt, sg, px in segs) + tuple(
            ((fk - 1) * kg * cnt * sg, px * view.acc_elem) for cnt, sg, px in segs)
        rl_runs = st_runs[len(segs):]
    moves.append(Move("C", lvl.memory_of("C"), c_src, j, (visits - distinct) * view.acc_elem
                      + distinct * final, tiles_c * fk, cbufs, run, "store", st_runs))
    moves.append(Move("C", c_src, lvl.memory_of("C"), j, (visits - distinct) * view.acc_elem,
                      tiles_c * (fk - 1), cbufs, run, "reload", rl_runs))
    macs = S("m", cm) * S("k", ck) * S("n", cn) * G
    steps = nm * nk * nn * G
    # one full tile per buffer (clamped to the largest block)
    te = lambda t, mx, g: tm.roundup(np.minimum(t, mx), g)
    cap = {
        lvl.memory_of("A"): [("A", te(m0, mmax, gm) * te(k0, kmax, gk) * view.a_elem,
                              np.asarray(bufs.get("A", 1)))],
        lvl.memory_of("B"): [("B", te(k0, kmax, gk) * te(n0, nmax, gn) * view.b_elem,
                              np.asarray(bufs.get("B", 1)))],
    }
    cap.setdefault(lvl.memory_of("C"), []).append(("C", te(m0, mmax, gm) * te(n0, nmax, gn)
                                                   * view.acc_elem, cbufs))
    return moves, cap, macs, steps


def _c_segments(gm, size, view, n0, nmax):
    """Contiguous runs of the conv output tiles in NCHW (and the partial-sum workspace, same
    layout), per block class of the m dims: [(blocks, runs per output channel, pixels per run)].

    A block (nb, ohb, owb) is flattened row-major and cut into m0-pixel tiles. In memory a run is
    an ``ow`` row of the block (``owb < OW``), else ``ohb`` whole rows (``ohb < OH``), else a whole
    plane; a tile breaks at every such unit boundary inside it. Over a block with ``U`` units of
    ``w`` pixels and ``ceil(M_b / m0)`` tiles, the runs per channel are the tiles plus the unit
    boundaries that are not tile boundaries: ``tiles + (U - 1) - floor((U - 1) w / lcm(w, m0))``.
    A tile that is one whole plane (nb = 1) is one run across its ``n0`` consecutive channels.
    """
    nd, hd, wd = view.m_dims
    OH, OW = np.int64(size[hd]), np.int64(size[wd])

    def f(szs, t):
        nb, ohb, owb = szs
        mb = nb * ohb * owb
        m0 = np.minimum(t, np.maximum(mb, 1))
        w = np.where(owb < OW, owb, np.where(ohb < OH, ohb * OW, OH * OW))
        w = np.maximum(w, 1)
        units = mb // w
        lcm = np.lcm(w, np.maximum(m0, 1))
        seg = tm.cdiv(mb, np.maximum(m0, 1)) + (units - 1) - ((units - 1) * w) // lcm
        seg = np.maximum(seg, 1)
        px = mb / seg
        merge = (w == OH * OW) & (nb == 1) & (m0 >= mb)
        return seg, px, merge

    out = []
    ch = np.maximum(np.minimum(n0, nmax), 1)
    for cnt, (seg, px, merge) in gm.per_class("cseg", f):
        # a whole-plane tile: one run of n0 planes instead of n0 runs of one plane
        out.append((cnt, np.where(merge, 1.0 / ch, seg), np.where(merge, px * ch, px)))
    return out


def max_block(classes_list):
    """Largest block over the product of size classes (the first class is the full tile)."""
    size = np.int64(1)
    for cl in classes_list:
        size = size * cl[0][0]
    return size
