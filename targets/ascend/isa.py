"""The instructions of an Ascend-style AI Core program, in the spirit of Ascend C's intrinsics.

Every instruction runs on one pipe (``machine.PIPES``); the scalar pipe issues them in program
order and each pipe executes its own in order, so the only ordering between pipes is what
``SetFlag``/``WaitFlag`` pairs establish (the emulator rejects a program whose pipes touch the
same buffer without one). On-chip operands are :class:`Ref` (memory, byte address, shape, dtype:
a dense view), global-memory operands :class:`GmRef` (a tensor name and a numpy index).

Layouts. L1 and UB hold dense row-major tiles. L0A, L0B and L0C hold *fractals*: 512-byte blocks
of 16 x (512/16/elem) elements for A (16 x 16 fp16, 16 x 32 int8), their transpose shape for B,
and 16 x 16 accumulators for C, stored block-major as ``(rows/fr, cols/fc, fr, fc)``. The Cube
multiplies whole fractals: an operand is always a whole number of them, rows and columns past
the real tile are zero.
"""
from __future__ import annotations

import numpy as np


class Ref:
    """A dense on-chip view: ``shape`` elements of ``dtype`` at byte ``addr`` of ``mem``.
    ``slot`` is the queue buffer it belongs to (the unit of synchronisation)."""
    __slots__ = ("mem", "addr", "shape", "dtype", "slot", "nbytes")

    def __init__(self, mem: str, addr: int, shape: tuple, dtype, slot: int | None = None):
        self.mem, self.addr, self.shape = mem, int(addr), tuple(int(s) for s in shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.slot = self.addr if slot is None else int(slot)
        n = self.dtype.itemsize      # a Python product: this runs for every operand built
        for s in self.shape:
            n *= s
        self.nbytes = n

    def at(self, offset_bytes: int, shape: tuple, dtype=None) -> "Ref":
        """A sub-view starting ``offset_bytes`` into this one (same slot)."""
        return Ref(self.mem, self.addr + offset_bytes, shape, dtype or self.dtype, self.slot)

    def __repr__(self):
        return f"{self.mem}@{self.addr}{list(self.shape)}:{self.dtype.name}"


class GmRef:
    """``gm[name][index]`` (optionally transposed as it is read: a strided DMA)."""
    __slots__ = ("name", "index", "T")

    def __init__(self, name: str, index: tuple, T: bool = False):
        self.name, self.index, self.T = name, index, T

    def __repr__(self):
        return f"gm:{self.name}"


class Reg:
    """Per-row statistics kept by the Vector unit (a handful of values per row, not in UB)."""
    __slots__ = ("name", "rows")

    def __init__(self, name: str, rows: int):
        self.name, self.rows = name, rows


class Instr:
    __slots__ = ("pipe",)
    op = "instr"


class InitBuffer(Instr):
    """Reserve ``num`` buffers of ``size`` bytes from ``base`` in ``mem`` (TPipe::InitBuffer)."""
    __slots__ = ("mem", "name", "base", "size", "num")
    op = "init"

    def __init__(self, mem, name, base, size, num):
        self.pipe, self.mem, self.name, self.base, self.size, self.num = "S", mem, name, base, size, num


class Copy(Instr):
    """A DMA: MTE2 GM -> L1/UB, MTE3 UB -> GM, FixPipe GM -> L0C (partial sums back).

    The source block is written into the top-left corner of ``dst``; with ``fill`` the rest of
    ``dst`` becomes zero (ND -> fractal conversion pads, the padding never crosses the bus).
    ``at`` places the block at an element offset inside ``dst`` instead (window rows/columns
    that fall into the padding are not read). ``kind``: load | store | spill | reload.
    """
    __slots__ = ("src", "dst", "fill", "at", "kind", "path")
    op = "copy"

    def __init__(self, pipe, src, dst, *, path, fill=False, at=None, kind="load"):
        self.pipe, self.src, self.dst, self.path = pipe, src, dst, path
        self.fill, self.at, self.kind = fill, at, kind


class Load2D(Instr):
    """MTE1 L1 -> L0A/L0B: the block ``rows x cols`` at (r0, c0) of a dense L1 tile (transposed
    on the way with ``T``), into whole fractals (zeros past the block)."""
    __slots__ = ("src", "r0", "c0", "rows", "cols", "dst", "role", "T")
    op = "load2d"

    def __init__(self, src, r0, c0, rows, cols, dst, role, T=False):
        self.pipe, self.src, self.dst, self.role, self.T = "MTE1", src, dst, role, T
        self.r0, self.c0, self.rows, self.cols = r0, c0, rows, cols


class Load3D(Instr):
    """MTE1 img2col L1 -> L0A: row ``p`` (a pixel), column ``q`` (c, r, s) of the tile is the
    window element ``flat[p, q]`` of the L1 input window, or 0 where ``valid`` is False
    (padding, or past the real tile). Whole fractals are written."""
    __slots__ = ("src", "flat", "valid", "dst")
    op = "load3d"

    def __init__(self, src, flat, valid, dst):
        self.pipe, self.src, self.flat, self.valid, self.dst = "MTE1", src, flat, valid, dst


class Mmad(Instr):
    """Cube: C (+)= A @ B on whole fractals; ``init`` starts C from zero (a first visit)."""
    __slots__ = ("c", "a", "b", "init")
    op = "mmad"

    def __init__(self, c, a, b, init):
        self.pipe, self.c, self.a, self.b, self.init = "M", c, a, b, init


class Fixpipe(Instr):
    """L0C -> GM (or UB on a combined core) for the real ``rows x cols`` of a C tile, converting
    on the way: bias (from ``bias``, a GmRef read by the FixPipe), Relu / Relu6 / Clip,
    requantisation (``scale``: round half to even, saturate) and the output dtype.
    ``kind`` spill keeps the accumulator dtype and applies nothing."""
    __slots__ = ("src", "rows", "cols", "dst", "dtype", "act", "lo", "hi", "bias", "scale",
                 "kind", "path")
    op = "fixpipe"

    def __init__(self, src, rows, cols, dst, dtype, *, path, act="none", lo=None, hi=None,
                 bias=None, scale=None, kind="store"):
        self.pipe, self.src, self.rows, self.cols, self.dst = "FIX", src, rows, cols, dst
        self.dtype, self.act, self.lo, self.hi, self.bias = np.dtype(dtype), act, lo, hi, bias
        self.scale, self.kind, self.path = scale, kind, path


class Vec(Instr):
    """Vector unit on UB tiles: ``dst = OPS[op](*srcs, **args)`` (see ``vector.py``).
    Operands are Refs (UB) or Regs; ``elems`` x the op's cost per element is its work."""
    __slots__ = ("vop", "dst", "srcs", "args", "elems")
    op = "vec"

    def __init__(self, vop, dst, srcs, elems, **args):
        self.pipe, self.vop, self.dst, self.srcs, self.args, self.elems = "V", vop, dst, srcs, args, elems


class SetFlag(Instr):
    """On pipe ``pipe``, after everything before it there: signal ``dst_pipe`` (event ``ev``)."""
    __slots__ = ("dst_pipe", "ev")
    op = "set"

    def __init__(self, pipe, dst_pipe, ev):
        self.pipe, self.dst_pipe, self.ev = pipe, dst_pipe, ev


class WaitFlag(Instr):
    """On pipe ``pipe``: nothing after it runs until ``src_pipe`` has set event ``ev``."""
    __slots__ = ("src_pipe", "ev")
    op = "wait"

    def __init__(self, pipe, src_pipe, ev):
        self.pipe, self.src_pipe, self.ev = pipe, src_pipe, ev


class Barrier(Instr):
    """PipeBarrier<PIPE_ALL>: every pipe drains (the end of a kernel)."""
    __slots__ = ()
    op = "barrier"

    def __init__(self):
        self.pipe = "S"


# ---- fractal layouts ---------------------------------------------------------------------

def to_fractal(dense: np.ndarray, fr: int, fc: int) -> np.ndarray:
    """(R, C) with R % fr == C % fc == 0 -> (R/fr, C/fc, fr, fc) block-major."""
    r, c = dense.shape
    return dense.reshape(r // fr, fr, c // fc, fc).swapaxes(1, 2)


def from_fractal(blocks: np.ndarray) -> np.ndarray:
    rb, cb, fr, fc = blocks.shape
    return blocks.swapaxes(1, 2).reshape(rb * fr, cb * fc)


def gm_runs(arr: np.ndarray, index, data) -> int:
    """Contiguous runs a GM access makes in ``arr``'s row-major layout (for DMA burst cost)."""
    if data.size == 0:
        return 0
    idx = index if isinstance(index, tuple) else (index,)
    if all(isinstance(i, (slice, int, np.integer)) for i in idx):
        run = 1
        shape = arr.shape
        exts = []
        for ax, n in enumerate(shape):
            i = idx[ax] if ax < len(idx) else slice(None)
            if isinstance(i, slice):
                lo, hi, step = i.indices(n)
                exts.append((max(0, -(-(hi - lo) // step)), step))
            else:
                exts.append((1, 1))
        for ax in range(len(shape) - 1, -1, -1):
            ext, step = exts[ax]
            if step != 1:
                break
            run *= ext
            if ext < shape[ax]:
                break
        return max(1, data.size // max(run, 1))
    # a gather / scatter (conv outputs, several groups' channels): count the breaks
    lin = np.sort(np.ravel_multi_index(np.broadcast_arrays(*idx), arr.shape).reshape(-1))
    return int(1 + np.count_nonzero(np.diff(lin) != 1))
