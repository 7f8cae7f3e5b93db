"""Search for the best tiling of an operator on a board, and an exhaustive evaluator.

``search(op, board)`` enumerates legal tilings as arrays, evaluates them vectorised with the
simulator, and builds ``Tiling`` objects only for the few it returns: the best, the top-k and the
Pareto front of off-chip traffic vs latency. When the whole space fits the budget it is
evaluated in one go; otherwise level by level (a beam): level 0 with default inner tiles, then
each inner level below the best configs kept so far. With no ``decomposition`` every one the op
has is searched and the best is chosen (the chooser: decomposition first, then tiling).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from edgeops.errors import TilingError
from edgeops.tiling.api import Evaluated, as_space, hardware
from edgeops.tiling.bounds import compulsory_bytes, lower_bound_bytes
from edgeops.tiling.enumerate import Config, configs_of, defaults, expand, level_values
from edgeops.tiling.batch import nest_plans, take, tiling_from_batch
from edgeops.tiling.model import evaluate, prediction
from edgeops.tiling.problem import Problem, problems

OBJECTIVES = ("latency", "traffic")


@dataclass
class SearchResult:
    op: str
    board: str
    decomposition: str
    objective: str
    best: Evaluated
    top: list[Evaluated]
    pareto: list[Evaluated]
    candidates_evaluated: int
    seconds: float
    compulsory_bytes: int
    lower_bound_bytes: int
    alternatives: dict = field(default_factory=dict)   # decomposition -> best objective value

    @property
    def ratio_to_bound(self) -> float | None:
        lb = self.lower_bound_bytes
        return self.best.prediction.offchip_bytes / lb if lb else None

    def to_dict(self) -> dict:
        b = self.best.prediction
        return {
            "op": self.op, "board": self.board, "decomposition": self.decomposition,
            "objective": self.objective,
            "best": {"tiling": self.best.tiling.to_dict(), "offchip_bytes": b.offchip_bytes,
                     "latency_s": b.latency_s, "bound": b.bound, "bytes": b.bytes,
                     "cycles": b.cycles, "utilisation": b.utilisation, "flops": b.flops},
            "top": [e.to_dict() for e in self.top],
            "pareto": [{"tiling": e.tiling.to_dict(), "offchip_bytes": e.prediction.offchip_bytes,
                        "latency_s": e.prediction.latency_s} for e in self.pareto],
            "compulsory_bytes": self.compulsory_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "ratio_to_bound": self.ratio_to_bound,
            "candidates_evaluated": self.candidates_evaluated,
            "seconds": self.seconds,
            "alternatives": self.alternatives,
        }


@dataclass
class _Pool:
    """Best candidates seen so far, kept as built ``Evaluated`` values with their scores."""
    items: list = field(default_factory=list)   # (objective, latency, traffic, Evaluated)

    def add(self, p, b, s, picks, objective):
        obj = s.objective(objective)
        for i in picks:
            ev = Evaluated(tiling_from_batch(p, b, int(i)), prediction(p, s, int(i)))
            self.items.append((float(obj[i]), float(s.latency_s[i]), int(s.offchip_bytes[i]), ev))

    def top(self, k):
        seen, out = set(), []
        for item in sorted(self.items, key=lambda x: (x[0], x[1], x[2])):
            if item[3].tiling not in seen:
                seen.add(item[3].tiling)
                out.append(item)
        return out[:k]

    def pareto(self):
        front, best_lat = [], float("inf")
        for _, lat, traf, ev in sorted(self.items, key=lambda x: (x[2], x[1])):
            if lat < best_lat:
                best_lat = lat
                front.append(ev)
        return front


def _pareto_idx(s, legal, cap=32):
    idx = np.nonzero(legal)[0]
    if not len(idx):
        return idx
    order = idx[np.lexsort((s.latency_s[idx], s.offchip_bytes[idx]))]
    lat = s.latency_s[order]
    runmin = np.minimum.accumulate(lat)
    keep = order[np.concatenate([[True], lat[1:] < runmin[:-1]])]
    if len(keep) > cap:
        keep = keep[np.unique(np.linspace(0, len(keep) - 1, cap).astype(int))]
    return keep


def _topk_idx(obj, legal, k, tie=None):
    """Indices of the ``k`` best legal candidates by ``obj``, ties broken by ``tie``."""
    idx = np.nonzero(legal)[0]
    if len(idx) > k:
        kth = np.partition(obj[idx], k - 1)[k - 1]
        idx = idx[obj[idx] <= kth]
    keys = (obj[idx],) if tie is None else (tie[idx], obj[idx])
    return idx[np.lexsort(keys)][:k]


def search_problem(p: Problem, *, objective="latency", top=5, budget=250_000, beam=48,
                   progress=None) -> tuple[_Pool, int]:
    """Search one decomposition; returns the pool of built candidates and how many were evaluated.

    Preconditions: ``objective`` in :data:`OBJECTIVES`; ``budget > 0``.
    """
    if objective not in OBJECTIVES:
        raise TilingError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    plans = nest_plans(p)
    L = len(plans)
    dflt = defaults(p)
    pool, evaluated = _Pool(), 0
    # the whole space at once when it fits the budget (then this is an exhaustive search)
    for limit in (24, 16, 12, 8):
        b = expand(p, [Config((), (), ())], 0, L - 1, dflt,
                   [level_values(p, j, limit) for j in range(L)], view=p.view is not None,
                   max_n=budget)
        if b is not None:
            _scan(p, b, objective, top, pool)
            _tick(progress, 1, 1)
            return pool, b.n
    # otherwise level by level, keeping the best ``beam`` configs of the levels fixed so far
    n_stages = L + (p.view is not None)
    per = budget // (n_stages + 1)
    configs = [Config((), (), ())]
    for j in range(L):
        share = per * 2 if j == 0 else per
        b = None
        for limit in (24, 16, 12, 10, 8, 6, 5, 4, 3, 2):
            b = expand(p, configs, j, j, dflt, {j: level_values(p, j, limit)}, max_n=share)
            if b is not None:
                break
        if b is None:
            b = expand(p, configs[:max(1, len(configs) // 4)], j, j, dflt,
                       {j: level_values(p, j, 2)})
        obj, lat = _scan(p, b, objective, top, pool)
        evaluated += b.n
        picks = _topk_idx(obj, np.isfinite(obj), beam * 4, lat)
        configs = configs_of(p, b, picks, j + 1)[:beam]
        _tick(progress, j + 1, n_stages)
        if not configs:
            break
    if p.view is not None and configs:
        b = expand(p, configs, L, L - 1, dflt, {}, view=True, view_limit=6)
        _scan(p, b, objective, top, pool)
        evaluated += b.n
        _tick(progress, n_stages, n_stages)
    return pool, evaluated


CHUNK = 1 << 16      # candidates per evaluation: arrays that stay in cache run faster


def _scan(p, b, objective, top, pool):
    """Evaluate ``b`` in chunks, add each chunk's best and Pareto points to ``pool``; return the
    objective (inf where illegal) and latency of every candidate, for the beam."""
    objs, lats = [], []
    for i in range(0, b.n, CHUNK):
        sub = take(b, slice(i, i + CHUNK)) if b.n > CHUNK else b
        s = evaluate(p, sub)
        obj = s.objective(objective)
        picks = set(_topk_idx(obj, s.legal, top, s.latency_s).tolist())
        picks |= set(_pareto_idx(s, s.legal).tolist())
        pool.add(p, sub, s, sorted(picks), objective)
        objs.append(np.where(s.legal, obj, np.inf))
        lats.append(s.latency_s)
    return np.concatenate(objs), np.concatenate(lats)


def _tick(progress, done, total):
    if progress is not None:
        progress(done, total)


def search(op, board, *, objective: str = "latency", top: int = 5, decomposition: str | None = None,
           target: str | None = None, budget: int = 250_000, progress=None) -> SearchResult:
    """Best tilings of ``op`` on ``board`` (see the module docstring).

    ``budget``: about how many candidates to evaluate, shared by the decompositions searched.
    ``progress(done, total)`` is called as stages finish (the CLI draws a bar from it; ``done``
    is fractional, ``total`` the number of decompositions searched).
    Raises TilingError when no legal tiling exists.
    """
    t0 = time.perf_counter()
    sp = as_space(op)
    hw = hardware(board, target)
    probs = problems(sp, hw)
    if decomposition is not None:
        if decomposition not in probs:
            raise TilingError(f"{sp.kind} has no decomposition {decomposition!r} on {hw.board.name}; "
                              f"available: {', '.join(probs)}")
        probs = {decomposition: probs[decomposition]}
    results, total = {}, 0
    per = max(budget // len(probs), min(budget, 20_000))     # the budget is for the whole op
    for k, (name, p) in enumerate(probs.items()):
        # one progress scale over every decomposition: done/total in units of decompositions
        tick = None if progress is None else \
            (lambda d, t, k=k: progress(k + d / max(t, 1), len(probs)))
        pool, n = search_problem(p, objective=objective, top=top, budget=per, progress=tick)
        total += n
        if pool.items:
            results[name] = (p, pool)
    if not results:
        raise TilingError(f"no legal tiling of {sp.signature} on {hw.board.name}: every candidate "
                          f"exceeds a buffer; the op may be too large for this target")
    best_name = min(results, key=lambda k: results[k][1].top(1)[0][:3])
    p, pool = results[best_name]
    tops = pool.top(top)
    return SearchResult(sp.signature, hw.board.name, best_name, objective, tops[0][3],
                        [t[3] for t in tops], pool.pareto(), total, time.perf_counter() - t0,
                        compulsory_bytes(sp), lower_bound_bytes(p),
                        {k: v[1].top(1)[0][0] for k, v in results.items()})


def exhaustive(op, board, *, objective: str = "latency", decomposition: str | None = None,
               target: str | None = None, limit: int = 3_000_000) -> tuple[Evaluated, int]:
    """Evaluate every legal tiling (all granule-multiple tile sizes at every level, every order,
    buffer count per level and split) of a small space; returns the optimum and the number of
    tilings enumerated. Independent of the search's candidate lists.

    Precondition: the space has at most ``limit`` tilings (TilingError otherwise).
    """
    from edgeops.tiling.alltilings import all_tilings
    sp = as_space(op)
    hw = hardware(board, target)
    probs = problems(sp, hw)
    p = probs[decomposition] if decomposition else next(iter(probs.values()))
    best, n = None, 0
    for b in all_tilings(p, limit):
        n += b.n
        for i in range(0, b.n, CHUNK):
            sub = take(b, slice(i, i + CHUNK))
            s = evaluate(p, sub)
            obj = s.objective(objective)
            idx = _topk_idx(obj, s.legal, 1, s.latency_s)
            if len(idx):
                k = (float(obj[idx[0]]), float(s.latency_s[idx[0]]))
                if best is None or k < best[0]:
                    best = (k, Evaluated(tiling_from_batch(p, sub, int(idx[0])),
                                         prediction(p, s, int(idx[0]))))
    if best is None:
        raise TilingError(f"no legal tiling of {sp.signature} on {hw.board.name}")
    return best[1], n
