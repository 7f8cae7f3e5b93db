"""Vector programs: CopyIn (MTE2 GM -> UB), Compute (Vector on UB), CopyOut (MTE3 UB -> GM).

One tiling level, ``ub``, over the op's stream dims: rows x d for the normalisations and
softmax, elements for element-wise chains, (n*c, oh, ow) for pooling. Queues ``in`` and ``out``
have the tiling's BUFFER_NUM; parameters (GroupNorm's per-channel gamma/beta, LayerNorm's
per-column ones) sit in a queue of their own, loaded at their trigger like any operand.

A row split along d (the tile does not hold whole rows) costs a second read pass: pass 1 reads
every tile to accumulate per-row statistics (sum and sum of squares; softmax's running max and
sum of exponentials), pass 2 reads them again to normalise and write. Row statistics are kept
in the Vector unit's registers (a few values per row), not in UB.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from edgeops.targets.ascend.cube import NP
from edgeops.targets.ascend.isa import Barrier, Copy, GmRef, Ref, Reg, Vec
from edgeops.targets.ascend.machine import ELEM
from edgeops.targets.ascend.program import Nest, Program, Programs, Que


class StreamOp:
    """What a stream kernel computes; subclasses fill in the geometry and the compute."""
    dims: dict                 # stream dim -> size
    inputs: tuple = ("X",)     # GM tensors streamed through ``in``
    params: str | None = None  # GM tensor of parameters (own queue)
    param_rel: set = set()
    two_pass_dim: str | None = None
    dtype = "fp16"

    def in_index(self, blk, name): ...
    def out_index(self, blk): ...
    def param_index(self, blk): ...
    def param_shape(self, blk): ...
    def tile_shape(self, blk, role): ...
    def compute(self, k, tile, ins, par, out, blk, pass_no): ...


def stream_programs(m, op: StreamOp, tile: dict, order, bufs: dict, split: dict):
    """(core type, instructions) per Vector core with work."""
    nest = Nest(op.dims, [tile], [tuple(order)], split)
    t = nest.eff[0]
    e = ELEM[op.dtype]
    two = op.two_pass_dim is not None and nest.nondeg(0, op.two_pass_dim)
    ranges = nest.core_ranges()

    def gen():
        for rng in ranges:
            prog = Program(m, m.vector_core)
            _StreamCore(prog, op, nest, t, e, bufs, two).run(rng)
            yield m.vector_core, prog.code
    return Programs(len(ranges), gen())


class _StreamCore:
    def __init__(self, prog, op, nest, t, e, bufs, two):
        self.p, self.op, self.nest, self.two = prog, op, nest, two
        nb_in, nb_out = bufs.get("in", 1), bufs.get("out", 1)
        self.qin = [Que(prog, "ub", f"in{i}", nb_in, op.tile_bytes("in", t, e), "MTE2", "V")
                    for i in range(len(op.inputs))]
        self.qpar = Que(prog, "ub", "params", nb_in, op.tile_bytes("par", t, e), "MTE2", "V") \
            if op.params else None
        self.qout = Que(prog, "ub", "out", nb_out, op.tile_bytes("out", t, e), "V", "MTE3")
        rel = set(op.dims)
        self.t_in = nest.trigger(rel, 0)
        self.t_par = nest.trigger(op.param_rel, 0)
        self.regs: dict = {}

    def run(self, rng):
        passes = (1, 2) if self.two else (0,)
        for self.pass_no in passes:
            self.nest.walk(rng, self.enter, self.leave, self.body)
        for q in self.qin + [self.qpar, self.qout]:
            if q is not None:
                q.drain()
        self.p.emit(Barrier())

    def enter(self, k, it):
        op, blk = self.op, it.blk[0]
        if self.t_par == k and self.qpar is not None and self.pass_no != 1:
            i = self.qpar.alloc()
            ref = Ref("ub", self.qpar.addr(i), op.param_shape(blk), NP[op.dtype])
            self.p.emit(Copy("MTE2", GmRef(op.params, op.param_index(blk)), ref, path="gm->ub"))
            self.qpar.enque(i)
            self.par = (i, ref)
        if self.t_in == k:
            self.cur = []
            for name, q in zip(op.inputs, self.qin):
                i = q.alloc()
                ref = Ref("ub", q.addr(i), op.tile_shape(blk, "in"), NP[op.dtype])
                self.p.emit(Copy("MTE2", GmRef(name, op.in_index(blk, name)), ref, path="gm->ub"))
                q.enque(i)
                self.cur.append((i, ref))
            if self.pass_no != 1:
                j = self.qout.alloc()
                self.out = (j, Ref("ub", self.qout.addr(j), op.tile_shape(blk, "out"), NP[op.out_dtype]))

    def body(self, blk):
        blk = blk[0]
        for (i, _), q in zip(self.cur, self.qin):
            q.deque(i)
        par = None
        if self.qpar is not None and self.pass_no != 1:
            self.qpar.deque(self.par[0])
            par = self.par[1]
        out = self.out[1] if self.pass_no != 1 else None
        self.op.compute(self.p, [r for _, r in self.cur], par, out, blk, self.pass_no, self.regs)

    def leave(self, k, it):
        op, blk = self.op, it.blk[0]
        if self.t_in == k:
            if self.pass_no != 1:
                j, ref = self.out
                self.qout.enque(j)
                self.qout.deque(j)
                self.p.emit(Copy("MTE3", ref, GmRef(op.output, op.out_index(blk)), path="ub->gm",
                                 kind="store"))
                self.qout.free(j)
            for (i, _), q in zip(self.cur, self.qin):
                q.free(i)
        if self.t_par == k and self.qpar is not None and self.pass_no != 1:
            self.qpar.free(self.par[0])


# ---- the ops ------------------------------------------------------------------------------------

class RowNorm(StreamOp):
    """GroupNorm / LayerNorm / Softmax over rows of length D (GM views: X, Y as (rows, D))."""
    output = "Y"

    def __init__(self, kind: str, rows: int, D: int, dtype: str, *, eps=1e-5, act="none",
                 groups=1, channels=1, hw=1):
        self.kind, self.dtype, self.out_dtype = kind, dtype, dtype
        self.dims = {"r": rows, "d": D}
        self.eps, self.act, self.G, self.C, self.HW = eps, act, groups, channels, hw
        self.two_pass_dim = "d"
        self.params = None if kind == "softmax" else "P"
        self.param_rel = {"d"} if kind == "layernorm" else set()

    def tile_bytes(self, role, t, e):
        if role == "par":
            return (2 * self.C if self.kind == "groupnorm" else 2 * t["d"]) * e
        return t["r"] * t["d"] * e

    def tile_shape(self, blk, role):
        return (blk["r"][1], blk["d"][1])

    def in_index(self, blk, name):
        (r0, re), (d0, de) = blk["r"], blk["d"]
        return (slice(r0, r0 + re), slice(d0, d0 + de))

    def out_index(self, blk):
        return self.in_index(blk, "Y")

    def param_shape(self, blk):
        return (2 * self.C,) if self.kind == "groupnorm" else (2, blk["d"][1])

    def param_index(self, blk):
        if self.kind == "groupnorm":
            return (slice(None),)
        d0, de = blk["d"]
        return (slice(None), slice(d0, d0 + de))

    def compute(self, p, ins, par, out, blk, pass_no, regs):
        x = ins[0]
        (r0, re), (d0, de) = blk["r"], blk["d"]
        names = [f"{s}{r0}" for s in ("a", "b", "mean", "rstd")]
        a, b, mean, rstd = (Reg(n, re) for n in names)
        if self.kind == "softmax":
            if pass_no == 1:    # running max / sum of exponentials
                first = names[0] not in regs
                regs[names[0]] = True
                p.emit(Vec("softmax_update", (a, b), [x] if first else [x, a, b], 0, first=first))
            elif pass_no == 2:
                p.emit(Vec("softmax_out", out, [x, a, b], 0))
            else:
                p.emit(Vec("rowstat", a, [x], 0, stat="max"))
                p.emit(Vec("sub", out, [x, a], 0))
                p.emit(Vec("exp", out, [out], 0))
                p.emit(Vec("rowstat", b, [out], 0, stat="sum"))
                p.emit(Vec("div", out, [out, b], 0))
            return
        if pass_no in (0, 1):
            acc = names[0] in regs
            regs[names[0]] = True
            p.emit(Vec("rowstat", a, [x] + ([a] if acc else []), 0, stat="sum", acc=acc))
            p.emit(Vec("rowstat", b, [x] + ([b] if acc else []), 0, stat="sumsq", acc=acc))
        if pass_no == 1:
            return
        if names[2] not in regs:
            regs[names[2]] = True
            p.emit(Vec("moments", (mean, rstd), [a, b], 0, n=self.dims["d"], eps=self.eps))
        p.emit(Vec("normalize", out, [x, mean, rstd], 0))
        gi, bi = _param_index(self.kind, r0, re, d0, de, self.G, self.C, self.HW)
        p.emit(Vec("gather_affine", out, [out, par], 0, gi=gi, bi=bi, act=self.act))


@lru_cache(maxsize=1024)
def _param_index(kind, r0, re, d0, de, G, C, HW):
    """Per element of a (re, de) tile: its scale and shift positions in the parameter tile."""
    if kind == "layernorm":
        j = np.arange(de)[None, :]
        return j, de + j
    ch = (np.arange(r0, r0 + re)[:, None] % G) * (C // G) + np.arange(d0, d0 + de)[None, :] // HW
    return ch, C + ch


class Eltwise(StreamOp):
    """An element-wise chain over ``numel`` elements: ``steps`` = [(vop, args)], where a binary
    vop consumes the next input (inputs X0, X1, ...; output Y, all flat)."""
    output = "Y"
    two_pass_dim = None
    params = None

    def __init__(self, numel: int, n_inputs: int, steps, dtype: str):
        self.dims, self.steps, self.dtype, self.out_dtype = {"e": numel}, steps, dtype, dtype
        self.inputs = tuple(f"X{i}" for i in range(n_inputs))

    def tile_bytes(self, role, t, e):
        return t["e"] * e

    def tile_shape(self, blk, role):
        return (blk["e"][1],)

    def in_index(self, blk, name):
        e0, ee = blk["e"]
        return (slice(e0, e0 + ee),)

    def out_index(self, blk):
        e0, ee = blk["e"]
        return (slice(e0, e0 + ee),)

    def compute(self, p, ins, par, out, blk, pass_no, regs):
        cur, nxt = ins[0], 1
        for vop, args in self.steps:
            if vop in ("add", "sub", "mul", "div", "max", "min", "swiglu"):
                p.emit(Vec(vop, out, [cur, ins[nxt]], 0, **args))
                nxt += 1
            else:
                p.emit(Vec(vop, out, [cur], 0, **args))
            cur = out
        if cur is not out:
            p.emit(Vec("copy", out, [cur], 0))


class Pool(StreamOp):
    """Max / average pooling over (n*c, oh, ow): X viewed (N*C, H, W), Y (N*C, OH, OW). The
    input tile is the real part of each block's window; the Vector unit supplies the padding."""
    output = "Y"
    two_pass_dim = None
    params = None

    def __init__(self, NC, H, W, OH, OW, R, S, stride, pads, dilation, mode, dtype,
                 include_pad=False, pads_end=None):
        self.dims, self.dtype, self.out_dtype = {"nc": NC, "oh": OH, "ow": OW}, dtype, dtype
        self.H, self.W, self.R, self.S, self.st, self.pads = H, W, R, S, stride, pads
        self.pads_end = tuple(pads if pads_end is None else pads_end)
        self.dil, self.mode, self.include_pad = dilation, mode, include_pad

    def _ext(self, axis):
        return ((self.R, self.S)[axis] - 1) * self.dil[axis] + 1

    def tile_bytes(self, role, t, e):
        if role == "out":
            return t["nc"] * t["oh"] * t["ow"] * e
        wr = lambda n, a: (n - 1) * self.st[a] + self._ext(a)
        return t["nc"] * wr(t["oh"], 0) * wr(t["ow"], 1) * e

    def _win(self, o, axis):
        size = (self.H, self.W)[axis]
        top = o[0] * self.st[axis] - self.pads[axis]
        full = (o[1] - 1) * self.st[axis] + self._ext(axis)
        lo, hi = max(top, 0), min(top + full, size)
        return lo, max(lo, hi), lo - top, full

    def _counted(self, o, axis):
        """[lo, hi) of the window (its own coordinates) inside the explicitly padded extent: what
        count_include_pad=1 divides by (never the part of a ceil_mode window past the padding)."""
        size = (self.H, self.W)[axis]
        top = o[0] * self.st[axis] - self.pads[axis]
        full = (o[1] - 1) * self.st[axis] + self._ext(axis)
        lo = min(max(-self.pads[axis] - top, 0), full)
        return lo, max(lo, min(size + self.pads_end[axis] - top, full))

    def tile_shape(self, blk, role):
        if role == "out":
            return (blk["nc"][1], blk["oh"][1], blk["ow"][1])
        r, c = self._win(blk["oh"], 0), self._win(blk["ow"], 1)
        return (blk["nc"][1], r[1] - r[0], c[1] - c[0])

    def in_index(self, blk, name):
        (n0, ne), r, c = blk["nc"], self._win(blk["oh"], 0), self._win(blk["ow"], 1)
        return (slice(n0, n0 + ne), slice(r[0], r[1]), slice(c[0], c[1]))

    def out_index(self, blk):
        (n0, ne), (o0, oe), (w0, we) = blk["nc"], blk["oh"], blk["ow"]
        return (slice(n0, n0 + ne), slice(o0, o0 + oe), slice(w0, w0 + we))

    def compute(self, p, ins, par, out, blk, pass_no, regs):
        r, c = self._win(blk["oh"], 0), self._win(blk["ow"], 1)
        p.emit(Vec("pool", out, [ins[0]], 0, mode=self.mode, R=self.R, S=self.S, stride=self.st,
                   dil=self.dil, oh=blk["oh"][1], ow=blk["ow"][1], pt=r[2], pl=c[2], wr=r[3],
                   wc=c[3], include_pad=self.include_pad,
                   counted=(self._counted(blk["oh"], 0), self._counted(blk["ow"], 1))))
