"""The Cube side of a program: operands through L1 into L0A/L0B, the accumulator in L0C, the
result out through FixPipe -- shared by the GEMM and the implicit-GEMM convolution builders.

Accumulator visits follow the traffic specification: the first visit of a C tile starts from
zero (``Mmad`` with ``init``), every later one first reloads the partial sums (GM -> L0C in the
accumulator dtype), every visit ends with a write: a spill of partial sums, or -- on the last
visit -- the result, converted by FixPipe (bias, Relu/Relu6/Clip, requantisation, output dtype).
An activation FixPipe cannot apply goes, on a combined core, L0C -> UB -> Vector -> UB -> GM;
a separated core (AIC, no UB) writes the pre-activation result and a Vector kernel follows.

A slot may hold several tiles (the batch entries of a MatMul block): every method takes lists.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgeops.targets.ascend.isa import (Copy, Fixpipe, GmRef, Load2D, Load3D, Mmad, Ref, SetFlag,
                                        Vec, WaitFlag)
from edgeops.targets.ascend.machine import ACC, ELEM
from edgeops.targets.ascend.program import Program, Que, roundup

NP = {"fp16": np.float16, "fp32": np.float32, "int8": np.int8, "int32": np.int32}
FIXPIPE_ACTS = ("none", "relu", "relu6", "clip")


@dataclass
class Epilogue:
    """What happens to a finished C tile: output dtype, bias tensor, activation, quant scale."""
    out: str = "fp16"
    act: str = "none"
    lo: float | None = None
    hi: float | None = None
    bias: str | None = None        # GM tensor name (one value per output channel)
    scale: float | None = None     # requantisation to int8
    on_vector: bool = False        # the activation runs on the Vector unit (combined core)


def acc_bytes(dtype: str) -> int:
    return ELEM[ACC[dtype]]


class CubeKernel:
    """Queues and instruction emission of one Cube program. ``sizes`` gives the bytes of one
    buffer per queue (A1, B1, A0, B0, C; U for a Vector epilogue), ``bufs`` their counts."""

    def __init__(self, prog: Program, dtype: str, sizes: dict, bufs: dict, epi: Epilogue,
                 ub_store=None):
        self.p, self.dtype, self.epi, self.ub_store = prog, dtype, epi, ub_store
        self.acc = ACC[dtype]
        self.fr, self.fc = prog.m.fractal(dtype)
        q = lambda mem, r, prod, cons: Que(prog, mem, r, bufs.get(r, 1), sizes[r], prod, cons)
        self.qA1, self.qB1 = q("l1", "A1", "MTE2", "MTE1"), q("l1", "B1", "MTE2", "MTE1")
        self.qA0, self.qB0 = q("l0a", "A0", "MTE1", "M"), q("l0b", "B0", "MTE1", "M")
        self.qC = q("l0c", "C", "M", "FIX")
        self.qU = q("ub", "U", "FIX", "V") if (epi.on_vector or ub_store) else None
        self.cur: dict = {}
        self.init_next = False

    def flag(self, src: str, dst: str):
        """``dst`` waits here until ``src`` finished everything issued so far."""
        ev = self.p.event()
        self.p.emit(SetFlag(src, dst, ev))
        self.p.emit(WaitFlag(dst, src, ev))

    def _q(self, key: str) -> Que:
        return {"A1": self.qA1, "B1": self.qB1, "A0": self.qA0, "B0": self.qB0}[key]

    # ---- L1 ----------------------------------------------------------------------------------
    def load_l1(self, role: str, src: GmRef, shape: tuple, origin: tuple):
        """MTE2 GM -> L1: the real block lands in the corner of a fractal-padded tile."""
        qu = self._q(role + "1")
        i = qu.alloc()
        ref = Ref("l1", qu.addr(i), shape, NP[self.dtype])
        self.p.emit(Copy("MTE2", src, ref, path="gm->l1"))
        qu.enque(i)
        self.cur[role + "1"] = (i, ref, origin)

    def l1(self, role: str):
        """The resident L1 tile of ``role`` and its origin (dequeued for MTE1 on first use)."""
        i, ref, origin = self.cur[role + "1"]
        self._q(role + "1").deque(i)
        return ref, origin

    def free(self, key: str):
        i = self.cur.pop(key)[0]
        self._q(key).free(i)

    # ---- L0A / L0B ----------------------------------------------------------------------------
    def _l0_slot(self, role: str, rows: int, cols: int, n: int):
        """A fresh slot of ``n`` stacked tiles: L0A rows x cols = m x k, L0B k x n."""
        qu = self._q(role + "0")
        i = qu.alloc()
        if role == "A":
            shape = (roundup(rows, self.fr), roundup(cols, self.fc))
        else:
            shape = (roundup(rows, self.fc), roundup(cols, self.fr))
        mem = "l0a" if role == "A" else "l0b"
        base = Ref(mem, qu.addr(i), shape, NP[self.dtype])
        return i, [base.at(t * base.nbytes, shape) for t in range(n)]

    def load2d(self, role: str, items: list):
        """``items``: (L1 ref, r0, c0, rows, cols, transpose) per stacked tile."""
        _, _, _, rows, cols, T = items[0]
        i, dsts = self._l0_slot(role, cols if T else rows, rows if T else cols, len(items))
        for (src, r0, c0, r, c, t), d in zip(items, dsts):
            self.p.emit(Load2D(src, r0, c0, r, c, d, role, t))
        self._q(role + "0").enque(i)
        self.cur[role + "0"] = (i, dsts)

    def load3d(self, src: Ref, flat: np.ndarray, valid: np.ndarray):
        """img2col of one L0A tile (pixels x (c, r, s)) from an L1 input window."""
        i, dsts = self._l0_slot("A", flat.shape[0], flat.shape[1], 1)
        self.p.emit(Load3D(src, flat, valid, dsts[0]))
        self.qA0.enque(i)
        self.cur["A0"] = (i, dsts)

    # ---- accumulator --------------------------------------------------------------------------
    def c_begin(self, rows: int, cols: int, n: int, first: bool, psums: list):
        """Start a visit of ``n`` stacked C tiles of rows x cols; later visits reload."""
        i = self.qC.alloc()
        shape = (roundup(rows, 16), roundup(cols, 16))
        base = Ref("l0c", self.qC.addr(i), shape, NP[self.acc])
        refs = [base.at(t * base.nbytes, shape) for t in range(n)]
        if not first:   # partial sums back from GM (on FixPipe's path, reversed)
            for ps, r in zip(psums, refs):
                self.p.emit(Copy("FIX", ps, r, path="gm->l0c", fill=True, kind="reload"))
            self.flag("FIX", "M")
        self.cur["C"] = (i, refs, rows, cols)
        self.init_next = first
        return refs

    def mmads(self, triples: list):
        """Cube on (A ref, B ref, C ref) triples; the first of a first visit starts from zero."""
        self.qA0.deque(self.cur["A0"][0])
        self.qB0.deque(self.cur["B0"][0])
        for a, b, c in triples:
            self.p.emit(Mmad(c, a, b, self.init_next))
        self.init_next = False

    def c_end(self, final: bool, outs: list):
        """Write the visit back. ``outs``: (out GmRef, psum GmRef, bias GmRef | None) per tile."""
        i, refs, rows, cols = self.cur.pop("C")
        self.qC.enque(i)
        self.qC.deque(i)
        e = self.epi
        for ref, (out, psum, bias) in zip(refs, outs):
            if not final:
                self.p.emit(Fixpipe(ref, rows, cols, psum, NP[self.acc], kind="spill",
                                    path="l0c->gm"))
            elif self.qU is not None:
                self._vector_epilogue(ref, rows, cols, out, bias)
            else:
                self.p.emit(Fixpipe(ref, rows, cols, out, NP[e.out], act=e.act, lo=e.lo, hi=e.hi,
                                    bias=bias, scale=e.scale, path="l0c->gm"))
        self.qC.free(i)

    def _vector_epilogue(self, ref, rows, cols, out, bias):
        """Combined core: FixPipe -> UB, the Vector unit applies the activation, MTE3 -> GM."""
        e, qu = self.epi, self.qU
        j = qu.alloc()
        u = Ref("ub", qu.addr(j), (rows, cols), NP[e.out])
        self.p.emit(Fixpipe(ref, rows, cols, u, NP[e.out], bias=bias, path="l0c->ub"))
        qu.enque(j)
        qu.deque(j)
        if self.ub_store is not None:     # SwiGLU: gate the two halves, store half
            res, out = self.ub_store(self.p, u, out)
        else:
            self.p.emit(Vec(e.act, u, [u], 0, **({"lo": e.lo, "hi": e.hi} if e.act == "clip" else {})))
            res = u
        self.flag("V", "MTE3")
        self.p.emit(Copy("MTE3", res, out, path="ub->gm", kind="store"))
        self.flag("MTE3", "V")   # MTE3 read last: the slot returns to FixPipe through V
        qu.free(j)

    def finish(self):
        for q in (self.qA1, self.qB1, self.qA0, self.qB0, self.qC, self.qU):
            if q is not None:
                q.drain()
