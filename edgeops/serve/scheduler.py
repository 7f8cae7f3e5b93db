"""Requests waiting for a worker: one FIFO per priority, bounded in total. When the queue is
full a request is refused with 503 + Retry-After, unless it outranks a queued one: then the
newest of the lowest priority queued is shed instead (so high priority keeps getting in)."""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque

from edgeops.serve.protocol import NAMES, Overloaded, ServeError

_ids = itertools.count(1)


class Job:
    """One request: its inputs, priority, batch rows, and the answer once there is one."""

    def __init__(self, feeds: dict, prio: int, rows: int = 1, expires: float | None = None):
        self.id = next(_ids)
        self.feeds, self.prio, self.rows = feeds, prio, rows
        self.enqueued = time.monotonic()
        self.expires = expires
        self.attempts = 0
        self.outputs: dict | None = None
        self.error: ServeError | None = None
        self.worker: int | None = None
        self.version: dict | None = None
        self._done = threading.Event()

    def finish(self, outputs=None, error=None, worker=None, version=None) -> None:
        if self._done.is_set():
            return
        self.outputs, self.error, self.worker, self.version = outputs, error, worker, version
        self.finished_at = time.monotonic()
        self._done.set()

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def signature(self) -> tuple:
        """Jobs with equal signatures can share a batch."""
        return tuple((k, v.dtype.str, v.shape[1:]) for k, v in sorted(self.feeds.items()))


class Queue:
    def __init__(self, max_len: int, retry_after_s: float = 1.0):
        self.max_len = max_len
        self.retry_after_s = retry_after_s
        self._q = [deque() for _ in NAMES]
        self._cv = threading.Condition()
        self.shed = [0] * len(NAMES)
        self.closed = False

    def __len__(self) -> int:
        return sum(len(q) for q in self._q)

    def lengths(self) -> dict:
        with self._cv:
            return {NAMES[p]: len(q) for p, q in enumerate(self._q)}

    def put(self, job: Job, front: bool = False) -> None:
        """Queue ``job``; ``front``: a retry goes before the others of its priority and never
        counts against the bound (it was admitted once)."""
        with self._cv:
            if front:
                self._q[job.prio].appendleft(job)
            else:
                if len(self) >= self.max_len:
                    victim = self._lowest_below(job.prio)
                    if victim is None:
                        self.shed[job.prio] += 1
                        raise self._overloaded(job.prio)
                    self._q[victim.prio].pop()
                    self.shed[victim.prio] += 1
                    victim.finish(error=self._overloaded(victim.prio, shed=True))
                self._q[job.prio].append(job)
            self._cv.notify()

    def _lowest_below(self, prio: int):
        for p in range(len(self._q) - 1, prio, -1):
            if self._q[p]:
                return self._q[p][-1]
        return None

    def _overloaded(self, prio: int, shed: bool = False) -> Overloaded:
        what = ("shed from the queue for higher-priority requests" if shed else
                f"the queue is full ({self.max_len} requests waiting)")
        return Overloaded(f"overloaded: {NAMES[prio]}-priority request {what}; retry after "
                          f"{self.retry_after_s:g} s", retry_after=self.retry_after_s)

    def get(self, timeout: float, stop: threading.Event | None = None) -> Job | None:
        """The oldest job of the highest priority, waiting at most ``timeout``."""
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                job = self._pop()
                if job is not None:
                    return job
                left = end - time.monotonic()
                if left <= 0 or self.closed or (stop is not None and stop.is_set()):
                    return None
                self._cv.wait(left)

    def get_more(self, sig: tuple, room: int, until: float) -> list[Job]:
        """Further jobs with signature ``sig`` whose rows fit in ``room``, in priority order,
        waiting until ``until`` (monotonic) for more to arrive."""
        got: list[Job] = []
        with self._cv:
            while room > 0:
                for q in self._q:
                    for j in list(q):
                        if j.signature() == sig and j.rows <= room and not self._expired(j):
                            q.remove(j)
                            got.append(j)
                            room -= j.rows
                            if room == 0:
                                return got
                left = until - time.monotonic()
                if left <= 0 or self.closed:
                    return got
                self._cv.wait(left)
        return got

    def _pop(self) -> Job | None:
        for q in self._q:
            while q:
                j = q.popleft()
                if not self._expired(j):
                    return j
        return None

    def _expired(self, j: Job) -> bool:
        if j.expires is not None and time.monotonic() > j.expires:
            j.finish(error=ServeError(
                f"waited {time.monotonic() - j.enqueued:.1f} s in the queue, past its deadline, "
                f"without a free worker", kind="queue_timeout", status=503,
                retry_after=self.retry_after_s))
            return True
        return j.done       # shed or answered elsewhere

    def wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()
