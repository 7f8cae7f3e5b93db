"""The service: the package (or the board directory whose ``current`` link names it), the queue,
the worker pool, hot reload and the metrics document. The HTTP layer (:mod:`edgeops.serve.http`)
is a thin skin over :class:`Service`, which tests and embedders can also drive directly.

Hot reload: a new pool is started on the new package; every one of its workers must pass the
smoke test (the package's reference inputs against its reference outputs, within tolerance)
before the switch. Only then does the new pool take jobs from the shared queue and the old one
drain: it finishes what it holds and stops. A request is never dropped by a reload; a package
that fails its smoke test is never switched to (``/metrics`` reloads[] says why)."""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from edgeops import package
from edgeops.errors import EdgeOpsError, PackageError
from edgeops.serve import rules
from edgeops.serve.metrics import Metrics
from edgeops.serve.pool import Pool
from edgeops.serve.protocol import ServeError, check_feeds
from edgeops.serve.scheduler import Job, Queue

CURRENT = "current"
WATCH_INTERVAL_S = 0.5


def _default_workers() -> int:
    try:
        return max(1, min(2, len(os.sched_getaffinity(0))))
    except AttributeError:
        return 1


class Service:
    def __init__(self, target, *, workers: int | None = None, max_queue: int = 64,
                 watch: bool = True, smoke: bool = True, retry_after_s: float = 1.0,
                 **overrides):
        self.target = Path(target)
        self.board = (self.target / CURRENT).is_symlink() or (
            self.target.is_dir() and not (self.target / package.MANIFEST).exists())
        self.workers = workers or _default_workers()
        self.overrides = overrides
        self.smoke, self.watch = smoke, watch
        self.metrics = Metrics()
        self.queue = Queue(max_queue, retry_after_s)
        self.pool: Pool | None = None
        self._lock = threading.Lock()         # one reload at a time
        self._closed = threading.Event()
        self._seen = None
        self._watcher: threading.Thread | None = None

    # ---- package resolution -----------------------------------------------------------------
    def _package_dir(self) -> Path:
        if not self.board:
            return self.target
        link = self.target / CURRENT
        if not link.is_symlink():
            raise PackageError(f"{self.target} has no current package; deploy one first "
                               f"(edgeops deploy PKG --to local:{self.target})")
        return link.resolve()

    def _fingerprint(self):
        try:
            d = self._package_dir()
            st = (d / package.MANIFEST).stat()
            return (str(d), st.st_ino, st.st_mtime_ns)
        except (OSError, EdgeOpsError):
            return None

    def settings_for(self, pkg) -> rules.Settings:
        threads = self.overrides.get("threads")
        s = rules.from_manifest(pkg.manifest, pkg.path, **self.overrides)
        if threads is None and s.threads is None:   # share the cores between the workers
            from edgeops.ort import _cores
            s = replace(s, threads=max(1, _cores() // self.workers))
        return s

    # ---- life cycle -------------------------------------------------------------------------
    def start(self) -> "Service":
        self._seen = self._fingerprint()
        pkg = package.load(self._package_dir())
        pool = Pool(pkg, self.settings_for(pkg), self.workers, self.queue, self.metrics,
                    smoke=self.smoke)
        pool.start()
        self.pool = pool
        self._record(pool, True, "started")
        if self.watch:
            self._watcher = threading.Thread(target=self._watch, daemon=True,
                                             name="edgeops-serve-watch")
            self._watcher.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self.pool is not None:
                self.pool.drain(timeout=30)
        self.queue.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def reload(self, reason: str = "requested", *, force: bool = False) -> dict:
        """Serve the package the target names now; the entry added to ``reloads``."""
        with self._lock:
            fp = self._fingerprint()
            self._seen = fp
            old = self.pool
            try:
                pkg = package.load(self._package_dir())
            except EdgeOpsError as e:
                return self._record(None, False, reason, str(e))
            if (not force and old is not None
                    and pkg.manifest.get("manifest_sha256") == old.version["manifest_sha256"]
                    and str(pkg.path) == old.version["path"]):
                return {"switched": False, "reason": reason, "why": "already serving it",
                        "version": old.version}
            try:
                new = Pool(pkg, self.settings_for(pkg), self.workers, self.queue, self.metrics,
                           smoke=True)
                new.start()
            except EdgeOpsError as e:
                print(f"edgeops serve: not switching to {pkg.path}: {e}", file=sys.stderr)
                return self._record(None, False, reason, str(e))
            self.pool = new
            doc = self._record(new, True, reason)
            if old is not None:
                old.drain()          # finishes what it holds; the new pool takes the queue
            return doc

    def _record(self, pool, ok: bool, reason: str, error: str | None = None) -> dict:
        doc = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "reason": reason,
               "switched": ok, "version": pool.version if pool else None}
        if error:
            doc["error"] = error
        with self.metrics._lock:
            self.metrics.reloads.append(doc)
        return doc

    def _watch(self) -> None:
        """Polls (the standard library has no inotify): a deploy renames ``current`` into
        place, so a changed target or manifest inode is a new package."""
        while not self._closed.wait(WATCH_INTERVAL_S):
            fp = self._fingerprint()
            if fp is not None and fp != self._seen:
                self.reload("the package on disk changed (deploy)")

    # ---- requests ---------------------------------------------------------------------------
    def submit(self, feeds: dict, prio: int) -> Job:
        pool = self.pool
        if pool is None:
            raise ServeError("no package is being served", status=503, kind="not_ready")
        rows = check_feeds(feeds, pool.pkg.manifest["inputs"],
                           pool.max_rows if pool.batch else None)
        self.metrics.request(prio)
        job = Job(feeds, prio, rows, expires=time.monotonic() + pool.s.deadline_s)
        try:
            self.queue.put(job)
        except ServeError as e:
            self.metrics.answered(prio, 0.0, e.kind)
            raise
        return job

    def infer(self, feeds: dict, prio: int = 1) -> Job:
        """Submit and wait; the finished job (``outputs`` or ``error``)."""
        job = self.submit(feeds, prio)
        s = self.pool.s
        budget = s.deadline_s * (2 + 2 * s.retries) + 60.0    # queue + attempts + restarts
        if not job.wait(budget):
            job.finish(error=ServeError(f"no answer within {budget:g} s", kind="deadline",
                                        status=504))
        self.metrics.answered(prio, time.monotonic() - job.enqueued,
                              job.error.kind if job.error else None)
        return job

    # ---- reports ----------------------------------------------------------------------------
    def health(self) -> dict:
        pool = self.pool
        ws = pool.describe() if pool else []
        alive = sum(1 for w in ws if w.get("alive"))
        return {"ok": alive > 0, "workers_alive": alive, "workers": len(ws),
                "version": pool.version if pool else None}

    def metrics_doc(self) -> dict:
        pool = self.pool
        doc = self.metrics.snapshot()
        doc.update({"queue": {"length": len(self.queue), "by_priority": self.queue.lengths(),
                              "max": self.queue.max_len,
                              "shed": dict(zip(("high", "normal", "low"), self.queue.shed))},
                    "workers": pool.describe() if pool else [],
                    "version": pool.version if pool else None,
                    "settings": pool.s.to_dict() if pool else None,
                    "batching": {"compiled_batch": pool.batch, "max_rows": pool.max_rows}
                    if pool and pool.batch else None,
                    "target": str(self.target), "board_dir": self.board})
        return doc
