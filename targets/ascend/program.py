"""Building blocks of every program builder: buffer queues with their flags, and the loop nest.

``Program`` collects one core's instructions and hands out buffers (a bump allocator per
memory, aligned as the board says, as ``TPipe::InitBuffer`` would) and event ids.

``Que`` is an Ascend C ``TQue`` with BUFFER_NUM slots between a producer pipe and a consumer
pipe: ``alloc`` (AllocTensor: wait until the consumer freed the slot), ``enque`` (the producer
signals the data is there), ``deque`` (the consumer waits for it, once), ``free`` (the consumer
releases the slot). Each turns into the ``SetFlag``/``WaitFlag`` pair the hardware needs, so
with two slots the producer fills one while the consumer works on the other.

``Nest`` walks a tiled loop nest the way the traffic specification (``edgeops.simulator.nest``)
describes it, written from that text, not from its code: per level a tile size and a loop
order; a loop whose tile equals its parent's does not exist; split loops are outermost and each
core gets a contiguous range of their tiles; an operand held at level ``j`` is (re)loaded at the
start of every iteration of its *trigger*, the innermost existing loop at a level ``<= j`` over
a dim it depends on (none: once per core).
"""
from __future__ import annotations

import itertools

from edgeops.targets.ascend.isa import InitBuffer, SetFlag, WaitFlag


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def roundup(a: int, g: int) -> int:
    return cdiv(a, g) * g


class Program:
    """One core's instruction list under construction."""

    def __init__(self, m, core: str):
        self.m, self.core = m, core
        self.code: list = []
        self._next = {}
        self._ev = itertools.count()

    def emit(self, ins):
        self.code.append(ins)

    def event(self) -> int:
        return next(self._ev)

    def alloc(self, mem: str, name: str, size: int, num: int = 1) -> tuple[int, int]:
        """Reserve ``num`` buffers of ``size`` bytes (rounded up to the memory's alignment);
        returns (base, slot size). Capacity is the emulator's to check, not the builder's."""
        size = roundup(max(1, size), self.m.alignment[mem])
        base = self._next.get(mem, 0)
        self._next[mem] = base + size * num
        self.emit(InitBuffer(mem, name, base, size, num))
        return base, size


class Programs:
    """The per-core programs of one kernel: ``cores`` of them, built lazily one at a time."""

    def __init__(self, cores: int, gen):
        self.cores, self._gen = cores, gen

    def __iter__(self):
        return iter(self._gen)


class Que:
    def __init__(self, prog: Program, mem: str, name: str, num: int, size: int,
                 producer: str, consumer: str):
        self.p, self.mem, self.name, self.num = prog, mem, name, max(1, int(num))
        self.base, self.size = prog.alloc(mem, name, size, self.num)
        self.producer, self.consumer = producer, consumer
        self._next = 0
        self._ready = [None] * self.num     # event the consumer still has to wait for
        self._freed = [None] * self.num     # event the producer still has to wait for
        self._busy = [False] * self.num

    def addr(self, i: int) -> int:
        return self.base + i * self.size

    def alloc(self) -> int:
        i = self._next
        self._next = (i + 1) % self.num
        if self._busy[i]:
            raise RuntimeError(f"queue {self.name}: slot {i} allocated twice without a free")
        if self._freed[i] is not None:
            self.p.emit(WaitFlag(self.producer, self.consumer, self._freed[i]))
            self._freed[i] = None
        self._busy[i] = True
        return i

    def enque(self, i: int):
        ev = self.p.event()
        self.p.emit(SetFlag(self.producer, self.consumer, ev))
        self._ready[i] = (self.producer, ev)

    def deque(self, i: int):
        if self._ready[i] is not None:
            src, ev = self._ready[i]
            self.p.emit(WaitFlag(self.consumer, src, ev))
            self._ready[i] = None

    def free(self, i: int):
        self.deque(i)
        ev = self.p.event()
        self.p.emit(SetFlag(self.consumer, self.producer, ev))
        self._freed[i] = ev
        self._busy[i] = False

    def drain(self):
        """End of the kernel: the producer takes back every freed slot (balances the flags)."""
        for i in range(self.num):
            self.deque(i)
            if self._freed[i] is not None:
                self.p.emit(WaitFlag(self.producer, self.consumer, self._freed[i]))
                self._freed[i] = None


class Nest:
    """A tiled loop nest: ``sizes`` {dim: size}, per level ``tiles`` {dim: tile} and ``orders``
    (outermost first), ``split`` {level-0 dim: cores}. Tiles are clamped to the parent tile."""

    def __init__(self, sizes: dict, tiles: list, orders: list, split: dict | None = None):
        self.sizes, self.split = dict(sizes), dict(split or {})
        self.L = len(tiles)
        self.eff, prev = [], dict(sizes)
        for lv in tiles:
            cur = {d: min(int(lv.get(d, prev[d])), prev[d]) for d in sizes}
            self.eff.append(cur)
            prev = cur
        loops = []
        for lvl, order in enumerate(orders):
            parent = self.sizes if lvl == 0 else self.eff[lvl - 1]
            live = [d for d in order if self.eff[lvl][d] < parent[d]]
            if lvl == 0:   # split loops are hoisted outermost (legality keeps them there anyway)
                live = [d for d in live if d in self.split] + [d for d in live if d not in self.split]
            loops += [(lvl, d) for d in live]
        self.loops = loops
        # levels each loop's tile is visible at: its own and the deeper ones where d's loop does
        # not exist (those inherit the block)
        self.sets = []
        for lvl, d in loops:
            deeper = [l2 for l2, d2 in loops if d2 == d and l2 > lvl]
            self.sets.append(range(lvl, min(deeper) if deeper else self.L))

    def nondeg(self, level: int, d: str) -> bool:
        return (level, d) in self.loops

    def trigger(self, rel, j: int) -> int:
        """Index in ``loops`` of the trigger of an operand depending on ``rel`` held at level
        ``j`` (-1: loaded once per core)."""
        best = -1
        for k, (lvl, d) in enumerate(self.loops):
            if lvl <= j and d in rel:
                best = k
        return best

    def core_ranges(self) -> list[dict]:
        """Per core: {split dim: (start, extent)} in elements. Each split dim's level-0 tiles
        are dealt out in contiguous ranges, as even as possible; idle cores get nothing."""
        per = []
        for d, parts in self.split.items():
            t = self.eff[0][d]
            n = cdiv(self.sizes[d], t)
            rng = []
            for c in range(min(parts, n)):
                lo, hi = c * n // min(parts, n), (c + 1) * n // min(parts, n)
                s = lo * t
                rng.append((d, s, min(hi * t, self.sizes[d]) - s))
            per.append(rng)
        return [{d: (s, e) for d, s, e in combo} for combo in itertools.product(*per)]

    def walk(self, rng: dict, enter, leave, body):
        """Run the nest for one core's ``rng``. ``enter(k, it)`` / ``leave(k, it)`` bracket each
        iteration of loop ``k`` (``k == -1``: the whole core); ``body(blk)`` runs innermost.
        ``blk[level][d]`` = (start, extent) of the current tile; ``it.first[k]`` / ``it.last[k]``
        say whether loop ``k`` is in its first / last iteration."""
        blk = [{d: rng.get(d, (0, n)) for d, n in self.sizes.items()} for _ in range(self.L)]
        it = _Iter(len(self.loops), blk)
        loops, sets = self.loops, self.sets
        tiles = [self.eff[lvl][d] for lvl, d in loops]

        def rec(k):
            if k == len(loops):
                body(blk)
                return
            lvl, d = loops[k]
            p0, pe = blk[lvl - 1][d] if lvl > 0 else rng.get(d, (0, self.sizes[d]))
            t = tiles[k]
            n = cdiv(pe, t)
            for i in range(n):
                s = p0 + i * t
                cur = (s, min(t, p0 + pe - s))
                for l2 in sets[k]:
                    blk[l2][d] = cur
                it.first[k], it.last[k] = i == 0, i == n - 1
                enter(k, it)
                rec(k + 1)
                leave(k, it)

        enter(-1, it)
        rec(0)
        leave(-1, it)


class _Iter:
    __slots__ = ("first", "last", "blk")

    def __init__(self, n, blk):
        self.first, self.last, self.blk = [True] * n, [True] * n, blk

    def edge(self, loops, upto: int, rel, which: str) -> bool:
        """Are all loops enclosing loop ``upto`` over dims not in ``rel`` at their first (or
        last) iteration? That is whether an accumulator visit is its tile's first (last)."""
        flags = self.first if which == "first" else self.last
        return all(flags[k] for k in range(max(upto, 0)) if loops[k][1] not in rel)
