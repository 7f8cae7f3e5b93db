"""Typed, validated board descriptions.

A board file is TOML (schema 1). Every table that holds hardware figures carries ``source``: a
string citing where all its figures come from, or a table ``{figure = "citation", ...}`` naming
the source of each figure. An unknown key, a missing figure or a figure without a source is an
error naming the file and the key; nothing is ever silently defaulted.

Layout::

    schema = 1
    name = "rpi5"                      # must equal the file name
    description = "..."
    kind = "cpu"                       # cpu | gpu | npu
    targets = ["neon"]                 # edgeops targets in order of preference
    isa = ["armv8.2-a", "asimd", ...]  # CPU features (cpu/gpu host CPU), informational
    architecture = "separated"         # npu only: combined | separated (AIC/AIV split, A2/910B)

    [clock]          hz, source                   # clock of the cores that run targets[0]
    [launch]         overhead_s (kernel launch / op dispatch), source
    [[core]]         name, count, hz (optional), source   # cpu | sm | aicore | aic | aiv
                     hz only where this core type runs at another clock than [clock] (the CPU
                     cluster of a Jetson, the little cores of a big.LITTLE SoC)
    [[unit]]         name, core, per_core, flops_per_cycle = {fp32=.., fp16=.., int8=..}, source
    [[memory]]       name, size_bytes, scope ("chip" or a core name), offchip, alignment_bytes,
                     source
    [[path]]         src, dst, engine, bandwidth_bytes_per_s, setup_latency_s, burst_bytes,
                     shared (bandwidth shared by all cores), source
    [gpu]            (gpu only) warp_size, max_threads_per_sm, max_threads_per_block,
                     max_blocks_per_sm, registers_per_sm, max_registers_per_thread,
                     shared_memory_per_sm_bytes, shared_memory_per_block_bytes,
                     host_device_bandwidth_bytes_per_s, source
    [peer]           (cpu/gpu) how ONNX Runtime runs on this board, for the simulator's model of
                     the kernel edgeops would replace: gemm_efficiency, stream_efficiency,
                     op_overhead_s, source

A figure may be the string ``"detect"`` or ``"measure"`` (only in ``host.toml``): the loader
fills it from ``edgeops.boards.host`` and records the source as detected/measured. Because the
cache hierarchy differs from machine to machine, ``host.toml`` may also give ``isa``,
``memory`` and ``path`` as a whole as ``"detect"``/``"measure"``; the entries the resolver
returns carry their own sources and are validated like any other.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from edgeops.errors import BoardError

# Plausible ranges of figures, by key (wherever it appears), inclusive: a zero, infinite or
# absurd figure would give NaN, infinite or meaningless predictions downstream, so it is refused
# at load. Wide on purpose: from microcontrollers to datacentre accelerators.
PLAUSIBLE = {
    "hz": (1e6, 1e11), "count": (1, 10**6), "per_core": (1, 10**6),
    "flops_per_cycle": (1e-3, 1e8), "size_bytes": (1, 2**50), "alignment_bytes": (1, 2**20),
    "bandwidth_bytes_per_s": (1e6, 1e16), "host_device_bandwidth_bytes_per_s": (1e6, 1e16),
    "setup_latency_s": (0, 1), "overhead_s": (0, 1), "op_overhead_s": (0, 1),
    "burst_bytes": (1, 2**20), "gemm_efficiency": (1e-3, 1), "stream_efficiency": (1e-3, 1),
    "warp_size": (1, 1024), "max_threads_per_sm": (1, 2**20), "max_threads_per_block": (1, 2**20),
    "max_blocks_per_sm": (1, 2**16), "registers_per_sm": (1, 2**30),
    "max_registers_per_thread": (1, 2**16), "shared_memory_per_sm_bytes": (1, 2**40),
    "shared_memory_per_block_bytes": (1, 2**40),
}

KINDS = ("cpu", "gpu", "npu")
ARCHITECTURES = ("combined", "separated")
DTYPES = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class Core:
    name: str
    count: int
    hz: float | None = None     # None: runs at the board's [clock].hz


@dataclass(frozen=True)
class Unit:
    name: str
    core: str
    per_core: int
    flops_per_cycle: dict[str, float]   # per unit instance, per dtype (a MAC counts 2)

    def peak_flops(self, dtype: str, clock_hz: float, cores: int) -> float:
        return self.flops_per_cycle.get(dtype, 0.0) * self.per_core * cores * clock_hz


@dataclass(frozen=True)
class Memory:
    name: str
    size_bytes: int
    scope: str              # "chip" or the name of the core type that has one each
    offchip: bool
    alignment_bytes: int


@dataclass(frozen=True)
class Path:
    src: str
    dst: str
    engine: str
    bandwidth_bytes_per_s: float
    setup_latency_s: float
    burst_bytes: int
    shared: bool


@dataclass(frozen=True)
class GpuLimits:
    warp_size: int
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    shared_memory_per_sm_bytes: int
    shared_memory_per_block_bytes: int
    host_device_bandwidth_bytes_per_s: float


@dataclass(frozen=True)
class Peer:
    gemm_efficiency: float
    stream_efficiency: float
    op_overhead_s: float


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    kind: str
    targets: tuple[str, ...]
    isa: tuple[str, ...]
    architecture: str | None
    clock_hz: float
    launch_overhead_s: float
    cores: tuple[Core, ...]
    units: tuple[Unit, ...]
    memories: tuple[Memory, ...]
    paths: tuple[Path, ...]
    gpu: GpuLimits | None
    peer: Peer | None
    sources: dict[str, str] = field(compare=False)
    path_on_disk: str = field(default="", compare=False)
    file_sha256: str = field(default="", compare=False)

    # ---- lookups used by the simulator --------------------------------------------------
    @property
    def target(self) -> str:
        return self.targets[0]

    def core(self, name: str) -> Core:
        for c in self.cores:
            if c.name == name:
                return c
        raise BoardError(f"board {self.name!r} has no core type {name!r}; "
                         f"has: {[c.name for c in self.cores]}")

    def unit(self, name: str) -> Unit:
        for u in self.units:
            if u.name == name:
                return u
        raise BoardError(f"board {self.name!r} has no compute unit {name!r}; "
                         f"has: {[u.name for u in self.units]}")

    def memory(self, name: str) -> Memory:
        for m in self.memories:
            if m.name == name:
                return m
        raise BoardError(f"board {self.name!r} has no memory level {name!r}; "
                         f"has: {[m.name for m in self.memories]}")

    def path(self, src: str, dst: str) -> Path:
        for p in self.paths:
            if p.src == src and p.dst == dst:
                return p
        raise BoardError(f"board {self.name!r} has no data path {src}->{dst}; "
                         f"has: {[f'{p.src}->{p.dst}' for p in self.paths]}")

    def core_hz(self, name: str) -> float:
        """Clock of one core type: its own ``hz`` where the file gives one, else [clock].hz."""
        hz = self.core(name).hz
        return self.clock_hz if hz is None else hz

    @property
    def offchip(self) -> Memory:
        return next(m for m in self.memories if m.offchip)

    def peak_flops(self, dtype: str = "fp32", unit: str | None = None) -> float:
        units = [self.unit(unit)] if unit else self.units
        return sum(u.peak_flops(dtype, self.core_hz(u.core), self.core(u.core).count) for u in units)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path_on_disk")
        d["file"] = self.path_on_disk
        return d


# ------------------------------------------------------------------------------------------
# parsing

_TOP = {"schema", "name", "description", "kind", "targets", "isa", "architecture", "clock", "launch",
        "core", "unit", "memory", "path", "gpu", "peer"}


class _Ctx:
    def __init__(self, file: str, resolve):
        self.file = file
        self.resolve = resolve      # callable(key, value) -> (value, source) for detect/measure
        self.sources: dict[str, str] = {}

    def err(self, key: str, msg: str) -> BoardError:
        return BoardError(f"board file {self.file}: {key}: {msg}")

    def detected(self, key: str, val):
        """``val`` itself, or what the resolver gives for a ``"detect"``/``"measure"`` placeholder."""
        if not (isinstance(val, str) and val in ("detect", "measure")):
            return val, None
        try:
            return self.resolve(key, val)
        except KeyError as e:
            raise self.err(key, f"{val!r}: {e.args[0] if e.args else 'cannot be resolved'}") from None


def _table(ctx: _Ctx, where: str, tbl: Any, fields: dict[str, type], figures: set[str]) -> dict:
    """Check keys and types of one table; figures need a source. Returns plain values."""
    if not isinstance(tbl, dict):
        raise ctx.err(where, f"must be a table, got {type(tbl).__name__}")
    allowed = set(fields) | ({"source"} if figures else set())
    unknown = set(tbl) - allowed
    if unknown:
        raise ctx.err(where, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    missing = set(fields) - set(tbl)
    if missing:
        raise ctx.err(where, f"missing key(s) {sorted(missing)}")
    src = tbl.get("source")
    if figures:
        if src is None:
            raise ctx.err(where, "figures need a 'source' (a citation string, or a table naming "
                                 "the source of each figure)")
        if isinstance(src, dict):
            extra = set(src) - figures
            if extra:
                raise ctx.err(f"{where}.source", f"names unknown figure(s) {sorted(extra)}")
        elif not (isinstance(src, str) and src.strip()):
            raise ctx.err(f"{where}.source", "must be a non-empty string or a table")
    out = {}
    for key, typ in fields.items():
        val = tbl[key]
        fsrc = (src.get(key) if isinstance(src, dict) else src) if figures else None
        if key in figures and isinstance(val, str) and val in ("detect", "measure"):
            val, fsrc = ctx.detected(f"{where}.{key}", val)
        if key in figures and not fsrc:
            raise ctx.err(f"{where}.{key}", "figure has no source")
        val = _check_type(ctx, f"{where}.{key}", val, typ)
        if key in PLAUSIBLE:
            for k, v in (val.items() if isinstance(val, dict) else [(None, val)]):
                _plausible(ctx, f"{where}.{key}" + (f".{k}" if k else ""), v, PLAUSIBLE[key])
        if key in figures:
            ctx.sources[f"{where}.{key}"] = fsrc
        out[key] = val
    return out


def _plausible(ctx, key, val, bounds) -> None:
    lo, hi = bounds
    if not lo <= val <= hi:
        raise ctx.err(key, f"{val!r} is not a plausible figure (expected {lo:g} to {hi:g}); "
                           f"check the value and its unit")


def _check_type(ctx, key, val, typ):
    if typ is float:
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise ctx.err(key, f"must be a number, got {val!r}")
        if not math.isfinite(val):
            raise ctx.err(key, f"must be a finite number, got {val!r}")
        if val < 0:
            raise ctx.err(key, f"must be >= 0, got {val!r}")
        return float(val)
    if typ is int:
        if isinstance(val, bool) or not isinstance(val, int):
            raise ctx.err(key, f"must be an integer, got {val!r}")
        if val < 0:
            raise ctx.err(key, f"must be >= 0, got {val!r}")
        return val
    if typ is bool:
        if not isinstance(val, bool):
            raise ctx.err(key, f"must be true or false, got {val!r}")
        return val
    if typ is str:
        if not isinstance(val, str) or not val:
            raise ctx.err(key, f"must be a non-empty string, got {val!r}")
        return val
    if typ is list:
        if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
            raise ctx.err(key, f"must be a list of strings, got {val!r}")
        return tuple(val)
    if typ is dict:
        if not isinstance(val, dict) or not val:
            raise ctx.err(key, f"must be a non-empty table, got {val!r}")
        bad = set(val) - set(DTYPES)
        if bad:
            raise ctx.err(key, f"unknown dtype(s) {sorted(bad)}; allowed {list(DTYPES)}")
        return {k: _check_type(ctx, f"{key}.{k}", v, float) for k, v in val.items()}
    raise AssertionError(typ)


def _array(ctx, doc, key) -> list:
    val = doc.get(key)
    if not isinstance(val, list) or not val:
        raise ctx.err(key, f"needs at least one [[{key}]] entry")
    return val


def parse_board(doc: dict, file: str, resolve=None, expected_name: str | None = None) -> Board:
    def no_resolve(key, val):
        raise ctx.err(key, f"{val!r} is only allowed in host.toml; give the figure and its source")
    ctx = _Ctx(file, resolve or no_resolve)
    unknown = set(doc) - _TOP
    if unknown:
        raise ctx.err("(top level)", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_TOP)}")
    if doc.get("schema") != 1 or isinstance(doc.get("schema"), bool):   # true == 1 in Python
        raise ctx.err("schema", f"must be 1, got {doc.get('schema')!r}")
    head = {k: doc.get(k) for k in ("name", "description", "kind")}
    for k, v in head.items():
        _check_type(ctx, k, v, str)
    name, kind = head["name"], head["kind"]
    if expected_name is not None and name != expected_name:
        raise ctx.err("name", f"is {name!r} but the file is named {expected_name!r}.toml")
    if kind not in KINDS:
        raise ctx.err("kind", f"must be one of {list(KINDS)}, got {kind!r}")
    targets = _check_type(ctx, "targets", doc.get("targets"), list)
    from edgeops.registry import KNOWN_TARGETS
    for t in targets:
        if t not in KNOWN_TARGETS:
            raise ctx.err("targets", f"unknown target {t!r}; known: {list(KNOWN_TARGETS)}")
    doc = dict(doc)
    for key in ("isa", "memory", "path"):     # whole arrays: host.toml only (see docstring)
        if key in doc:
            doc[key] = ctx.detected(key, doc[key])[0]
    isa = _check_type(ctx, "isa", doc.get("isa", []), list)
    arch = doc.get("architecture")
    if kind == "npu":
        if arch not in ARCHITECTURES:
            raise ctx.err("architecture", f"an npu board must say one of {list(ARCHITECTURES)}")
    elif arch is not None:
        raise ctx.err("architecture", "only npu boards have a core architecture")

    clock = _table(ctx, "clock", doc.get("clock"), {"hz": float}, {"hz"})
    launch = _table(ctx, "launch", doc.get("launch"), {"overhead_s": float}, {"overhead_s"})
    cores = []
    for i, c in enumerate(_array(ctx, doc, "core")):
        fields, figs = {"name": str, "count": int}, {"count"}
        if isinstance(c, dict) and "hz" in c:     # optional: a clock of its own
            fields["hz"], figs = float, figs | {"hz"}
        cores.append(Core(**_table(ctx, f"core[{i}]", c, fields, figs)))
    cores = tuple(cores)
    core_names = [c.name for c in cores]
    units = []
    for i, u in enumerate(_array(ctx, doc, "unit")):
        t = _table(ctx, f"unit[{i}]", u, {"name": str, "core": str, "per_core": int,
                                           "flops_per_cycle": dict}, {"per_core", "flops_per_cycle"})
        if t["core"] not in core_names:
            raise ctx.err(f"unit[{i}].core", f"{t['core']!r} is not a declared core {core_names}")
        units.append(Unit(**t))
    mems = []
    for i, m in enumerate(_array(ctx, doc, "memory")):
        t = _table(ctx, f"memory[{i}]", m, {"name": str, "size_bytes": int, "scope": str,
                                             "offchip": bool, "alignment_bytes": int},
                   {"size_bytes", "alignment_bytes"})
        if t["scope"] != "chip" and t["scope"] not in core_names:
            raise ctx.err(f"memory[{i}].scope", f"{t['scope']!r} must be 'chip' or a core {core_names}")
        if t["alignment_bytes"] < 1:
            raise ctx.err(f"memory[{i}].alignment_bytes", "must be >= 1")
        mems.append(Memory(**t))
    names = [m.name for m in mems]
    if len(set(names)) != len(names):
        raise ctx.err("memory", f"duplicate level names {names}")
    if sum(m.offchip for m in mems) != 1:
        raise ctx.err("memory", "exactly one level must be offchip = true")
    paths = []
    for i, p in enumerate(_array(ctx, doc, "path")):
        t = _table(ctx, f"path[{i}]", p, {"src": str, "dst": str, "engine": str,
                                           "bandwidth_bytes_per_s": float, "setup_latency_s": float,
                                           "burst_bytes": int, "shared": bool},
                   {"bandwidth_bytes_per_s", "setup_latency_s", "burst_bytes"})
        for end in ("src", "dst"):
            if t[end] not in names:
                raise ctx.err(f"path[{i}].{end}", f"{t[end]!r} is not a memory level {names}")
        paths.append(Path(**t))
    gpu = None
    if kind == "gpu":
        gfields = {f: (float if f.endswith("_per_s") else int) for f in GpuLimits.__dataclass_fields__}
        gpu = GpuLimits(**_table(ctx, "gpu", doc.get("gpu"), gfields, set(gfields)))
    elif "gpu" in doc:
        raise ctx.err("gpu", "only gpu boards have a [gpu] table")
    peer = None
    if kind in ("cpu", "gpu"):
        pfields = {f: float for f in Peer.__dataclass_fields__}
        peer = Peer(**_table(ctx, "peer", doc.get("peer"), pfields, set(pfields)))
    elif "peer" in doc:
        raise ctx.err("peer", "npu boards have no ONNX Runtime peer model")
    return Board(name=name, description=head["description"], kind=kind, targets=targets, isa=isa,
                 architecture=arch, clock_hz=clock["hz"], launch_overhead_s=launch["overhead_s"],
                 cores=cores, units=tuple(units), memories=tuple(mems), paths=tuple(paths), gpu=gpu,
                 peer=peer, sources=dict(ctx.sources), path_on_disk=file)


def file_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
