"""Conv2D as an implicit GEMM on the Cube: input windows in L1, img2col (load3d) into L0A.

Level ``l1`` tiles the convolution (g, n, k, c, oh, ow; per group k = K/G output and c = C/G
input channels). MTE2 brings each L1 block's input window -- only the rows and columns inside
the image, the padding is never read -- and its weights. Level ``l0`` is the GEMM the Cube sees
in every block: m = the block's pixels (n, oh, ow flattened), k = its (c, r, s), n = its output
channels, one group at a time. Load3D builds each m x k tile of the img2col matrix from the
window (zeros where it falls into the padding), Load2D moves weights (transposed) into L0B.

A view loop whose tile covers every block does not exist: an operand with no existing view
loop over its dims keeps its L0 tile as its L1 tile is kept (loaded at the same point), and an
accumulator with none stays in L0C while the loops over c run inside it.

GM: X (N, C, H, W), W (K, C/G, R, S), Y (N, K, OH, OW), Yws (fp32/int32 partial sums), bias (K,).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from edgeops.targets.ascend.cube import CubeKernel, Epilogue, acc_bytes
from edgeops.targets.ascend.isa import Barrier, GmRef
from edgeops.targets.ascend.machine import ELEM
from edgeops.targets.ascend.program import Nest, Program, Programs, cdiv, roundup


@dataclass(frozen=True)
class ConvGeom:
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: tuple = (1, 1)      # per axis (rows, columns)
    pad: tuple = (0, 0)         # top, left
    pad_end: tuple = (0, 0)     # bottom, right
    dilation: tuple = (1, 1)
    groups: int = 1
    dtype: str = "fp16"

    @property
    def ext(self) -> tuple[int, int]:
        return (self.R - 1) * self.dilation[0] + 1, (self.S - 1) * self.dilation[1] + 1

    @property
    def out(self) -> tuple[int, int]:
        er, es = self.ext
        return ((self.H + self.pad[0] + self.pad_end[0] - er) // self.stride[0] + 1,
                (self.W + self.pad[1] + self.pad_end[1] - es) // self.stride[1] + 1)


REL = {"A": {"n", "g", "c", "oh", "ow"}, "B": {"g", "k", "c"}, "C": {"n", "g", "k", "oh", "ow"}}
VREL = {"A": {"gi", "m", "k"}, "B": {"gi", "k", "n"}, "C": {"gi", "m", "n"}}


def conv_nest(g: ConvGeom, tiling) -> Nest:
    oh, ow = g.out
    sizes = {"g": g.groups, "n": g.N, "k": g.K // g.groups, "c": g.C // g.groups, "oh": oh, "ow": ow}
    lv = tiling.levels[0]
    return Nest(sizes, [dict(lv.tile)], [lv.order], dict(tiling.split))


def conv_programs(m, g: ConvGeom, tiling, epi: Epilogue, out: str = "Y"):
    nest = conv_nest(g, tiling)
    t = nest.eff[0]
    view = dict(tiling.levels[1].tile)
    vmax = {"m": t["n"] * t["oh"] * t["ow"], "k": t["c"] * g.R * g.S, "n": t["k"]}
    vt = {x: min(view[x], vmax[x]) for x in "mnk"}
    fr, fc = m.fractal(g.dtype)
    e = ELEM[g.dtype]
    wr = lambda n, st, ex: (n - 1) * st + ex
    sizes = {"A1": t["n"] * t["g"] * roundup(t["c"], fc) * wr(t["oh"], g.stride[0], g.ext[0])
             * wr(t["ow"], g.stride[1], g.ext[1]) * e,
             "B1": t["g"] * roundup(t["k"], fr) * roundup(t["c"], fc) * g.R * g.S * e,
             "A0": roundup(vt["m"], fr) * roundup(vt["k"], fc) * e,
             "B0": roundup(vt["k"], fc) * roundup(vt["n"], fr) * e,
             "C": roundup(vt["m"], 16) * roundup(vt["n"], 16) * acc_bytes(g.dtype),
             "U": vt["m"] * vt["n"] * ELEM[epi.out]}
    lv0, lv1 = tiling.levels
    bufs = {f"{r}1": n for r, n in lv0.buffers} | {(r if r == "C" else f"{r}0"): n for r, n in lv1.buffers}
    ranges = nest.core_ranges()

    def gen():
        for rng in ranges:
            prog = Program(m, m.matrix_core)
            _ConvCore(prog, g, nest, view, lv1.order, vmax,
                      CubeKernel(prog, g.dtype, sizes, bufs, epi), out).run(rng)
            yield m.matrix_core, prog.code
    return Programs(len(ranges), gen())


class _ConvCore:
    def __init__(self, prog, g: ConvGeom, nest: Nest, view: dict, order, vmax, ck: CubeKernel,
                 out: str):
        self.p, self.g, self.nest, self.ck, self.out = prog, g, nest, ck, out
        self.view, self.vmax = view, vmax
        self.vloops = ["gi"] + list(order)
        live = {"gi": nest.eff[0]["g"] > 1, **{x: view[x] < vmax[x] for x in "mnk"}}
        self.vtrig = {}
        for r in "ABC":
            idx = [i for i, d in enumerate(self.vloops) if live[d] and d in VREL[r]]
            self.vtrig[r] = idx[-1] if idx else None     # None: kept like its L1 tile
        self.live = live
        self.trig0 = {r: nest.trigger(REL[r], 0) for r in "ABC"}
        self.Kg, self.Cg = g.K // g.groups, g.C // g.groups

    def run(self, rng):
        self.nest.walk(rng, self.enter, self.leave, self.body)
        self.ck.finish()
        self.p.emit(Barrier())

    # ---- level 0 -----------------------------------------------------------------------------
    def enter(self, k, it):
        self.it, self.blk = it, it.blk[0]
        if self.trig0["A"] == k:
            self._load_a1()
        if self.trig0["B"] == k:
            self._load_b1()
        full = self._full_block()
        for r in "AB":
            if self.trig0[r] == k and self.vtrig[r] is None:
                self._load_l0(r, full)
        if self.trig0["C"] == k and self.vtrig["C"] is None:
            self._c_begin(full, it.edge(self.nest.loops, k, REL["C"], "first"))

    def leave(self, k, it):
        if self.trig0["C"] == k and self.vtrig["C"] is None:
            self._c_end(it.edge(self.nest.loops, k, REL["C"], "last"))
        for r in "AB":
            if self.trig0[r] == k and self.vtrig[r] is None:
                self.ck.free(r + "0")
        for r in "AB":
            if self.trig0[r] == k:
                self.ck.free(r + "1")

    def _full_block(self):
        b = self.blk
        return {"gi": (0, 1), "m": (0, b["n"][1] * b["oh"][1] * b["ow"][1]),
                "k": (0, b["c"][1] * self.g.R * self.g.S), "n": (0, b["k"][1])}

    def _load_a1(self):
        g, b = self.g, self.blk
        (ns, ne), (gs, ge), (cs, ce) = b["n"], b["g"], b["c"]
        rows, cols = self._window(b["oh"], g.H, 0), self._window(b["ow"], g.W, 1)
        ch = np.array([(gs + i) * self.Cg + cs + j for i in range(ge) for j in range(ce)])
        idx = (slice(ns, ns + ne), slice(int(ch[0]), int(ch[-1]) + 1), slice(*rows[:2]),
               slice(*cols[:2]))
        if ch[-1] - ch[0] + 1 != ch.size:       # several groups, part of each: a gather
            idx = np.ix_(np.arange(ns, ns + ne), ch, np.arange(*rows[:2]), np.arange(*cols[:2]))
        shape = (ne, ch.size, rows[1] - rows[0], cols[1] - cols[0])
        self.ck.load_l1("A", GmRef("X", idx), shape, (rows[2], cols[2]))

    def _window(self, o, size, axis):
        """(first real row, end, top of the window) of output rows ``o`` = (start, extent)."""
        st, ex = self.g.stride[axis], self.g.ext[axis]
        top = o[0] * st - self.g.pad[axis]
        lo, hi = max(top, 0), min(top + (o[1] - 1) * st + ex, size)
        return lo, max(hi, lo), top

    def _load_b1(self):
        g, b = self.g, self.blk
        (gs, ge), (ks, ke), (cs, ce) = b["g"], b["k"], b["c"]
        och = np.array([(gs + i) * self.Kg + ks + j for i in range(ge) for j in range(ke)])
        idx = (slice(int(och[0]), int(och[-1]) + 1), slice(cs, cs + ce))
        if och[-1] - och[0] + 1 != och.size:
            idx = np.ix_(och, np.arange(cs, cs + ce), np.arange(g.R), np.arange(g.S))
        self.ck.load_l1("B", GmRef("W", idx), (och.size, ce, g.R, g.S), (0, 0))

    # ---- the GEMM view ---------------------------------------------------------------------------
    def body(self, blk):
        self._vrec(0, self._full_block() | {"gi": (0, 1)}, [])

    def _vrec(self, v, cur, firsts):
        if v == len(self.vloops):
            a, b, c = self.ck.cur["A0"][1][0], self.ck.cur["B0"][1][0], self.ck.cur["C"][1][0]
            self.ck.mmads([(a, b, c)])
            return
        d = self.vloops[v]
        if d == "gi":
            ext, t = self.blk["g"][1], 1
        else:
            ext, t = self._full_block()[d][1], self.view[d]
        n = cdiv(ext, t)
        for i in range(n):
            cur = dict(cur)
            cur[d] = (i * t, min(t, ext - i * t))
            fl = firsts + [(d, i == 0, i == n - 1)]
            for r in "AB":
                if self.vtrig[r] == v:
                    self._load_l0(r, cur)
            if self.vtrig["C"] == v:
                self._c_begin(cur, self._cedge(fl, "first"))
            self._vrec(v + 1, cur, fl)
            if self.vtrig["C"] == v:
                self._c_end(self._cedge(fl, "last"))
            for r in "AB":
                if self.vtrig[r] == v:
                    self.ck.free(r + "0")

    def _cedge(self, fl, which):
        """First / last visit of a C tile: every enclosing loop over c (level 0) or over the
        view's k is in its first / last iteration."""
        pos = 1 if which == "first" else 2
        outer = self.it.edge(self.nest.loops, len(self.nest.loops), REL["C"], which)
        return outer and all(f[pos] for f in fl[:-1] if f[0] not in VREL["C"] and self.live[f[0]])

    def _load_l0(self, role, cur):
        (gi, _), (ms, me), (ks, ke), (ns, ne) = cur["gi"], cur["m"], cur["k"], cur["n"]
        if role == "B":
            src, _ = self.ck.l1("B")
            two_d = src.at(0, (src.shape[0], src.shape[1] * src.shape[2] * src.shape[3]))
            self.ck.load2d("B", [(two_d, gi * self.blk["k"][1] + ns, ks, ne, ke, True)])
            return
        src, (rtop, ctop) = self.ck.l1("A")
        b, g = self.blk, self.g
        flat, valid = _img2col(b["n"][1], src.shape[1], src.shape[2], src.shape[3],
                               b["oh"][1], b["ow"][1], b["c"][1], gi, ms, me, ks, ke,
                               self._window(b["oh"], g.H, 0)[0] - rtop,
                               self._window(b["ow"], g.W, 1)[0] - ctop, rtop, ctop,
                               g.H, g.W, g.R, g.S, *g.stride, *g.dilation)
        self.ck.load3d(src, flat, valid)

    def _c_index(self, cur):
        b = self.blk
        (gi, _), (ms, me), (ns, ne) = cur["gi"], cur["m"], cur["n"]
        p = np.arange(ms, ms + me)
        oe, we = b["oh"][1], b["ow"][1]
        n_i, oh_i, ow_i = b["n"][0] + p // (oe * we), b["oh"][0] + (p // we) % oe, b["ow"][0] + p % we
        ch = (b["g"][0] + gi) * self.Kg + b["k"][0] + np.arange(ns, ns + ne)
        return (n_i[:, None], ch[None, :], oh_i[:, None], ow_i[:, None]), ch

    def _c_begin(self, cur, first):
        idx, ch = self._c_index(cur)
        self.c_cur = (idx, ch)
        self.ck.c_begin(cur["m"][1], cur["n"][1], 1, first, [GmRef("Yws", idx)])

    def _c_end(self, final):
        idx, ch = self.c_cur
        bias = self.ck.epi.bias
        self.ck.c_end(final, [(GmRef(self.out, idx), GmRef("Yws", idx),
                               GmRef(bias, (ch,)) if bias else None)])


@lru_cache(maxsize=8192)
def _img2col(ne, CH, rr, rc, oe, we, ce, gi, ms, me, ks, ke, roff, coff, rtop, ctop,
             H, W, R, S, sh, sw, dh, dw):
    """Flat index into the L1 window (ne, CH, rr, rc) and validity of each element of the
    img2col tile: rows = pixels [ms, ms+me) of the block, columns = (c, r, s) [ks, ks+ke).
    ``rtop``/``ctop``: the window's first row/column in the image (may be negative: padding)."""
    p = np.arange(ms, ms + me)[:, None]
    q = np.arange(ks, ks + ke)[None, :]
    n_i, oh_i, ow_i = p // (oe * we), (p // we) % oe, p % we
    c_i, r, s = q // (R * S), (q // S) % R, q % S
    row = rtop + oh_i * sh + r * dh           # image row
    col = ctop + ow_i * sw + s * dw
    valid = (row >= 0) & (row < H) & (col >= 0) & (col < W)
    rl, cl = row - rtop - roff, col - ctop - coff
    flat = ((n_i * CH + gi * ce + c_i) * rr + rl) * rc + cl
    flat = np.where(valid, flat, 0)
    flat.setflags(write=False)
    valid.setflags(write=False)
    return flat, valid
