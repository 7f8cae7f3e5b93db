"""Event-driven replay of executed NPU instruction traces: the detailed timing model.

An emulator (``edgeops.targets.ascend``) records, per core and in program order, every
instruction it executed: which unit ran it and how much work it was (bytes on a data path,
flops on a compute unit), plus the synchronisation between units. The replay schedules that
trace on one in-order queue per unit -- mte2, mte1, cube, vector, mte3, fixpipe and the scalar
unit that issues everything -- with the board's rates and DMA latencies:

* the scalar unit issues one instruction per cycle, in program order; nothing starts before it
  is issued (the queues are otherwise unbounded);
* a unit runs its instructions in order, each when the unit is free;
* ``set`` completes when everything before it on its unit has; ``wait`` holds its unit until
  the matching ``set`` completed (that is every dependency between units: the program's own
  flags, not an inferred data-flow graph); ``barrier`` waits for every unit;
* a DMA takes ``setup + bus_bytes / bandwidth``; on a path that touches off-chip memory the bus
  carries every contiguous run rounded up to the path's burst; a shared path's bandwidth is
  divided among the cores that run; compute takes ``flops / (flops per cycle x clock)``.

The result is the busiest core's time (plus the kernel launch), and each unit's busy time on it.
Unlike the analytic model (``timing.py``) nothing here is a formula for a pipeline: overlap
comes out of the dependencies the program actually has.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeops.errors import BoardError

UNITS = ("scalar", "mte2", "mte1", "cube", "vector", "mte3", "fixpipe")
KINDS = ("issue", "dma", "compute", "set", "wait", "barrier")


class Trace:
    """One core's executed instructions, appended by an emulator in program order: per
    instruction (unit, kind, link, amount, runs, dtype, dep) -- a tuple, as millions are kept."""
    __slots__ = ("core", "rows")

    def __init__(self, core: str = ""):
        self.core, self.rows = core, []

    def add(self, unit: str, kind: str, link: str | None = None, amount: float = 0.0,
            runs: int = 0, dtype: str | None = None, dep: int = -1) -> int:
        self.rows.append((unit, kind, link, amount, runs, dtype, dep))
        return len(self.rows) - 1

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def busy(self) -> bool:
        return any(r[1] in ("dma", "compute") for r in self.rows)


@dataclass
class ReplayResult:
    total_s: float                          # launch + the busiest core
    body_s: float                           # the busiest core alone
    unit_busy_s: dict                       # unit -> busy seconds on the busiest core
    hz: float
    core_s: list = field(default_factory=list)   # every core's time
    active: int = 1

    @property
    def cycles(self) -> float:
        return self.total_s * self.hz

    @property
    def unit_cycles(self) -> dict:
        return {u: s * self.hz for u, s in self.unit_busy_s.items()}

    def to_dict(self) -> dict:
        return {"total_s": self.total_s, "body_s": self.body_s, "cycles": self.cycles,
                "unit_busy_s": dict(self.unit_busy_s), "unit_cycles": self.unit_cycles,
                "active_cores": self.active}


class _Rates:
    """The board's figures a trace needs (paths by "src->dst", compute units by name)."""

    def __init__(self, board):
        self.board = board
        self.paths = {f"{p.src.lower()}->{p.dst.lower()}": p for p in board.paths}
        self.offchip = board.offchip.name.lower()

    def path(self, link: str):
        p = self.paths.get(link)
        if p is None:
            src, _, dst = link.partition("->")
            p = self.paths.get(f"{dst}->{src}")   # partial sums back: the way out's figures
        if p is None:
            raise BoardError(f"board {self.board.name!r} has no path for a traced move {link}; "
                             f"paths: {sorted(self.paths)}")
        return p

    def unit(self, name: str, dtype: str | None):
        hint = {"cube": "cube", "vector": "vec"}[name]
        for u in self.board.units:
            if hint in u.name.lower():
                for dt in {"int8": ("int8", "fp16", "fp32"), "fp16": ("fp16", "fp32"),
                           "int32": ("fp32",), "fp32": ("fp32", "fp16")}.get(dtype or "fp16", (dtype,)):
                    if u.flops_per_cycle.get(dt, 0) > 0:
                        return u.flops_per_cycle[dt] * u.per_core, self.board.core_hz(u.core)
        raise BoardError(f"board {self.board.name!r}: no {name} rate for {dtype}")


def durations(tr: Trace, rates: _Rates, active: int) -> np.ndarray:
    """Seconds each traced instruction occupies its unit."""
    out = np.zeros(len(tr))
    cache: dict = {}
    for i, (unit, k, link, amount, runs, dtype, _) in enumerate(tr.rows):
        if k == "dma":
            if link not in cache:
                cache[link] = rates.path(link)
            p = cache[link]
            nbytes = amount
            touches = rates.offchip in link.split("->")
            if touches and runs > 0 and nbytes > 0:
                run = nbytes / runs
                nbytes = runs * (-(-run // p.burst_bytes)) * p.burst_bytes
            bw = p.bandwidth_bytes_per_s / (max(active, 1) if p.shared else 1)
            out[i] = p.setup_latency_s + nbytes / bw
        elif k == "compute":
            key = (unit, dtype)
            if key not in cache:
                cache[key] = rates.unit(*key)
            fpc, hz = cache[key]
            out[i] = amount / (fpc * hz)
    return out


def replay_core(tr: Trace, dur: np.ndarray, issue_s: float) -> tuple[float, dict]:
    """(finish time, busy seconds per unit) of one core's trace."""
    free = dict.fromkeys(UNITS, 0.0)
    busy = dict.fromkeys(UNITS, 0.0)
    finish = [0.0] * len(tr)
    issued = 0.0
    dur = dur.tolist()
    for i, (u, k, _, _, _, _, dep) in enumerate(tr.rows):
        issued += issue_s
        start = free[u] if free[u] > issued else issued
        if k == "wait":
            t = finish[dep]
            start = t if t > start else start
        elif k == "barrier":
            start = max(start, max(free.values()))
        end = start + dur[i]
        finish[i] = end
        free[u] = end
        busy[u] += dur[i]
        if k == "barrier":
            for v in free:
                free[v] = end
    busy["scalar"] += issued
    return max(free.values()) if len(tr) else 0.0, busy


class Replayer:
    """Replays one kernel core by core, as the traces arrive (a trace can then be dropped:
    a naive tiling of a large op runs millions of instructions). ``active`` is the number of
    cores that run, which shares the bandwidth of shared paths."""

    def __init__(self, board, active: int, issue_cycles: float = 1.0):
        self.board, self.active = board, max(1, active)
        self.rates, self.hz = _Rates(board), board.clock_hz
        self.issue_s = issue_cycles / self.hz
        self.times: list = []
        self.best, self.best_busy = 0.0, dict.fromkeys(UNITS, 0.0)

    def add(self, tr: Trace):
        t, busy = replay_core(tr, durations(tr, self.rates, self.active), self.issue_s)
        self.times.append(t)
        if t > self.best or len(self.times) == 1:
            self.best, self.best_busy = t, busy

    def result(self, launches: int = 1) -> ReplayResult:
        return ReplayResult(self.board.launch_overhead_s * launches + self.best, self.best,
                            self.best_busy, self.hz, self.times, self.active)


def replay(board, traces: list[Trace], *, launches: int = 1, issue_cycles: float = 1.0,
           active: int | None = None) -> ReplayResult:
    """Replay one kernel's per-core traces (all cores start together after the launch)."""
    r = Replayer(board, active if active is not None else sum(1 for t in traces if t.busy),
                 issue_cycles)
    for tr in traces:
        r.add(tr)
    return r.result(launches)


def combine(results: list[ReplayResult]) -> ReplayResult:
    """Kernels that run one after another (a Cube kernel, then a Vector pass)."""
    busy: dict = {}
    for r in results:
        for u, s in r.unit_busy_s.items():
            busy[u] = busy.get(u, 0.0) + s
    return ReplayResult(sum(r.total_s for r in results), sum(r.body_s for r in results), busy,
                        results[0].hz, [t for r in results for t in r.core_s],
                        max(r.active for r in results))
