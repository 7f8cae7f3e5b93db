"""Persistent tuning cache and whole-model planning, node by node.

The cache is one SQLite file, ``$EDGEOPS_CACHE_DIR/tuning/tuning.sqlite`` (default
``~/.cache/edgeops/tuning/tuning.sqlite``). Its key is (board file sha256, target, op signature,
objective, :data:`COST_MODEL_VERSION`): a release that keeps the cost model keeps the cache, a
changed board file (or a changed model) misses and is re-tuned. Values are JSON: the tiling's
versioned JSON form, its prediction and the search statistics.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgeops import cache as edgeops_cache
from edgeops.simulator.evaluate import Prediction
from edgeops.tiling.api import Evaluated, as_space
from edgeops.tiling.tiling import Tiling

# Bump whenever a change to edgeops.simulator or the search changes what a tiling predicts.
COST_MODEL_VERSION = "6"


def cache_dir() -> Path:
    return edgeops_cache.root() / "tuning"


def board_hash(board) -> str:
    if getattr(board, "file_sha256", ""):
        return board.file_sha256
    return hashlib.sha256(json.dumps(board.to_dict(), sort_keys=True, default=str).encode()).hexdigest()


class TuningCache:
    """``get``/``put`` search results by (board, target, op signature, objective, model version)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else cache_dir() / "tuning.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS tuning (key TEXT PRIMARY KEY, board TEXT, "
                       "signature TEXT, value TEXT, created REAL)")

    def _db(self):
        return sqlite3.connect(self.path, timeout=30)

    @staticmethod
    def key(board, signature: str, objective: str, target: str | None = None) -> str:
        parts = [board_hash(board), target or board.target, signature, objective, COST_MODEL_VERSION]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()

    def get(self, board, signature: str, objective: str = "latency", target: str | None = None):
        with self._db() as db:
            row = db.execute("SELECT value FROM tuning WHERE key = ?",
                             (self.key(board, signature, objective, target),)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, board, signature: str, value: dict, objective: str = "latency",
            target: str | None = None) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO tuning VALUES (?, ?, ?, ?, ?)",
                       (self.key(board, signature, objective, target), board.name, signature,
                        json.dumps(value), time.time()))

    def __len__(self) -> int:
        with self._db() as db:
            return db.execute("SELECT COUNT(*) FROM tuning").fetchone()[0]


def tune(op, board, *, objective: str = "latency", cache: TuningCache | bool | None = True,
         target: str | None = None, budget: int = 250_000, progress=None) -> tuple[dict, bool]:
    """Best tiling of one op, from the cache when present. Returns (entry, cached)."""
    from edgeops import boards
    from edgeops.tiling.search import search
    board = boards.load(board)
    sp = as_space(op)
    if cache is True:
        cache = TuningCache()
    cache = cache or None if not isinstance(cache, TuningCache) else cache   # an empty cache is falsy
    if cache is not None:
        hit = cache.get(board, sp.signature, objective, target)
        if hit is not None:
            return hit, True
    r = search(sp, board, objective=objective, target=target, budget=budget, progress=progress)
    entry = {"decomposition": r.decomposition, "tiling": r.best.tiling.to_dict(),
             "prediction": r.best.prediction.to_dict(), "compulsory_bytes": r.compulsory_bytes,
             "lower_bound_bytes": r.lower_bound_bytes, "candidates_evaluated": r.candidates_evaluated,
             "seconds": r.seconds}
    if cache is not None:
        cache.put(board, sp.signature, entry, objective, target)
    return entry, False


@dataclass
class NodePlan:
    node: str
    op_type: str
    signature: str | None
    reason: str = ""                  # why there is no tiling (signature None)
    decomposition: str | None = None
    tiling: Tiling | None = None
    prediction: Prediction | None = None
    cached: bool = False

    def to_dict(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "signature": self.signature,
                "reason": self.reason, "decomposition": self.decomposition,
                "tiling": self.tiling.to_dict() if self.tiling else None,
                "prediction": self.prediction.to_dict() if self.prediction else None,
                "cached": self.cached}


@dataclass
class Plan:
    board: str
    nodes: list[NodePlan] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total_latency_s(self) -> float:
        """Sum of per-node latencies (no fusion or overlap: the graph simulation refines it)."""
        return sum(n.prediction.latency_s for n in self.nodes if n.prediction)

    def to_dict(self) -> dict:
        return {"board": self.board, "seconds": self.seconds,
                "total_latency_s": self.total_latency_s, "nodes": [n.to_dict() for n in self.nodes]}


def plan_graph(graph, board, *, objective: str = "latency", cache: TuningCache | bool | None = True,
               target: str | None = None, budget: int = 250_000, progress=None) -> Plan:
    """Tune every node of ``graph`` that has an iteration space, one search per distinct op
    signature. ``progress(done, total, node_name)`` after each node."""
    from edgeops.tiling.from_node import space_from_node
    items = []
    for n in graph.nodes:
        sp = space_from_node(n)
        items.append((n.name, n.op_type, "!" + sp if isinstance(sp, str) else sp))
    return plan_ops(items, board, objective=objective, cache=cache, target=target, budget=budget,
                    progress=progress)


def plan_ops(items, board, *, objective: str = "latency", cache: TuningCache | bool | None = True,
             target: str | None = None, budget: int = 250_000, progress=None) -> Plan:
    """Plan a list of ops: ``items`` are (name, op_type, Space or spec string, or '!' + the reason
    the op has no iteration space)."""
    from edgeops import boards
    t0 = time.perf_counter()
    board = boards.load(board)
    if cache is True:
        cache = TuningCache()
    plan = Plan(board.name)
    seen: dict[str, tuple[dict, bool]] = {}
    for i, (name, op_type, sp) in enumerate(items):
        if isinstance(sp, str) and sp.startswith("!"):
            plan.nodes.append(NodePlan(name, op_type, None, sp.lstrip("!")))
        else:
            sp = as_space(sp)
            sig = sp.signature
            if sig not in seen:
                seen[sig] = tune(sp, board, objective=objective, cache=cache, target=target,
                                 budget=budget)
            entry, cached = seen[sig]
            plan.nodes.append(NodePlan(name, op_type, sig, "", entry["decomposition"],
                                       Tiling.from_dict(entry["tiling"]),
                                       Prediction.from_dict(entry["prediction"]), cached))
        if progress is not None:
            progress(i + 1, len(items), name)
    plan.seconds = time.perf_counter() - t0
    return plan


def evaluated(entry: dict) -> Evaluated:
    return Evaluated(Tiling.from_dict(entry["tiling"]), Prediction.from_dict(entry["prediction"]))
