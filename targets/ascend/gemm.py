"""GEMM / batched MatMul lowered to Cube programs: GM -> L1 -> L0A/L0B -> Cube -> L0C -> GM.

The tiling's two levels are ``l1`` (A and B tiles in L1) and ``l0`` (A, B, C in L0A, L0B, L0C);
both are loop levels over (b,) m, n, k. Global memory holds A (batch, M, K), B (batch, K, N) --
or (K, N) when every batch shares it -- the output C (batch, M, N), ``Cws``, the accumulator-dtype
workspace partial sums spill to when the reduction loop runs outside the accumulator, and
optionally a bias (N,) FixPipe adds.
"""
from __future__ import annotations

from dataclasses import dataclass

from edgeops.targets.ascend.cube import CubeKernel, Epilogue, acc_bytes
from edgeops.targets.ascend.isa import Barrier, GmRef
from edgeops.targets.ascend.machine import ELEM
from edgeops.targets.ascend.program import Nest, Program, Programs, roundup


@dataclass(frozen=True)
class GemmGeom:
    M: int
    N: int
    K: int
    B: int = 1
    bshared: bool = False
    dtype: str = "fp16"


def gemm_nest(g: GemmGeom, tiling) -> Nest:
    sizes = ({"b": g.B} if g.B > 1 else {}) | {"m": g.M, "n": g.N, "k": g.K}
    lv = tiling.levels
    return Nest(sizes, [dict(lv[0].tile), dict(lv[1].tile)], [lv[0].order, lv[1].order],
                dict(tiling.split))


def buffer_sizes(m, g: GemmGeom, nest: Nest, epi: Epilogue) -> dict:
    """Bytes of one buffer per queue: tiles in whole fractals, as the Cube reads them."""
    fr, fc = m.fractal(g.dtype)
    e = ELEM[g.dtype]
    t0, t1 = nest.eff
    b0, b1 = t0.get("b", 1), t1.get("b", 1)
    sb = lambda b: 1 if g.bshared else b
    return {"A1": b0 * roundup(t0["m"], fr) * roundup(t0["k"], fc) * e,
            "B1": sb(b0) * roundup(t0["k"], fc) * roundup(t0["n"], fr) * e,
            "A0": b1 * roundup(t1["m"], fr) * roundup(t1["k"], fc) * e,
            "B0": sb(b1) * roundup(t1["k"], fc) * roundup(t1["n"], fr) * e,
            "C": b1 * roundup(t1["m"], 16) * roundup(t1["n"], 16) * acc_bytes(g.dtype),
            "U": t1["m"] * t1["n"] * ELEM[epi.out]}


def level_bufs(tiling) -> dict:
    lv0, lv1 = tiling.levels[0], tiling.levels[1]
    return {f"{r}1": n for r, n in lv0.buffers} | {(r if r == "C" else f"{r}0"): n for r, n in lv1.buffers}


def gemm_programs(m, g: GemmGeom, tiling, epi: Epilogue, ub_store=None, out: str = "C"):
    """(core type, instructions) for every core with work, built one core at a time.
    ``out`` names the GM tensor the results go to."""
    nest = gemm_nest(g, tiling)
    sizes, bufs = buffer_sizes(m, g, nest, epi), level_bufs(tiling)
    ranges = nest.core_ranges()

    def gen():
        for rng in ranges:
            prog = Program(m, m.matrix_core)
            _GemmCore(prog, g, nest, CubeKernel(prog, g.dtype, sizes, bufs, epi, ub_store), out).run(rng)
            yield m.matrix_core, prog.code
    return Programs(len(ranges), gen())


class _GemmCore:
    def __init__(self, prog, g: GemmGeom, nest: Nest, ck: CubeKernel, out: str):
        self.p, self.g, self.nest, self.ck, self.out = prog, g, nest, ck, out
        self.fr, self.fc = prog.m.fractal(g.dtype)
        b = {"b"} if g.B > 1 else set()
        self.rel = {"A": b | {"m", "k"}, "B": (set() if g.bshared else b) | {"k", "n"},
                    "C": b | {"m", "n"}}
        t = nest.trigger
        self.trig = {(r, j): t(self.rel[r], j) for r in "AB" for j in (0, 1)}
        self.trig[("C", 1)] = t(self.rel["C"], 1)

    def run(self, rng):
        self.nest.walk(rng, self.enter, self.leave, self.body)
        self.ck.finish()
        self.p.emit(Barrier())

    def _b(self, j, d):
        return self.blk[j].get(d, (0, 1))

    def enter(self, k, it):
        self.blk = it.blk
        for j in (0, 1):
            for role in "AB":
                if self.trig[(role, j)] == k:
                    (self._load_l1 if j == 0 else self._load_l0)(role)
        if self.trig[("C", 1)] == k:
            first = it.edge(self.nest.loops, k, self.rel["C"], "first")
            (b0, be), (m0, me), (n0, ne) = self._b(1, "b"), self._b(1, "m"), self._b(1, "n")
            self.c_idx = [(b0 + i, slice(m0, m0 + me), slice(n0, n0 + ne)) for i in range(be)]
            self.c_refs = self.ck.c_begin(me, ne, be, first, [GmRef("Cws", ix) for ix in self.c_idx])

    def leave(self, k, it):
        if self.trig[("C", 1)] == k:
            final = it.edge(self.nest.loops, k, self.rel["C"], "last")
            bias = self.ck.epi.bias
            self.ck.c_end(final, [(GmRef(self.out, ix), GmRef("Cws", ix),
                                   GmRef(bias, (ix[2],)) if bias else None) for ix in self.c_idx])
        for j in (1, 0):
            for role in "AB":
                if self.trig[(role, j)] == k:
                    self.ck.free(f"{role}{1 - j}")   # level 0 is L1, level 1 is L0

    def _load_l1(self, role):
        (b0, be) = self._b(0, "b")
        (r0, re), (c0, ce) = (self._b(0, "m"), self._b(0, "k")) if role == "A" else \
            (self._b(0, "k"), self._b(0, "n"))
        gr, gc = (self.fr, self.fc) if role == "A" else (self.fc, self.fr)
        shape = (roundup(re, gr), roundup(ce, gc))
        rows, cols = slice(r0, r0 + re), slice(c0, c0 + ce)
        if role == "B" and self.g.bshared:
            self.ck.load_l1(role, GmRef("B", (rows, cols)), shape, (0, r0, c0))
        else:
            self.ck.load_l1(role, GmRef(role, (slice(b0, b0 + be), rows, cols)), (be,) + shape,
                            (b0, r0, c0))

    def _load_l0(self, role):
        """One L0 tile per batch entry of the block (L1 keeps a fractal-padded tile per entry)."""
        src, (ob, orow, ocol) = self.ck.l1(role)
        (r0, re), (c0, ce) = (self._b(1, "m"), self._b(1, "k")) if role == "A" else \
            (self._b(1, "k"), self._b(1, "n"))
        b0, be = self._b(1, "b")
        if role == "B" and self.g.bshared:
            items = [(src, r0 - orow, c0 - ocol, re, ce, False)]
        else:
            plane = src.shape[1] * src.shape[2] * src.dtype.itemsize
            items = [(src.at((b0 + i - ob) * plane, src.shape[1:]), r0 - orow, c0 - ocol, re, ce,
                      False) for i in range(be)]
        self.ck.load2d(role, items)

    def body(self, blk):
        a, b = self.ck.cur["A0"][1], self.ck.cur["B0"][1]
        self.ck.mmads([(a[i], b[0 if len(b) == 1 else i], c) for i, c in enumerate(self.c_refs)])
