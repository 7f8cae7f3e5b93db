"""Sweeps: many (op or model, board, tiling) points, on a local process pool or a Dask cluster.

A point is a dict::

    {"op": "gemm:M=512,N=512,K=512,dtype=fp16", "board": "ascend-910b", "tiling": "auto"}
    {"model": "sample", "board": "rk3588", "tiling": "naive"}

with optional ``objective`` (latency | traffic), ``target``, ``decomposition`` (op points),
``budget`` and ``label``; ``tiling`` is ``auto`` (default), ``naive`` or a tiling dict. A sweep
file is a JSON list of points, ``{"points": [...]}``, and/or a ``"grid"`` whose lists multiply
out: ``{"grid": {"ops": [...], "models": [...], "boards": [...], "tilings": ["auto", "naive"]}}``.

``sweep(points)`` runs :func:`run_point` on each, in a ``ProcessPoolExecutor`` (spawn context, so
it behaves the same on every OS) or, with ``scheduler`` (an address such as
``tcp://10.0.0.5:8786``, a ``distributed.Client`` or a cluster object), on Dask distributed
(the ``dist`` extra; imported only then). Results come back in the order of the points and hold
no timings, so the same sweep gives the same results on either backend. A point that fails with
a user error gives ``{"error": ...}`` instead of stopping the sweep.
"""
from __future__ import annotations

import functools
import itertools
import json
import math
import os
import time
from dataclasses import dataclass, field

from edgeops.errors import EdgeOpsError

POINT_KEYS = {"op", "model", "board", "tiling", "objective", "target", "decomposition", "budget",
              "label"}
GRID_KEYS = {"ops": "op", "models": "model", "boards": "board", "tilings": "tiling",
             "objectives": "objective", "decompositions": "decomposition"}


MAX_POINTS = 200_000        # points of one sweep (each is a dict in memory, then a result)
MAX_BUDGET = 100_000_000    # a point's search budget (as the CLI's --budget)
OPTIONAL_NONE = {"target", "decomposition", "label"}


def expand(doc) -> list[dict]:
    """The points of a sweep document (see the module docstring), checked."""
    if isinstance(doc, list):
        doc = {"points": doc}
    if not isinstance(doc, dict) or not (set(doc) & {"points", "grid"}):
        raise EdgeOpsError('a sweep is a JSON list of points or an object with "points" and/or "grid"')
    extra = set(doc) - {"points", "grid", "defaults"}
    if extra:
        raise EdgeOpsError(f"sweep: unknown key(s) {sorted(extra)}; allowed: points, grid, defaults")
    base = doc.get("defaults") or {}
    points = [dict(base, **p) if isinstance(p, dict) else p for p in doc.get("points") or []]
    grid = doc.get("grid")
    if grid is not None:
        if not isinstance(grid, dict):
            raise EdgeOpsError('sweep: "grid" must be an object of lists, e.g. {"ops": [...], "boards": [...]}')
        bad = set(grid) - set(GRID_KEYS)
        if bad:
            raise EdgeOpsError(f"sweep grid: unknown key(s) {sorted(bad)}; allowed: {sorted(GRID_KEYS)}")
        for k in ("ops", "models"):
            if not isinstance(grid.get(k, []), list):
                raise EdgeOpsError(f"sweep grid: {k} must be a list, got {grid[k]!r:.60}")
        subjects = [("op", o) for o in grid.get("ops", [])] + [("model", m) for m in grid.get("models", [])]
        axes = [(GRID_KEYS[k], v) for k, v in grid.items() if k not in ("ops", "models")]
        for key, vals in axes:
            if not isinstance(vals, list) or not vals:
                raise EdgeOpsError(f"sweep grid: {key}s must be a non-empty list")
        n = len(subjects) * math.prod(len(v) for _, v in axes) + len(points)
        if n > MAX_POINTS:      # counted before expanding: a 70M-point grid is gigabytes of dicts
            raise EdgeOpsError(f"sweep grid: {n:,} points, above the {MAX_POINTS:,} one sweep "
                               f"runs; split it into several sweep files")
        for subj, combo in itertools.product(subjects, itertools.product(*[v for _, v in axes])):
            p = dict(base)
            p[subj[0]] = subj[1]
            p.update({k: v for (k, _), v in zip(axes, combo)})
            points.append(p)
    for i, p in enumerate(points):
        check_point(p, i)
    if not points:
        raise EdgeOpsError("the sweep has no points")
    return points


def check_point(p, i: int = 0) -> None:
    if not isinstance(p, dict):
        raise EdgeOpsError(f"sweep point {i} must be an object, got {p!r}")
    bad = set(p) - POINT_KEYS
    if bad:
        raise EdgeOpsError(f"sweep point {i}: unknown key(s) {sorted(bad)}; allowed: {sorted(POINT_KEYS)}")
    if ("op" in p) == ("model" in p):
        raise EdgeOpsError(f"sweep point {i}: give exactly one of \"op\" and \"model\"")
    if "board" not in p:
        raise EdgeOpsError(f"sweep point {i}: missing \"board\"")
    for k in ("op", "model", "board", "target", "decomposition", "label"):
        if k in p and not (isinstance(p[k], str) or p[k] is None and k in OPTIONAL_NONE):
            raise EdgeOpsError(f"sweep point {i}: {k} must be a string, got {p[k]!r:.60}")
    t = p.get("tiling", "auto")
    if not (t in ("auto", "naive") or isinstance(t, dict)):
        raise EdgeOpsError(f"sweep point {i}: tiling must be \"auto\", \"naive\" or a tiling "
                           f"object, got {t!r:.60}")
    if p.get("objective", "latency") not in ("latency", "traffic"):
        raise EdgeOpsError(f"sweep point {i}: objective must be latency or traffic, got "
                           f"{p['objective']!r:.60}")
    b = p.get("budget", 1)
    if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_BUDGET:
        raise EdgeOpsError(f"sweep point {i}: budget must be an integer from 1 to "
                           f"{MAX_BUDGET:,}, got {b!r:.60}")


def load(path) -> list[dict]:
    try:
        with open(path) as f:
            return expand(json.load(f))
    except OSError as e:
        raise EdgeOpsError(f"cannot read the sweep file {os.fspath(path)!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise EdgeOpsError(f"sweep file {os.fspath(path)!r} is not valid JSON: {e}") from None


def run_point(point: dict, load_model=None) -> dict:
    """Simulate one point; deterministic (no timings), JSON-able. ``load_model(name)``: what a
    point's ``"model"`` names (default: a path; the CLI also takes ``"sample"``)."""
    from edgeops.tiling.graphsim import simulate_model, simulate_op
    out = {k: point[k] for k in ("label", "op", "model", "board") if k in point}
    tiling = point.get("tiling", "auto")
    out["tiling_mode"] = tiling if isinstance(tiling, str) else "given"
    kw = dict(tiling=tiling, target=point.get("target"), objective=point.get("objective", "latency"),
              budget=int(point.get("budget", 250_000)), peer=False)
    try:
        if "op" in point:
            d = simulate_op(point["op"], point["board"], decomposition=point.get("decomposition"),
                            **kw).to_dict()
            r = d["nodes"][0]
            out.update({"decomposition": r["decomposition"], "tiling": r["tiling"],
                        "offchip_bytes": r["offchip_bytes"], "latency_s": r["latency_s"],
                        "bound": r["bound"], "flops": r["flops"], "launches": r["launches"],
                        "busy_s": r["busy_s"], "compulsory_bytes": d["compulsory_bytes"]})
            if d.get("candidates_evaluated") is not None:
                out["candidates_evaluated"] = d["candidates_evaluated"]
                out["lower_bound_bytes"] = d.get("lower_bound_bytes")
        else:
            model = point["model"] if load_model is None else load_model(point["model"])
            d = simulate_model(model, point["board"], cache=False, **kw).to_dict()
            out.update({k: d[k] for k in ("total_latency_s", "offchip_bytes", "launches",
                                          "peak_memory_bytes", "arena_bytes", "flops", "counts")})
            out["nodes"] = len(d["nodes"])
    except EdgeOpsError as e:
        out["error"] = " ".join(str(e).split())
    return out


@dataclass
class SweepResult:
    results: list[dict]
    backend: str                    # "process-pool (N workers)" | "dask (address)" | "serial"
    seconds: float
    points: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"backend": self.backend, "seconds": self.seconds, "points": len(self.results),
                "errors": sum(1 for r in self.results if "error" in r), "results": self.results}


def sweep(points, *, workers: int | None = None, scheduler=None, progress=None,
          load_model=None) -> SweepResult:
    """Run ``points`` (a list of point dicts or a sweep document). ``workers``: processes of the
    local pool (default: CPU count; 0 runs in this process). ``scheduler``: run on Dask instead.
    ``progress(done, total)`` as points finish. ``load_model``: see :func:`run_point` (a
    module-level function: it travels to the workers by name)."""
    points = expand(points)
    one = functools.partial(run_point, load_model=load_model)
    t0 = time.perf_counter()
    if scheduler is not None:
        results, backend = _dask(points, one, scheduler, progress)
    elif workers == 0:
        results = []
        for i, p in enumerate(points):
            results.append(one(p))
            if progress:
                progress(i + 1, len(points))
        backend = "serial"
    else:
        n = max(1, min(workers or os.cpu_count() or 1, len(points)))
        results = _pool(points, one, n, progress)
        backend = f"process-pool ({n} workers)"
    return SweepResult(results, backend, time.perf_counter() - t0, points)


def _pool(points, one, workers, progress) -> list[dict]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    out: list = [None] * len(points)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        futs = {ex.submit(one, p): i for i, p in enumerate(points)}
        for done, f in enumerate(as_completed(futs), 1):
            out[futs[f]] = f.result()
            if progress:
                progress(done, len(points))
    return out


def _dask(points, one, scheduler, progress) -> tuple[list[dict], str]:
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise EdgeOpsError("--scheduler runs the sweep on Dask distributed, which is not installed: "
                           "pip install 'edgeops[dist]'") from None
    own = False
    if isinstance(scheduler, Client):
        client = scheduler
    elif isinstance(scheduler, str):
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as e:
            raise EdgeOpsError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
        own = True
    else:                      # a cluster object (LocalCluster, SSHCluster, ...)
        client = Client(scheduler)
        own = True
    try:
        futs = client.map(one, points, pure=False)
        index = {f.key: i for i, f in enumerate(futs)}
        out: list = [None] * len(points)
        for done, f in enumerate(as_completed(futs), 1):
            out[index[f.key]] = f.result()
            if progress:
                progress(done, len(points))
        addr = getattr(client.scheduler, "address", None) or str(scheduler)
        return out, f"dask ({addr})"
    finally:
        if own:
            client.close()
