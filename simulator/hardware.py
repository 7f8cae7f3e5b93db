"""The hardware model the traffic and timing functions use, built from a :class:`~edgeops.boards.Board`.

A board file lists memories, paths and units; this module decides which of them an operator
uses on a target and in which role, so that the rest of the simulator only ever sees *levels*:

* ``matrix`` profile (GEMM, convolution, the GEMM of im2col/Winograd):
  - ascend: ``l1`` {A, B in L1} -> ``l0`` {A in L0A, B in L0B, C (accumulator) in L0C}; results
    leave L0C through FixPipe to GM (separated 910B) -- GM -> L1 -> L0A/L0B -> Cube -> L0C -> GM.
  - neon (CPU): ``outer`` cache (the second-to-last cache on the DRAM->L1 chain, e.g. L2) ->
    ``l1`` (L1D) -> ``reg`` (the vector register file, sized from the ISA). All three operands
    are blocked at every cache level (caches are not software managed: a level's tile is its
    blocking factor and the model counts the traffic that blocking implies).
  - cuda (GPU): ``smem`` {A, B in shared memory, C in registers}; DRAM -> L2 -> SMEM; L2 is a
    pass-through (same bytes on both hops, no reuse credited to it).
  - flat: a board with a single on-chip memory holds A, B and C in it (``buf``).
* ``vector`` profile (element-wise chains, normalisations, softmax, pooling):
  ascend ``ub`` (GM -> UB -> Vector -> UB -> GM), neon the outer cache, cuda SMEM, flat ``buf``.

Roles are GEMM-view operand names: A (M x K input / activations), B (K x N weights), C (M x N
accumulated output); the vector profile has ``in`` and ``out``. Granules are in GEMM-view dims
``m``, ``n``, ``k``: the Cube works on 16x16 fp16 fractals (16x32 for int8, 16x8 for fp32, i.e.
one 512-byte fractal), a NEON register holds 16 bytes of lanes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from edgeops.errors import BoardError

ELEM_BYTES = {"fp32": 4, "fp16": 2, "int8": 1, "int32": 4}
ACC_DTYPE = {"fp32": "fp32", "fp16": "fp32", "int8": "int32"}
# FixPipe applies these on the way out of L0C at no extra pass (Ascend C220 / 310B)
FIXPIPE_EPILOGUES = frozenset({"none", "bias", "relu", "relu6", "clip", "quant"})


@dataclass(frozen=True)
class Memory:
    name: str
    capacity: int           # bytes usable by one core
    alignment: int
    offchip: bool = False


@dataclass(frozen=True)
class Link:
    """One hop of a data path; ``engine`` is the DMA queue / cache port that moves it."""
    src: str
    dst: str
    engine: str
    bandwidth: float        # bytes/s (whole chip when ``shared``, else per core)
    setup_s: float          # per transfer
    burst: int
    shared: bool

    @property
    def key(self) -> str:
        return f"{self.src}->{self.dst}"


@dataclass(frozen=True)
class Level:
    """One tiling level: which memory holds each role, and the tile granule per GEMM-view dim."""
    name: str
    holds: tuple[tuple[str, str], ...]          # (role, memory name)
    granule: tuple[tuple[str, int], ...] = ()   # (gemm dim, granule) for legality and padding
    padded: bool = False                        # on-chip moves into it are fractal/lane padded

    def memory_of(self, role: str) -> str | None:
        return dict(self.holds).get(role)

    def granule_of(self, gdim: str) -> int:
        return dict(self.granule).get(gdim, 1)


@dataclass(frozen=True)
class UnitModel:
    name: str
    core: str
    cores: int
    hz: float
    per_core_flops: dict = field(hash=False, compare=False)   # dtype -> flops per cycle per core

    def flops_per_cycle(self, dtype: str) -> float:
        """Per core. A dtype the unit lacks runs at the next wider one it has (int8 -> fp16 -> fp32)."""
        for dt in {"int8": ("int8", "fp16", "fp32"), "fp16": ("fp16", "fp32"),
                   "int32": ("fp32",)}.get(dtype, (dtype,)):
            if self.per_core_flops.get(dt, 0) > 0:
                return self.per_core_flops[dt]
        raise BoardError(f"unit {self.name!r} has no rate for {dtype} (has "
                         f"{sorted(self.per_core_flops)})")


@dataclass(frozen=True)
class HardwareModel:
    board: object = field(repr=False, compare=False)
    target: str
    family: str                  # ascend | cpu | gpu | flat
    memories: tuple[Memory, ...]
    matrix: tuple[Level, ...]
    vector: tuple[Level, ...]
    matrix_unit: UnitModel
    vector_unit: UnitModel
    launch_s: float
    separated: bool = False      # Ascend AIC/AIV split: a Cube result reaches Vector via GM
    lane_bytes: int = 16
    reg_home: str = ""           # memory the register file exchanges data with
    # other units that can run the matrix profile (GPU: CUDA cores beside the tensor cores);
    # ``unit("matrix", dtype)`` picks the fastest of these and ``matrix_unit`` with a rate
    matrix_alts: tuple[UnitModel, ...] = ()

    # ---- lookups --------------------------------------------------------------------------
    @property
    def offchip(self) -> Memory:
        return next(m for m in self.memories if m.offchip)

    def memory(self, name: str) -> Memory:
        for m in self.memories:
            if m.name == name:
                return m
        raise BoardError(f"board {self.board.name!r} has no memory {name!r}")

    def levels(self, profile: str, dtype: str = "fp16") -> tuple[Level, ...]:
        """The tiling levels of ``profile`` with the granules of ``dtype`` filled in."""
        base = self.matrix if profile == "matrix" else self.vector
        if profile != "matrix":
            return base
        if self.family == "ascend":   # L1 keeps the fractal layout the Cube reads
            g = tuple(self.cube_granules(dtype).items())
            return tuple(replace(lv, granule=g) for lv in base)
        if self.family == "cpu":      # the register tile holds whole vectors along n
            lanes = max(1, self.lane_bytes // ELEM_BYTES[dtype])
            return tuple(replace(lv, granule=(("n", lanes),)) if lv.name == "reg" else lv
                         for lv in base)
        return base

    def unit(self, profile: str, dtype: str | None = None) -> UnitModel:
        """The unit that runs ``profile``; for the matrix profile and a ``dtype``, the fastest
        of ``matrix_unit`` and ``matrix_alts`` that has a rate for it (Jetson: tensor cores for
        fp16/int8, CUDA cores for fp32). Without a unit for ``dtype``: ``matrix_unit`` (whose
        ``flops_per_cycle`` then raises the BoardError naming what it has)."""
        if profile != "matrix":
            return self.vector_unit
        if dtype is None or not self.matrix_alts:
            return self.matrix_unit
        best, peak = self.matrix_unit, 0.0
        for u in (self.matrix_unit,) + self.matrix_alts:
            try:
                r = u.flops_per_cycle(dtype) * u.hz * u.cores
            except BoardError:
                continue
            if r > peak:
                best, peak = u, r
        return best

    def route(self, src: str, dst: str) -> tuple[Link, ...]:
        """Hops from ``src`` to ``dst``. The register file is not a board memory: loads into it
        and stores from it are issued beside the arithmetic and modelled as free hops from/to
        the memory next to it (CPU: L1D; GPU: L2 on the way to DRAM)."""
        if "reg" in (src, dst):
            other = dst if src == "reg" else src
            home = self.reg_home if self.memory(other).offchip else other
            free = Link(home if src != "reg" else "reg", "reg" if src != "reg" else home, "ldst",
                        float("inf"), 0.0, 1, False)
            if home == other:
                return (free,)
            hops = _route(self.board, other, home) if src != "reg" else _reverse(self.board, home, other)
            return hops + (free,) if src != "reg" else (free,) + hops
        return _route(self.board, src, dst)

    def cube_granules(self, dtype: str) -> dict[str, int]:
        """Fractal shape of the matrix unit: Ascend 16 x (512 / 16 / elem) x 16; else none."""
        if self.family != "ascend":
            return {"m": 1, "n": 1, "k": 1}
        return {"m": 16, "n": 16, "k": 512 // (16 * ELEM_BYTES[dtype])}

    def vector_granule(self, dtype: str) -> int:
        """Elements per aligned vector block (Ascend: 32 B UB blocks; CPU: one register)."""
        if self.family == "ascend":
            return max(1, 32 // ELEM_BYTES[dtype])
        if self.family == "cpu":
            return max(1, self.lane_bytes // ELEM_BYTES[dtype])
        return 1


# ------------------------------------------------------------------------------------------

def _reverse(board, src: str, dst: str) -> tuple[Link, ...]:
    """Hops src -> dst over paths declared the other way (stores retrace the load path)."""
    try:
        return _route(board, src, dst)
    except BoardError:
        back = _route(board, dst, src)
        return tuple(Link(ln.dst, ln.src, ln.engine, ln.bandwidth, ln.setup_s, ln.burst, ln.shared)
                     for ln in reversed(back))


def _vec_level(name: str, mem: str) -> Level:
    # streams (in/out) and a direct convolution's operands (A/B/C) all live in one buffer
    return Level(name, tuple((r, mem) for r in ("in", "out", "A", "B", "C")))


def _route(board, src: str, dst: str) -> tuple[Link, ...]:
    """Direct path if the board has one, else the fewest-hop chain of paths (BFS)."""
    paths = {(p.src, p.dst): p for p in board.paths}
    frontier, seen = [(src, ())], {src}
    while frontier:
        nxt = []
        for node, hops in frontier:
            for (s, d), p in paths.items():
                if s != node or d in seen:
                    continue
                link = Link(s, d, p.engine, p.bandwidth_bytes_per_s, p.setup_latency_s,
                            max(1, p.burst_bytes), p.shared)
                if d == dst:
                    return hops + (link,)
                seen.add(d)
                nxt.append((d, hops + (link,)))
        frontier = nxt
    raise BoardError(f"board {board.name!r} has no data path from {src} to {dst}; paths: "
                     f"{[f'{p.src}->{p.dst}' for p in board.paths]} (add a [[path]] to the board file)")


def _find(board, *names):
    by = {m.name.lower(): m for m in board.memories}
    for n in names:
        if n in by:
            return by[n]
    return None


def _hz(board, core: str) -> float:
    f = getattr(board, "core_hz", None)
    return f(core) if f else board.clock_hz


def _unit(board, prefer: tuple[str, ...], dtype_hint: str = "fp16", core: str | None = None) -> UnitModel:
    units = [u for u in board.units if core is None or u.core == core] or list(board.units)
    pick = next((u for p in prefer for u in units if p in u.name.lower()), None)
    if pick is None:   # the fastest unit for the dtype
        pick = max(units, key=lambda u: u.flops_per_cycle.get(dtype_hint, 0) * u.per_core)
    fpc = {dt: v * pick.per_core for dt, v in pick.flops_per_cycle.items()}
    return UnitModel(pick.name, pick.core, board.core(pick.core).count, _hz(board, pick.core), fpc)


def _capacity(board, mem, cores: int) -> int:
    # a chip-scope cache is shared: each core gets its share
    return mem.size_bytes if mem.scope != "chip" or mem.offchip else mem.size_bytes // max(1, cores)


def _register_file(isa: tuple[str, ...]) -> tuple[int, int]:
    """(register file bytes, lane bytes) from the ISA: the architectural vector registers."""
    s = {x.lower() for x in isa}
    if "avx512f" in s:
        return 32 * 64, 64
    if "avx2" in s or "avx" in s:
        return 16 * 32, 32
    if any(x.startswith(("armv8", "armv9", "aarch64")) or x in ("asimd", "neon") for x in s):
        return 32 * 16, 16
    return 16 * 16, 16        # SSE2-class baseline


def _chain_to(board, scope: str) -> list:
    """Longest chain of on-chip memories from the off-chip one that ends in ``scope``."""
    best: list = []
    off = board.offchip.name

    def walk(node, chain):
        nonlocal best
        mem = next(m for m in board.memories if m.name == node)
        if mem.scope == scope and len(chain) > len(best):
            best = list(chain)
        for p in board.paths:
            if p.src == node and p.dst not in chain:
                walk(p.dst, chain + [p.dst])
    walk(off, [off])
    return best


def from_board(board, target: str | None = None) -> HardwareModel:
    """The hardware model of ``board`` for ``target`` (default: the board's first target).

    Preconditions (BoardError naming what is missing): the board offers ``target``; it has the
    memories the target's hierarchy needs (ascend: l1, l0a, l0b, l0c, ub; neon: a chain of
    caches from the off-chip memory to the CPU core; cuda: shared memory and a [gpu] table), or
    a single on-chip memory (the flat model).
    """
    target = target or board.target
    if target not in board.targets:
        raise BoardError(f"board {board.name!r} does not offer target {target!r}; it offers "
                         f"{list(board.targets)}")
    key = (id(board), target)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not board:   # boards hold dicts: not hashable, cache by identity
        hit = _CACHE[key] = (board, _build(board, target))
    return hit[1]


_CACHE: dict = {}


def _build(board, target: str) -> HardwareModel:
    onchip = [m for m in board.memories if not m.offchip]
    off = board.offchip
    mem = lambda m, cores: Memory(m.name, _capacity(board, m, cores), m.alignment_bytes, m.offchip)
    if len(onchip) == 1:
        u = _unit(board, ())
        buf = onchip[0]
        lvl = (Level("buf", (("A", buf.name), ("B", buf.name), ("C", buf.name))),)
        vec = (_vec_level("buf", buf.name),)
        return HardwareModel(board, target, "flat", (mem(off, 1), mem(buf, u.cores)), lvl, vec,
                             u, u, board.launch_overhead_s)
    if target == "ascend":
        need = {n: _find(board, n) for n in ("l1", "l0a", "l0b", "l0c", "ub")}
        missing = [n for n, m in need.items() if m is None]
        if missing:
            raise BoardError(f"board {board.name!r}: the ascend target needs memories l1, l0a, l0b, "
                             f"l0c and ub; missing {missing}")
        cube = _unit(board, ("cube",))
        vec_u = _unit(board, ("vector", "vec"))
        n = {k: m.name for k, m in need.items()}
        matrix = (Level("l1", (("A", n["l1"]), ("B", n["l1"]))),
                  Level("l0", (("A", n["l0a"]), ("B", n["l0b"]), ("C", n["l0c"])), padded=True))
        vector = (_vec_level("ub", n["ub"]),)
        mems = (mem(off, 1),) + tuple(mem(m, 1) for m in need.values())
        return HardwareModel(board, target, "ascend", mems, matrix, vector, cube, vec_u,
                             board.launch_overhead_s, separated=board.architecture == "separated")
    if target == "neon":
        simd = _unit(board, ("simd", "neon", "fma"), "fp32",
                     core="cpu" if any(c.name == "cpu" for c in board.cores) else None)
        chain = _chain_to(board, simd.core)
        if len(chain) < 2:
            raise BoardError(f"board {board.name!r}: no chain of caches from {off.name} to a "
                             f"memory of core {simd.core!r} (check the [[path]] entries)")
        regs, lane = _register_file(board.isa)
        caches = [next(m for m in board.memories if m.name == c) for c in chain[1:]]
        inner, outer = caches[-1], caches[-2] if len(caches) > 1 else None
        levels = []
        if outer is not None:
            levels.append(Level("outer", (("A", outer.name), ("B", outer.name), ("C", outer.name))))
        levels.append(Level("l1", (("A", inner.name), ("B", inner.name), ("C", inner.name))))
        levels.append(Level("reg", (("A", "reg"), ("B", "reg"), ("C", "reg")), padded=True))
        stream = outer or inner
        vector = (_vec_level("outer", stream.name),)
        mems = (mem(off, 1),) + tuple(mem(c, simd.cores) for c in caches) + (Memory("reg", regs, 1),)
        return HardwareModel(board, target, "cpu", mems, tuple(levels), vector, simd, simd,
                             board.launch_overhead_s, lane_bytes=lane, reg_home=inner.name)
    if target == "cuda":
        if board.gpu is None:
            raise BoardError(f"board {board.name!r}: the cuda target needs a [gpu] table")
        tc = _unit(board, ("tensor", "mma"), core="sm")
        cc = _unit(board, ("cuda_core", "cuda", "fp32"), "fp32", core="sm")
        chain = _chain_to(board, "sm")
        if len(chain) < 2:
            raise BoardError(f"board {board.name!r}: no path chain from {off.name} to shared "
                             f"memory (a memory with scope 'sm')")
        smem = next(m for m in board.memories if m.name == chain[-1])
        g = board.gpu
        regs = g.registers_per_sm * 4
        matrix = (Level("smem", (("A", smem.name), ("B", smem.name), ("C", "reg"))),)
        vector = (_vec_level("smem", smem.name),)
        smem_cap = Memory(smem.name, min(smem.size_bytes, g.shared_memory_per_block_bytes),
                          smem.alignment_bytes)
        mems = (mem(off, 1), smem_cap, Memory("reg", regs, 4))
        alts = (cc,) if cc.name != tc.name else ()
        return HardwareModel(board, target, "gpu", mems, matrix, vector, tc, cc,
                             board.launch_overhead_s, reg_home=chain[1], matrix_alts=alts)
    raise BoardError(f"no hardware model for target {target!r} (known: ascend, neon, cuda, or a "
                     f"board with a single on-chip memory)")
