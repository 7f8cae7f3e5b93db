"""Executor processes for one package and the threads that feed them.

Each worker slot has a driver thread here: it takes the next job from the shared priority queue
(plus, for a batched package, compatible jobs up to the compiled batch), sends it down the
worker's pipe and waits at most the deadline. A worker that dies (segfault, ``os._exit``, SIGKILL)
or overruns the deadline is killed and replaced; its jobs are retried once on another worker
(``Settings.retries``) or answered with an error that says what happened."""
from __future__ import annotations

import multiprocessing
import threading
import time

from edgeops.errors import PackageError
from edgeops.serve import batching
from edgeops.serve.metrics import rss_bytes
from edgeops.serve.protocol import ServeError

START_TIMEOUT_S = 300.0     # a cold Numba cache on a slow board compiles for minutes
_CTX = multiprocessing.get_context("spawn")   # ORT's and Numba's thread pools do not survive fork
_uids = iter(range(1, 1 << 62))
_uid_lock = threading.Lock()


class WorkerDied(Exception):
    pass


class Worker:
    """One executor process and its end of the pipe."""

    def __init__(self, pkg_path: str, settings, slot: int, smoke: bool = True):
        from edgeops.serve import worker
        with _uid_lock:
            self.uid = next(_uids)
        self.slot = slot
        self.conn, child = _CTX.Pipe()
        self.proc = _CTX.Process(target=worker.main, args=(child, pkg_path, settings, self.uid, smoke),
                                 name=f"edgeops-serve-worker-{slot}", daemon=True)
        self.proc.start()
        child.close()
        self.info: dict = {}
        self.served = 0
        self.stats: dict = {}

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> dict:
        try:
            if not self.conn.poll(timeout):
                raise WorkerDied(f"did not start within {timeout:g} s")
            msg = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(1)
            raise WorkerDied(f"exited while starting (exit code {self.proc.exitcode})") from None
        if msg[0] != "ready":
            raise WorkerDied(msg[1])
        self.info = msg[1]
        return self.info

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def stop(self, timeout: float = 5.0) -> None:
        try:
            self.conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self.proc.join(timeout)
        self.kill()

    def describe(self) -> dict:
        return {"slot": self.slot, "pid": self.proc.pid, "alive": self.alive,
                "rss_bytes": rss_bytes(self.proc.pid) if self.alive else None,
                "served": self.served, "mode": self.stats.get("mode", self.info.get("mode"))}


class Pool:
    """``n`` workers on one package, fed from ``queue``."""

    def __init__(self, pkg, settings, n: int, queue, metrics, *, smoke: bool = True):
        self.pkg, self.s, self.n = pkg, settings, n
        self.queue, self.metrics, self.smoke = queue, metrics, smoke
        from edgeops.serve.worker import version_of
        self.version = version_of(pkg)
        b = batching.compiled_batch(pkg.manifest)
        self.batch = b if b is not None and settings.max_batch != 0 else None
        self.max_rows = min(settings.max_batch or b, b) if self.batch else 1
        self.workers: list[Worker | None] = [None] * n
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._restart_failures = [0] * n

    # ---- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Start every worker (each loads the package and passes its smoke test) or raise."""
        ws = [Worker(str(self.pkg.path), self.s, i, self.smoke) for i in range(self.n)]
        errors = []
        for w in ws:
            try:
                w.wait_ready()
            except WorkerDied as e:
                errors.append(f"worker {w.slot}: {e}")
        if errors:
            for w in ws:
                w.kill()
            raise PackageError(f"cannot serve {self.pkg.path}: {errors[0]}")
        self.workers = ws
        for i in range(self.n):
            t = threading.Thread(target=self._drive, args=(i,), daemon=True,
                                 name=f"edgeops-serve-driver-{i}")
            t.start()
            self._threads.append(t)

    def drain(self, timeout: float | None = None) -> None:
        """Stop taking jobs, finish the ones in flight, stop the workers."""
        self._stop.set()
        self.queue.wake()
        for t in self._threads:
            t.join(timeout)
        for w in self.workers:
            if w is not None:
                w.stop()
                self.metrics.worker_gone(w.uid)

    def describe(self) -> list[dict]:
        return [w.describe() if w is not None else {"slot": i, "alive": False}
                for i, w in enumerate(self.workers)]

    # ---- the driver of one slot -------------------------------------------------------------
    def _drive(self, slot: int) -> None:
        while not self._stop.is_set():
            job = self.queue.get(0.2, self._stop)
            if job is None:
                continue
            jobs = [job]
            if self.batch and not getattr(job, "solo", False) and job.rows < self.max_rows:
                until = time.monotonic() + self.s.batch_delay_ms / 1e3
                jobs += self.queue.get_more(job.signature(), self.max_rows - job.rows, until)
            try:
                self._execute(slot, jobs)
            except Exception as e:  # noqa: BLE001  (a driver bug must not strand requests)
                for j in jobs:
                    j.finish(error=ServeError(f"internal error in the scheduler: "
                                              f"{type(e).__name__}: {e}"))

    def _ensure_worker(self, slot: int) -> Worker | None:
        w = self.workers[slot]
        if w is not None and w.alive:
            return w
        if w is not None:
            w.kill()
            self.metrics.worker_gone(w.uid)
            self.metrics.count("restarts")
        self.workers[slot] = None
        if self._stop.is_set():
            return None
        try:
            nw = Worker(str(self.pkg.path), self.s, slot, smoke=False)
            nw.wait_ready()
        except WorkerDied as e:
            nw.kill()
            self._restart_failures[slot] += 1
            import sys
            print(f"edgeops serve: worker {slot} failed to restart: {e}", file=sys.stderr)
            time.sleep(min(30.0, 0.5 * 2 ** self._restart_failures[slot]))
            return None
        self._restart_failures[slot] = 0
        self.workers[slot] = nw
        return nw

    def _execute(self, slot: int, jobs) -> None:
        w = self._ensure_worker(slot)
        if w is None:              # could not start one: give the jobs to another slot
            for j in jobs:
                self.queue.put(j, front=True)
            return
        if len(jobs) > 1 or self.batch:
            feeds, spans = batching.stack(jobs, self.pkg.manifest["inputs"][0]["shape"][0])
            self.metrics.count("batches")
            self.metrics.count("batched_rows", sum(j.rows for j in jobs))
        else:
            feeds, spans = jobs[0].feeds, None
        try:
            w.conn.send(("run", jobs[0].id, feeds))
        except (OSError, ValueError):     # died while idle (e.g. killed): nothing ran yet
            for j in jobs:
                self.queue.put(j, front=True)
            return
        reply, why = None, None
        try:
            if w.conn.poll(self.s.deadline_s):
                reply = w.conn.recv()
            else:
                why = ("deadline", f"no answer within the deadline of {self.s.deadline_s:g} s; "
                                   f"the worker was killed and restarted")
        except (EOFError, OSError):
            w.proc.join(1)
            code = w.proc.exitcode
            sig = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            why = ("worker_crashed", f"the worker running it died ({sig}) and was restarted")
        if reply is None:
            w.kill()
            self._ensure_worker(slot)
            for j in jobs:
                self._failed_attempt(j, *why)
            return
        w.served += 1
        w.stats = reply[-1]
        self.metrics.worker_stats(w.uid, reply[-1])
        if reply[0] == "ok":
            outs = batching.split(reply[2], spans) if spans is not None else [reply[2]]
            for j, o in zip(jobs, outs):
                j.finish(outputs=o, worker=slot, version=self.version)
        else:
            _, _, kind, msg, _ = reply
            for j in jobs:
                j.finish(error=ServeError(f"inference failed: {msg}", kind=kind), worker=slot,
                         version=self.version)

    def _failed_attempt(self, job, kind: str, msg: str) -> None:
        job.attempts += 1
        if job.done:
            return
        if job.attempts <= self.s.retries:
            job.solo = True            # a retry never shares a batch with the job that crashed
            job.expires = time.monotonic() + self.s.deadline_s     # its own time in the queue
            self.metrics.count("retries")
            self.queue.put(job, front=True)
            return
        tried = f" (attempt {job.attempts} of {self.s.retries + 1})" if self.s.retries else ""
        job.finish(error=ServeError(f"request failed: {msg}{tried}", kind=kind,
                                    status=504 if kind == "deadline" else 500))
