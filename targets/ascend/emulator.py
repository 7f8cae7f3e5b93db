"""The functional NPU emulator: executes AI Core programs with numpy, one core at a time.

Each core gets its memories as byte arrays of the board's exact capacity, with a written-mask,
and the buffers its program reserves (``InitBuffer``). Every access is checked: it must lie in
a reserved buffer, start on the memory's alignment, read only bytes something wrote, use whole
fractals in L0A/L0B/L0C, and -- across pipes -- be ordered by a ``SetFlag``/``WaitFlag`` chain
after the last conflicting access (a vector clock per pipe; a missing flag is a race). A
violation raises :class:`~edgeops.targets.ascend.machine.EmulatorError` with the instruction.

The DMA instructions count the bytes they actually move, per ``src->dst`` path, as they execute
(``Emulator.bytes``); this is the figure the analytic traffic model is checked against, and no
traffic formula is involved. Every executed instruction is also appended to a replay trace
(``edgeops.simulator.replay.Trace``) with its unit and its work.
"""
from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from edgeops.simulator.replay import Trace
from edgeops.targets.ascend import vector
from edgeops.targets.ascend.isa import GmRef, Ref, Reg, from_fractal, gm_runs, to_fractal
from edgeops.targets.ascend.machine import EmulatorError, Machine

UNIT = {"S": "scalar", "MTE2": "mte2", "MTE1": "mte1", "M": "cube", "V": "vector",
        "MTE3": "mte3", "FIX": "fixpipe"}
L0 = ("l0a", "l0b", "l0c")


class _Core:
    """On-chip state of one core while its program runs."""

    def __init__(self, m: Machine, core: str):
        self.core = core
        self.mems = m.memories_of(core)
        if not self.mems:
            raise EmulatorError(f"{m.name} has no core type {core!r} (cores: {sorted(m.cores)})")
        self.data = {n: np.zeros(m.capacity[n], np.uint8) for n in self.mems}
        self.written = {n: np.zeros(m.capacity[n], bool) for n in self.mems}
        self.allocs = {n: [] for n in self.mems}
        self.seq = dict.fromkeys(UNIT, 0)
        self.know = {p: {} for p in UNIT}      # pipe -> {pipe: seq it has synchronised with}
        self.slots: dict = {}
        self.pending = defaultdict(deque)
        self.regs: dict = {}


class Emulator:
    """Runs programs against one set of global-memory tensors (``gm``: name -> array).

    ``outputs`` names the tensors the programs write (outputs, partial-sum workspaces); reading
    an element of one before anything wrote it is an error.
    """

    TICK = 4096         # instructions between progress reports

    def __init__(self, m: Machine, gm: dict, outputs=(), tick=None):
        self.m, self.gm = m, gm
        self.tick = tick    # tick(instructions, macs) so far, every TICK instructions
        self.gm_written = {n: np.zeros(gm[n].shape, bool) for n in outputs}
        self.bytes: dict = defaultdict(int)
        self.traces: list[Trace] = []
        self.instructions = 0
        self.macs = 0
        self._op = {"init": self._init, "copy": self._copy, "load2d": self._load2d,
                    "load3d": self._load3d, "mmad": self._mmad, "fixpipe": self._fixpipe,
                    "vec": self._vec, "set": self._set, "wait": self._wait,
                    "barrier": self._barrier}

    # ---- driving ------------------------------------------------------------------------------
    def run(self, program, core: str) -> Trace:
        """Execute ``program`` (an iterable of instructions) on a fresh core of type ``core``."""
        st, tr = _Core(self.m, core), Trace(core)
        i = -1
        tick = self.tick
        for i, ins in enumerate(program):
            st.pc, st.ins = i, ins
            self._op[ins.op](st, ins, tr)
            if tick is not None and not i % self.TICK:
                tick(self.instructions + i, self.macs)
        self.instructions += i + 1
        left = {k: len(v) for k, v in st.pending.items() if v}
        if left:
            raise EmulatorError(f"core {core}: the program ended with flags set but never waited "
                                f"for {left}; each SetFlag needs its WaitFlag")
        self.traces.append(tr)
        return tr

    def err(self, st, msg: str) -> EmulatorError:
        ins = st.ins
        return EmulatorError(f"instruction #{st.pc} ({type(ins).__name__} on {ins.pipe}) on core "
                             f"{st.core}: {msg}")

    # ---- memory ---------------------------------------------------------------------------------
    def _raw(self, st, ref: Ref):
        """Bytes of ``ref`` after the checks every access makes (owner, bounds, alignment)."""
        if ref.mem not in st.data:
            raise self.err(st, f"core {st.core} has no {ref.mem.upper()} (it has "
                               f"{', '.join(x.upper() for x in st.mems)})")
        a, n = ref.addr, ref.nbytes
        align = self.m.alignment[ref.mem]
        if a % align:
            raise self.err(st, f"{ref.mem.upper()} address {a} is not {align} B aligned")
        for lo, hi, _ in st.allocs[ref.mem]:
            if lo <= a and a + n <= hi:
                break
        else:
            bufs = ", ".join(f"{nm} [{lo}, {hi})" for lo, hi, nm in st.allocs[ref.mem]) or "none"
            raise self.err(st, f"{ref.mem.upper()} bytes [{a}, {a + n}) lie outside every buffer "
                               f"(buffers: {bufs})")
        if ref.mem in L0:
            fr, fc = self._fractal(ref)
            r, c = ref.shape
            if r % fr or c % fc:
                raise self.err(st, f"{ref.mem.upper()} tile of {r} x {c} {ref.dtype.name} is not whole "
                                   f"{fr} x {fc} fractals ({fr * fc * ref.dtype.itemsize} B): rows must "
                                   f"be a multiple of {fr} and columns of {fc}")
        return st.data[ref.mem][a:a + n], st.written[ref.mem][a:a + n]

    def _fractal(self, ref: Ref) -> tuple[int, int]:
        e = ref.dtype.itemsize
        if ref.mem == "l0c":
            return 16, 16
        k = 512 // (16 * e)
        return (16, k) if ref.mem == "l0a" else (k, 16)

    def _get(self, st, ref: Ref, block=None) -> np.ndarray:
        """Logical (dense) contents; ``block`` (slices) restricts the read -- and its check."""
        raw, wr = self._raw(st, ref)
        e = ref.dtype.itemsize
        mask = wr.reshape(ref.shape + (e,))
        sel = mask if block is None else mask[block]
        if not sel.all():
            bad = int(np.count_nonzero(~sel.all(axis=-1)))
            raise self.err(st, f"reads {bad} element(s) of {ref!r} that nothing has written")
        if ref.mem in L0:
            fr, fc = self._fractal(ref)
            r, c = ref.shape
            dense = from_fractal(raw.view(ref.dtype).reshape(r // fr, c // fc, fr, fc))
        else:
            dense = raw.view(ref.dtype).reshape(ref.shape)
        return dense if block is None else dense[block]

    def _put(self, st, ref: Ref, data: np.ndarray, fill: bool = False):
        raw, wr = self._raw(st, ref)
        if data.ndim != len(ref.shape) or any(d > s for d, s in zip(data.shape, ref.shape)):
            raise self.err(st, f"a block of {data.shape} does not fit the buffer tile {ref!r}")
        if data.shape != ref.shape and (fill or ref.mem in L0):
            full = np.zeros(ref.shape, ref.dtype)
            full[tuple(slice(0, d) for d in data.shape)] = data
            data = full
        if ref.mem in L0:
            fr, fc = self._fractal(ref)
            r, c = ref.shape
            raw.view(ref.dtype).reshape(r // fr, c // fc, fr, fc)[...] = to_fractal(
                data.astype(ref.dtype, copy=False), fr, fc)
            wr[:] = True
            return
        corner = tuple(slice(0, d) for d in data.shape)
        raw.view(ref.dtype).reshape(ref.shape)[corner] = data
        wr.reshape(ref.shape + (ref.dtype.itemsize,))[corner] = True

    # ---- synchronisation -------------------------------------------------------------------------
    def _tick(self, st, pipe) -> int:
        st.seq[pipe] += 1
        return st.seq[pipe]

    def _sync(self, st, pipe, seq, ref: Ref, write: bool):
        key = (ref.mem, ref.slot)
        s = st.slots.get(key)
        if s is None:
            s = st.slots[key] = [None, -1, -1, {}]
        know = st.know[pipe]
        wp = s[0]
        how = "writes" if write else "reads"
        if wp is not None and wp != pipe and know.get(wp, -1) < s[1]:
            raise self.err(st, f"race: {pipe} {how} the {ref.mem.upper()} buffer @{ref.slot} that "
                               f"{wp} wrote (instruction #{s[2]}) with no SetFlag/WaitFlag between")
        if write:
            for rp, (rseq, ridx) in s[3].items():
                if rp != pipe and know.get(rp, -1) < rseq:
                    raise self.err(st, f"race: {pipe} overwrites the {ref.mem.upper()} buffer "
                                       f"@{ref.slot} while {rp} may still read it (instruction "
                                       f"#{ridx}); free it with a flag first")
            s[0], s[1], s[2], s[3] = pipe, seq, st.pc, {}
        else:
            s[3][pipe] = (seq, st.pc)

    def _set(self, st, ins, tr):
        seq = self._tick(st, ins.pipe)
        snap = dict(st.know[ins.pipe])
        snap[ins.pipe] = seq
        idx = tr.add(UNIT[ins.pipe], "set")
        st.pending[(ins.pipe, ins.dst_pipe, ins.ev)].append((snap, idx))

    def _wait(self, st, ins, tr):
        self._tick(st, ins.pipe)
        q = st.pending[(ins.src_pipe, ins.pipe, ins.ev)]
        if not q:
            raise self.err(st, f"WaitFlag({ins.src_pipe}->{ins.pipe}, event {ins.ev}) has no "
                               f"SetFlag before it: the pipes would deadlock")
        snap, idx = q.popleft()
        know = st.know[ins.pipe]
        for p, s in snap.items():
            if know.get(p, -1) < s:
                know[p] = s
        tr.add(UNIT[ins.pipe], "wait", dep=idx)

    def _barrier(self, st, ins, tr):
        for p in UNIT:
            st.know[p] = dict(st.seq)
        tr.add("scalar", "barrier")

    def _init(self, st, ins, tr):
        mem = ins.mem
        if mem not in st.data:
            raise self.err(st, f"core {st.core} has no {mem.upper()} for queue {ins.name!r}")
        cap, align = self.m.capacity[mem], self.m.alignment[mem]
        end = ins.base + ins.size * ins.num
        if end > cap:
            raise self.err(st, f"{mem.upper()} queue {ins.name!r} needs {ins.num} x {ins.size:,} B "
                               f"at offset {ins.base:,}, ending at {end:,} B > capacity {cap:,} B")
        if ins.base % align or ins.size % align:
            raise self.err(st, f"{mem.upper()} queue {ins.name!r}: buffers of {ins.size:,} B at "
                               f"{ins.base} are not {align} B aligned")
        for lo, hi, nm in st.allocs[mem]:
            if ins.base < hi and lo < end:
                raise self.err(st, f"{mem.upper()} queue {ins.name!r} [{ins.base}, {end}) overlaps "
                                   f"{nm!r} [{lo}, {hi})")
        st.allocs[mem].append((ins.base, end, ins.name))
        tr.add("scalar", "issue")

    # ---- global memory ---------------------------------------------------------------------------
    def _gm_read(self, st, g: GmRef):
        arr = self.gm[g.name]
        data = arr[g.index]
        mask = self.gm_written.get(g.name)
        if mask is not None and not mask[g.index].all():
            raise self.err(st, f"reads elements of GM tensor {g.name!r} that nothing has written")
        runs = gm_runs(arr, g.index, data)
        return (data.T if g.T else data), runs

    def _gm_write(self, st, g: GmRef, data):
        arr = self.gm[g.name]
        try:
            arr[g.index] = data
        except ValueError as e:
            raise self.err(st, f"GM tensor {g.name!r}: {e}") from None
        if g.name in self.gm_written:
            self.gm_written[g.name][g.index] = True
        return gm_runs(arr, g.index, data)

    # ---- data movement ---------------------------------------------------------------------------
    def _copy(self, st, ins, tr):
        seq = self._tick(st, ins.pipe)
        runs = 0
        if isinstance(ins.src, GmRef):
            data, runs = self._gm_read(st, ins.src)
        else:
            self._sync(st, ins.pipe, seq, ins.src, False)
            data = self._get(st, ins.src)
        dst_dt = self.gm[ins.dst.name].dtype if isinstance(ins.dst, GmRef) else ins.dst.dtype
        if data.dtype != dst_dt:
            raise self.err(st, f"a DMA moves bytes: it cannot convert {data.dtype} to {dst_dt} "
                               f"(FixPipe converts on the way out of L0C, the Vector unit in UB)")
        if isinstance(ins.dst, GmRef):
            runs = self._gm_write(st, ins.dst, data)
        else:
            self._sync(st, ins.pipe, seq, ins.dst, True)
            self._put(st, ins.dst, data, ins.fill)
        n = int(data.size) * data.dtype.itemsize
        self.bytes[ins.path] += n
        tr.add(UNIT[ins.pipe], "dma", ins.path, n, runs)

    def _load2d(self, st, ins, tr):
        seq = self._tick(st, "MTE1")
        self._sync(st, "MTE1", seq, ins.src, False)
        self._sync(st, "MTE1", seq, ins.dst, True)
        blk = (slice(ins.r0, ins.r0 + ins.rows), slice(ins.c0, ins.c0 + ins.cols))
        if ins.r0 + ins.rows > ins.src.shape[0] or ins.c0 + ins.cols > ins.src.shape[1]:
            raise self.err(st, f"block rows [{ins.r0}, {ins.r0 + ins.rows}) x cols [{ins.c0}, "
                               f"{ins.c0 + ins.cols}) is out of bounds of {ins.src!r}")
        block = self._get(st, ins.src, blk)
        self._put(st, ins.dst, block.T if ins.T else block)
        path = f"{ins.src.mem}->{ins.dst.mem}"
        self.bytes[path] += ins.dst.nbytes
        tr.add("mte1", "dma", path, ins.dst.nbytes)

    def _load3d(self, st, ins, tr):
        seq = self._tick(st, "MTE1")
        self._sync(st, "MTE1", seq, ins.src, False)
        self._sync(st, "MTE1", seq, ins.dst, True)
        raw, wr = self._raw(st, ins.src)
        e = ins.src.dtype.itemsize
        flat = raw.view(ins.src.dtype)
        idx = ins.flat[ins.valid]
        if idx.size and (idx.max() >= flat.size or not wr.reshape(-1, e)[idx].all()):
            raise self.err(st, f"img2col reads elements of {ins.src!r} that nothing has written "
                               f"(or past its end)")
        tile = np.zeros(ins.flat.shape, ins.src.dtype)
        tile[ins.valid] = flat[idx]
        self._put(st, ins.dst, tile)
        path = f"{ins.src.mem}->{ins.dst.mem}"
        self.bytes[path] += ins.dst.nbytes
        tr.add("mte1", "dma", path, ins.dst.nbytes)

    def _fixpipe(self, st, ins, tr):
        seq = self._tick(st, "FIX")
        self._sync(st, "FIX", seq, ins.src, False)
        acc = self._get(st, ins.src, (slice(0, ins.rows), slice(0, ins.cols)))
        if ins.kind == "spill":
            out = acc.astype(ins.dtype)
        else:
            y = acc.astype(np.float64) if acc.dtype.kind == "i" else acc
            if ins.bias is not None:
                b, _ = self._gm_read(st, ins.bias)
                self.bytes["gm->fixpipe"] += int(b.size) * b.dtype.itemsize
                y = y + b.reshape(1, -1)
            if ins.act not in ("none", "relu", "relu6", "clip"):
                raise self.err(st, f"FixPipe applies bias, Relu, Relu6, Clip and quantisation; "
                                   f"{ins.act!r} needs the Vector unit")
            if ins.act != "none":
                y = vector.ACT[ins.act][0](y, lo=ins.lo, hi=ins.hi)
            if ins.scale is not None and ins.dtype.kind == "i":   # requantise (QuantizeLinear)
                info = np.iinfo(ins.dtype)
                y = np.clip(np.rint(y * ins.scale), info.min, info.max)
            elif ins.scale is not None:                           # dequantise / alpha
                y = y * ins.scale
            out = y.astype(ins.dtype)
        if isinstance(ins.dst, GmRef):
            runs = self._gm_write(st, ins.dst, out)
        else:
            self._sync(st, "FIX", seq, ins.dst, True)
            self._put(st, ins.dst, out)
            runs = 0
        n = int(out.size) * out.dtype.itemsize
        self.bytes[ins.path] += n
        tr.add("fixpipe", "dma", ins.path, n, runs)

    # ---- compute --------------------------------------------------------------------------------
    def _mmad(self, st, ins, tr):
        seq = self._tick(st, "M")
        for r in (ins.a, ins.b) + (() if ins.init else (ins.c,)):
            self._sync(st, "M", seq, r, False)
        self._sync(st, "M", seq, ins.c, True)
        (m, k), (k2, n), (m2, n2) = ins.a.shape, ins.b.shape, ins.c.shape
        if (k, m, n) != (k2, m2, n2):
            raise self.err(st, f"Mmad shapes disagree: A {m}x{k}, B {k2}x{n}, C {m2}x{n2}")
        a, b = self._get(st, ins.a), self._get(st, ins.b)
        if ins.a.dtype.kind == "i":   # exact in float64, then the int32 accumulator
            prod = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
        else:                         # fp16 x fp16 products are exact in fp32; fp32 accumulate
            prod = a.astype(np.float32) @ b.astype(np.float32)
        c = prod if ins.init else self._get(st, ins.c) + prod
        self._put(st, ins.c, c.astype(ins.c.dtype))
        self.macs += m * n * k
        tr.add("cube", "compute", amount=2.0 * m * n * k, dtype=ins.a.dtype.name.replace("float", "fp"))

    def _vec(self, st, ins, tr):
        seq = self._tick(st, "V")
        vals, elems, dt = [], 0, None
        for s in ins.srcs:
            if isinstance(s, Reg):
                if s.name not in st.regs:
                    raise self.err(st, f"reads vector register {s.name!r} before anything set it")
                vals.append(st.regs[s.name])
            else:
                self._sync(st, "V", seq, s, False)
                v = self._get(st, s)
                dt = dt or v.dtype
                elems = max(elems, v.size)
                vals.append(v.astype(np.float32))
        res = vector.run(ins.vop, vals, ins.args)
        dsts = ins.dst if isinstance(ins.dst, tuple) else (ins.dst,)
        res = res if isinstance(ins.dst, tuple) else (res,)
        for d, r in zip(dsts, res):
            if isinstance(d, Reg):
                st.regs[d.name] = np.asarray(r, np.float32).reshape(d.rows, 1)
            else:
                self._sync(st, "V", seq, d, True)
                self._put(st, d, np.asarray(r).astype(d.dtype))
                dt = dt or d.dtype
                elems = max(elems, int(np.prod(d.shape)))
        elems = ins.elems or elems
        name = {"float16": "fp16", "float32": "fp32", "int8": "int8", "int32": "int32"}.get(
            np.dtype(dt or np.float32).name, "fp32")
        tr.add("vector", "compute", amount=float(elems * vector.cost(ins.vop, ins.args)), dtype=name)
