"""The ``Tiling`` value: how an iteration space is cut for each memory level of a board.

A tiling is frozen and hashable; the same object drives the simulator's prediction, the Ascend
emulator's DMA program and the tile sizes of the Numba/CUDA kernels. Per level (outermost
on-chip level first) it gives the tile size of every loop dim, the loop order over those tiles
(outermost first), the buffer count of every operand the level holds (1 single, 2 double
buffered) and which memory holds which operand; ``split`` cuts level-0 loops across cores.

JSON form (``to_json``/``from_json``), version :data:`TILING_VERSION`::

    {"version": 1, "op": "gemm", "decomposition": "gemm", "target": "ascend",
     "levels": [{"name": "l1", "tile": {"m": 256, "n": 256, "k": 128}, "order": ["m", "n", "k"],
                 "buffers": {"A": 2, "B": 2}, "holds": {"A": "l1", "B": "l1"}}, ...],
     "split": {"m": 24}}
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from edgeops.errors import TilingError

TILING_VERSION = 1


@dataclass(frozen=True)
class LevelTiling:
    name: str
    tile: tuple[tuple[str, int], ...]        # (dim, size) in the level's dim order
    order: tuple[str, ...]                   # loop order, outermost first
    buffers: tuple[tuple[str, int], ...]     # (role, 1 or 2)
    holds: tuple[tuple[str, str], ...]       # (role, memory)

    def size(self, dim: str) -> int:
        return dict(self.tile)[dim]

    def bufs(self, role: str) -> int:
        return dict(self.buffers).get(role, 1)

    def to_dict(self) -> dict:
        return {"name": self.name, "tile": dict(self.tile), "order": list(self.order),
                "buffers": dict(self.buffers), "holds": dict(self.holds)}


@dataclass(frozen=True)
class Tiling:
    op: str                                  # space kind: gemm, conv2d, softmax, ...
    decomposition: str
    target: str
    levels: tuple[LevelTiling, ...]
    split: tuple[tuple[str, int], ...] = ()  # (level-0 dim, cores along it)
    version: int = TILING_VERSION

    def level(self, name: str) -> LevelTiling:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise TilingError(f"tiling has no level {name!r}; levels: {[lv.name for lv in self.levels]}")

    def tile(self, level: str, dim: str) -> int:
        return self.level(level).size(dim)

    @property
    def cores(self) -> int:
        n = 1
        for _, p in self.split:
            n *= p
        return n

    def describe(self) -> str:
        """One line: ``l1 m256 n256 k128 [m,n,k] x2 | l0 ... | split m:24``."""
        parts = []
        for lv in self.levels:
            t = " ".join(f"{d}{s}" for d, s in lv.tile)
            b = max((n for _, n in lv.buffers), default=1)
            parts.append(f"{lv.name} {t} [{','.join(lv.order)}]" + (" x2" if b > 1 else ""))
        if self.split:
            parts.append("split " + " ".join(f"{d}:{p}" for d, p in self.split))
        return " | ".join(parts)

    def to_dict(self) -> dict:
        return {"version": self.version, "op": self.op, "decomposition": self.decomposition,
                "target": self.target, "levels": [lv.to_dict() for lv in self.levels],
                "split": dict(self.split)}

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d) -> "Tiling":
        """Parse and type-check (TilingError naming the field); fit to an op: ``legality.fit``."""
        if not isinstance(d, dict):
            raise TilingError(f"a tiling must be a JSON object, got {type(d).__name__}")
        allowed = {"version", "op", "decomposition", "target", "levels", "split"}
        extra = set(d) - allowed
        if extra:
            raise TilingError(f"tiling: unknown field(s) {sorted(extra)}; allowed: {sorted(allowed)}")
        for key in ("version", "op", "decomposition", "target", "levels"):
            if key not in d:
                raise TilingError(f"tiling: missing field {key!r}")
        ver = d["version"]
        if not isinstance(ver, int) or isinstance(ver, bool) or ver < 1:
            raise TilingError(f"tiling.version must be a positive integer, got {ver!r}")
        if ver > TILING_VERSION:
            raise TilingError(f"tiling.version {ver} is newer than this edgeops understands "
                              f"({TILING_VERSION}); upgrade edgeops or re-tune")
        for key in ("op", "decomposition", "target"):
            if not isinstance(d[key], str) or not d[key]:
                raise TilingError(f"tiling.{key} must be a non-empty string, got {d[key]!r}")
        if not isinstance(d["levels"], list) or not d["levels"]:
            raise TilingError("tiling.levels must be a non-empty list")
        levels = tuple(_level(i, lv) for i, lv in enumerate(d["levels"]))
        split = _int_map("tiling.split", d.get("split") or {}, lo=1)
        return cls(d["op"], d["decomposition"], d["target"], levels, tuple(split.items()), ver)

    @classmethod
    def from_json(cls, text: str) -> "Tiling":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise TilingError(f"tiling file is not valid JSON: {e}") from None
        return cls.from_dict(d)


def _int_map(where: str, m, lo: int, hi: int | None = None) -> dict[str, int]:
    if not isinstance(m, dict):
        raise TilingError(f"{where} must be an object of name -> integer, got {m!r}")
    out = {}
    for k, v in m.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise TilingError(f"{where}.{k} must be an integer {rng}, got {v!r}")
        out[str(k)] = v
    return out


def _level(i: int, lv) -> LevelTiling:
    where = f"tiling.levels[{i}]"
    if not isinstance(lv, dict):
        raise TilingError(f"{where} must be an object")
    allowed = {"name", "tile", "order", "buffers", "holds"}
    extra = set(lv) - allowed
    if extra:
        raise TilingError(f"{where}: unknown field(s) {sorted(extra)}; allowed: {sorted(allowed)}")
    for key in ("name", "tile", "order"):
        if key not in lv:
            raise TilingError(f"{where}: missing field {key!r}")
    if not isinstance(lv["name"], str):
        raise TilingError(f"{where}.name must be a string")
    tile = _int_map(f"{where}.tile", lv["tile"], lo=1)
    order = lv["order"]
    if not isinstance(order, list) or not all(isinstance(x, str) for x in order):
        raise TilingError(f"{where}.order must be a list of dim names")
    if sorted(order) != sorted(tile):
        raise TilingError(f"{where}.order {order} must list each tiled dim {sorted(tile)} once")
    bufs = _int_map(f"{where}.buffers", lv.get("buffers") or {}, lo=1, hi=2)
    holds = lv.get("holds") or {}
    if not isinstance(holds, dict) or not all(isinstance(v, str) for v in holds.values()):
        raise TilingError(f"{where}.holds must map operand roles to memory names")
    return LevelTiling(lv["name"], tuple(tile.items()), tuple(order), tuple(sorted(bufs.items())),
                       tuple(sorted(holds.items())))
