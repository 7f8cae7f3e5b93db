"""The NPU as the emulator sees it, read straight from a board file.

Deliberately independent of ``edgeops.simulator.hardware``: the emulator is the check on the
analytic model, so it takes capacities, alignments, paths and rates from the board itself.

Per core type: the memories it owns (``scope`` = the core's name) with their exact capacity and
alignment. A separated board (A2 / 910B) has AIC cores (L1, L0A/L0B/L0C, Cube, FixPipe) and AIV
cores (UB, Vector) that meet only in global memory; a combined board has one AI Core with all of
them, and a FixPipe path L0C -> UB so a Cube result can reach the Vector unit on chip.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from edgeops.errors import EdgeOpsError

# Pipes of an AI Core, as Ascend C names them. S issues every instruction in program order.
PIPES = ("S", "MTE2", "MTE1", "M", "V", "MTE3", "FIX")
ENGINE_PIPE = {"mte2": "MTE2", "mte1": "MTE1", "mte3": "MTE3", "fixpipe": "FIX"}
ELEM = {"fp32": 4, "fp16": 2, "int8": 1, "int32": 4}
ACC = {"fp16": "fp32", "fp32": "fp32", "int8": "int32"}


class EmulatorError(EdgeOpsError):
    """An NPU program did something the hardware cannot: a buffer past a memory's capacity, a
    misaligned or out-of-bounds access, a read of bytes nothing wrote, a race between pipes, or
    a wait on a flag nobody sets. The message names the instruction index and the numbers."""


@dataclass(frozen=True)
class Path:
    src: str
    dst: str
    pipe: str
    bandwidth: float    # bytes/s (whole chip when shared)
    setup_s: float
    burst: int
    shared: bool


@dataclass(frozen=True)
class Machine:
    board: object = field(repr=False)
    name: str
    separated: bool
    cores: dict                  # core type -> count
    capacity: dict               # memory -> bytes per core
    alignment: dict              # memory -> bytes
    owner: dict                  # memory -> core type
    paths: dict                  # (src, dst) -> Path
    cube_flops: dict             # dtype -> flops per cycle per core
    vector_flops: dict
    hz: float
    launch_s: float
    offchip: str = "gm"

    @property
    def matrix_core(self) -> str:
        return self.owner["l0c"]

    @property
    def vector_core(self) -> str:
        return self.owner["ub"]

    def memories_of(self, core: str) -> tuple[str, ...]:
        return tuple(m for m, c in self.owner.items() if c == core)

    def path(self, src: str, dst: str) -> Path:
        p = self.paths.get((src, dst))
        if p is None:
            raise EmulatorError(f"{self.name} has no data path {src}->{dst}; paths: "
                                f"{sorted(f'{a}->{b}' for a, b in self.paths)}")
        return p

    def link(self, src: str, dst: str) -> Path:
        """Figures for timing a move: its own path, else the way back (partial sums reloaded
        GM -> L0C use FixPipe's figures), else the GM read path of the destination's core."""
        if (src, dst) in self.paths:
            return self.paths[(src, dst)]
        if (dst, src) in self.paths:
            p = self.paths[(dst, src)]
            return Path(src, dst, p.pipe, p.bandwidth, p.setup_s, p.burst, p.shared)
        raise EmulatorError(f"{self.name}: no figures for a move {src}->{dst}")

    def rate(self, unit: str, dtype: str) -> float:
        """Flops per cycle per core; a dtype the unit lacks runs at the next wider one."""
        table = self.cube_flops if unit == "cube" else self.vector_flops
        for dt in {"int8": ("int8", "fp16", "fp32"), "fp16": ("fp16", "fp32"),
                   "int32": ("fp32",), "fp32": ("fp32", "fp16")}.get(dtype, (dtype,)):
            if table.get(dt, 0) > 0:
                return table[dt]
        raise EmulatorError(f"{self.name}: the {unit} unit has no rate for {dtype}")

    def fractal(self, dtype: str) -> tuple[int, int]:
        """(rows, cols) of one 512-byte Cube fractal: 16 x 16 fp16, 16 x 32 int8, 16 x 8 fp32."""
        return 16, 512 // (16 * ELEM[dtype])


_CACHE: dict = {}


def machine(board) -> Machine:
    """The machine of ``board`` (a name, a path or a loaded Board)."""
    from edgeops import boards
    b = boards.load(board)
    hit = _CACHE.get(id(b))
    if hit is not None and hit[0] is b:
        return hit[1]
    m = _build(b)
    _CACHE[id(b)] = (b, m)
    return m


def _build(b) -> Machine:
    need = ("l1", "l0a", "l0b", "l0c", "ub")
    mems = {m.name.lower(): m for m in b.memories}
    missing = [n for n in need if n not in mems]
    if b.kind != "npu" or missing:
        raise EmulatorError(f"board {b.name!r} is not an Ascend-style NPU: the emulator needs "
                            f"memories {list(need)}" + (f"; missing {missing}" if missing else ""))
    off = b.offchip.name.lower()
    cap, align, owner = {off: b.offchip.size_bytes}, {off: b.offchip.alignment_bytes}, {}
    for n in need:
        m = mems[n]
        cap[n], align[n], owner[n] = m.size_bytes, m.alignment_bytes, m.scope
    paths = {}
    for p in b.paths:
        s, d = p.src.lower(), p.dst.lower()
        if s in cap and d in cap:
            pipe = ENGINE_PIPE.get(p.engine.lower())
            if pipe is None:
                raise EmulatorError(f"board {b.name!r}: path {s}->{d} uses engine {p.engine!r}; "
                                    f"the emulator knows {sorted(ENGINE_PIPE)}")
            paths[(s, d)] = Path(s, d, pipe, p.bandwidth_bytes_per_s, p.setup_latency_s,
                                 max(1, p.burst_bytes), p.shared)
    cube = _unit(b, "cube", owner["l0c"])
    vec = _unit(b, "vec", owner["ub"])
    cores = {c.name: c.count for c in b.cores}
    return Machine(b, b.name, b.architecture == "separated", cores, cap, align, owner, paths,
                   cube, vec, b.core_hz(owner["l0c"]), b.launch_overhead_s, off)


def _unit(b, hint: str, core: str) -> dict:
    for u in b.units:
        if hint in u.name.lower() and u.core == core:
            return {dt: v * u.per_core for dt, v in u.flops_per_cycle.items()}
    raise EmulatorError(f"board {b.name!r}: no {hint} unit on core {core!r}")
