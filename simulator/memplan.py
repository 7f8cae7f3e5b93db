"""Activation memory planner: buffer lifetimes, in-place reuse, peak and arena size.

The planner works on an abstract schedule so it can be checked on random DAGs: a list of
:class:`Step` (one per node, in execution order) and the byte size of every activation tensor
(initializers and constants are not activations and are simply left out of ``sizes``).

Rules, applied in execution order:

* a graph input is live from step 0, a graph output until the last step;
* a ``view`` step (Reshape, Flatten, Squeeze, ...) allocates nothing: its output aliases the
  buffer of its first input;
* an ``inplace`` step (an element-wise op) writes its output into the buffer of an input of the
  same size when nothing else reads that buffer later -- every tensor living in it has this
  step as its last consumer -- and the buffer is neither a graph input (the caller owns it) nor
  holds a graph output;
* every other output gets a buffer of its own.

A buffer is live from the step that first writes it to the last step that reads any tensor in
it. ``peak_bytes`` is the largest sum of live buffers over the steps (the planner's lower bound);
``arena_bytes`` is the size of one arena with an offset per buffer, assigned greedily by size
(largest first, lowest offset that does not collide with a buffer whose lifetime overlaps), so
``arena_bytes >= peak_bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("other", "inplace", "view")


@dataclass(frozen=True)
class Step:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    kind: str = "other"           # other | inplace | view


@dataclass
class Buffer:
    id: int
    size: int
    first: int                    # step that writes it first (0 for graph inputs)
    last: int                     # last step that reads it
    tensors: list[str] = field(default_factory=list)
    offset: int = -1
    pinned: bool = False          # holds a graph input or output: never reused in place

    def overlaps(self, other: "Buffer") -> bool:
        return not (self.last < other.first or other.last < self.first)


@dataclass
class MemoryPlan:
    peak_bytes: int
    peak_step: int
    arena_bytes: int
    live_bytes: list[int]                     # per step
    buffers: list[Buffer]
    tensor_buffer: dict[str, int]
    inplace: list[tuple[str, str, str]]       # (step, input tensor reused, output tensor)
    views: list[tuple[str, str, str]]         # (step, input tensor, aliasing output)

    def to_dict(self) -> dict:
        return {"peak_bytes": self.peak_bytes, "peak_step": self.peak_step,
                "arena_bytes": self.arena_bytes, "buffers": len(self.buffers),
                "inplace": [list(x) for x in self.inplace], "views": [list(x) for x in self.views]}


def plan_memory(steps: list[Step], sizes: dict[str, int], graph_inputs=(), graph_outputs=(),
                *, inplace: bool = True) -> MemoryPlan:
    """Plan the activation buffers of ``steps`` (see the module docstring).

    Preconditions (ValueError): every step's kind is one of :data:`KINDS`; steps are in a valid
    execution order (a tensor is produced before it is read).
    """
    outputs = set(graph_outputs)
    consumers: dict[str, list[int]] = {}
    for i, s in enumerate(steps):
        if s.kind not in KINDS:
            raise ValueError(f"step {s.name!r}: kind must be one of {KINDS}, got {s.kind!r}")
        for t in s.inputs:
            if t in sizes:
                consumers.setdefault(t, []).append(i)
    last_read = {t: max(c) for t, c in consumers.items()}
    end = max(len(steps) - 1, 0)
    buffers: list[Buffer] = []
    where: dict[str, int] = {}

    def new(t: str, step: int, pinned=False) -> None:
        b = Buffer(len(buffers), int(sizes[t]), step, step, [t], pinned=pinned or t in outputs)
        buffers.append(b)
        where[t] = b.id

    def join(t: str, bid: int, step: int) -> None:
        b = buffers[bid]
        b.tensors.append(t)
        b.last = max(b.last, step)
        b.pinned = b.pinned or t in outputs
        where[t] = bid

    for t in graph_inputs:
        if t in sizes and t not in where:
            new(t, 0, pinned=True)
    reused, views = [], []
    for i, s in enumerate(steps):
        for t in s.inputs:
            if t in sizes and t not in where:
                raise ValueError(f"step {s.name!r} reads {t!r} before any step produces it")
        outs = [t for t in s.outputs if t in sizes]
        ins = [t for t in s.inputs if t in sizes]
        if s.kind == "view" and outs and ins and sizes[outs[0]] <= buffers[where[ins[0]]].size:
            join(outs[0], where[ins[0]], i)
            views.append((s.name, ins[0], outs[0]))
            outs = outs[1:]
        elif s.kind == "inplace" and inplace and outs:
            for t in ins:
                b = buffers[where[t]]
                if b.pinned or b.size != sizes[outs[0]]:
                    continue
                # nothing in the buffer is read after this step
                if all(last_read.get(u, b.first) <= i for u in b.tensors):
                    join(outs[0], b.id, i)
                    reused.append((s.name, t, outs[0]))
                    outs = outs[1:]
                    break
        for t in outs:
            new(t, i)
        for t in ins:
            b = buffers[where[t]]
            b.last = max(b.last, i)
    for t, bid in where.items():
        b = buffers[bid]
        b.last = max(b.last, last_read.get(t, b.first))
        if t in outputs:
            b.last, b.pinned = end, True
    live = [0] * len(steps)
    for b in buffers:
        for i in range(b.first, min(b.last, end) + 1):
            live[i] += b.size
    peak_step = max(range(len(live)), key=live.__getitem__) if live else 0
    arena = _assign_offsets(buffers)
    return MemoryPlan(max(live, default=0), peak_step, arena, live, buffers, where, reused, views)


def _assign_offsets(buffers: list[Buffer]) -> int:
    """Greedy by size: each buffer at the lowest offset free during its whole lifetime."""
    placed: list[Buffer] = []
    arena = 0
    for b in sorted(buffers, key=lambda x: (-x.size, x.first, x.id)):
        taken = sorted((p.offset, p.offset + p.size) for p in placed if p.overlaps(b))
        off = 0
        for lo, hi in taken:
            if off + b.size <= lo:
                break
            off = max(off, hi)
        b.offset = off
        placed.append(b)
        arena = max(arena, off + b.size)
    return arena
