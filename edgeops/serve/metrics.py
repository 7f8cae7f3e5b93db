"""Counters and latency windows of the service, read by ``GET /metrics`` as one JSON document.
Latency percentiles are over the last :data:`WINDOW` answered requests of each priority (a
bounded window: a service that runs for weeks must not keep every sample)."""
from __future__ import annotations

import threading
import time
from collections import Counter, deque

import numpy as np

from edgeops.serve.protocol import NAMES

WINDOW = 10_000


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.started = time.time()
        self.requests = Counter()             # by priority name
        self.ok = Counter()
        self.errors = Counter()               # by kind
        self.latency = {n: deque(maxlen=WINDOW) for n in NAMES.values()}
        self.restarts = 0
        self.retries = 0
        self.batches = 0
        self.batched_rows = 0
        self.reloads: list[dict] = []
        self._fallbacks_dead = Counter()       # from workers that are gone
        self._fallbacks_live: dict[int, dict] = {}
        self.guard_trips_dead = 0
        self._guard_live: dict[int, int] = {}

    def request(self, prio: int) -> None:
        with self._lock:
            self.requests[NAMES[prio]] += 1

    def answered(self, prio: int, seconds: float, error_kind: str | None) -> None:
        with self._lock:
            if error_kind is None:
                self.ok[NAMES[prio]] += 1
                self.latency[NAMES[prio]].append(seconds)
            else:
                self.errors[error_kind] += 1

    def worker_stats(self, uid: int, stats: dict) -> None:
        with self._lock:
            self._fallbacks_live[uid] = dict(stats.get("fallbacks", {}))
            self._guard_live[uid] = int(stats.get("guard_trips", 0))

    def worker_gone(self, uid: int) -> None:
        with self._lock:
            self._fallbacks_dead.update(self._fallbacks_live.pop(uid, {}))
            self.guard_trips_dead += self._guard_live.pop(uid, 0)

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + n)

    def snapshot(self) -> dict:
        with self._lock:
            fb = Counter(self._fallbacks_dead)
            for d in self._fallbacks_live.values():
                fb.update(d)
            lat = {}
            for name, w in self.latency.items():
                a = np.fromiter(w, float, len(w))
                lat[name] = ({"count": len(a), **{f"p{q}_ms": float(np.percentile(a, q) * 1e3)
                                                  for q in (50, 90, 99)}} if len(a) else
                             {"count": 0})
            return {"uptime_s": time.time() - self.started,
                    "requests": dict(self.requests), "ok": dict(self.ok),
                    "errors": dict(self.errors), "latency": lat,
                    "fallbacks": dict(fb),
                    "guard_trips": self.guard_trips_dead + sum(self._guard_live.values()),
                    "restarts": self.restarts, "retries": self.retries,
                    "batches": self.batches, "batched_rows": self.batched_rows,
                    "reloads": list(self.reloads[-10:])}


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process (Linux /proc; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            import os
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
