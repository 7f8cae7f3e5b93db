"""Run a small kernel call on the calling thread only.

A Numba parallel region costs a fork/join of the thread team, and on oversubscribed cores a
preempted worker stalls the whole region; below a few tens of microseconds of work, one thread
is faster and immune to that (figures: docs/notes/threads.md).
"""
from __future__ import annotations

import os
import time
from collections import deque
from contextlib import contextmanager

import numba
from numba.np.ufunc import parallel as _par

SMALL_ELEMENTS = 1 << 15     # memory-bound kernels: tens of microseconds of single-thread work
# Above it, whether a memory-bound kernel's call pays for the pool is timed per call
# (ThreadChoice, alone_or_pool): a passive pool's wake-up at every parallel region differs by
# machine more than any fixed threshold can follow (figures: docs/notes/threads.md).


def forget_policy() -> None:
    """Time every call's alone-or-pool choice again (edgeops.ort.use_wait_policy changed the
    OpenMP wait policy before OpenMP started: the pool's cost changes with it)."""
    _CHOICES.clear()


SMALL_FLOPS = 4e6            # GEMM-like kernels: tens of microseconds of work


def num_threads() -> int:
    """``numba.get_num_threads()`` without its per-call cost: the public function takes a
    multiprocessing lock to check that the pool is up, a noticeable share of a small kernel call
    that asks several times (figures: docs/notes/threads.md). Once the pool is up, read the
    thread-local count directly (a private Numba name: fall back to the public call if it goes)."""
    if getattr(_par, "_is_initialized", False):
        get = getattr(_par, "_get_num_threads", None)
        if get is not None:
            return get()
    return numba.get_num_threads()


@contextmanager
def at_most(n: int):
    """Numba kernels launched by this thread use at most ``n`` threads inside the block (a
    session's thread count: edgeops.ort.prepare(threads=)); free when already at most ``n``."""
    before = num_threads()
    if before <= n:
        yield
        return
    _set(n)  # thread-local in Numba: other threads' calls are unaffected
    try:
        yield
    finally:
        _set(before)


def capped(n: int, fn, *args):
    """``fn(*args)`` with Numba kernels on at most ``n`` threads, as :func:`at_most`, without a
    context manager: a region or node entry pays it on every call, and a ``with`` block costs
    more than the two thread-count calls (figures: docs/notes/threads.md)."""
    before = num_threads()
    if before <= n:
        return fn(*args)
    _set(n)
    try:
        return fn(*args)
    finally:
        _set(before)


def _set(n: int) -> None:
    """``numba.set_num_threads(n)`` for a count already known valid (1 <= n <= the pool's size,
    as :func:`at_most` only lowers it or puts it back), without the public function's pool check
    and validation once the pool is up (as :func:`num_threads` reads it)."""
    fast = getattr(_par, "_set_num_threads", None) if getattr(_par, "_is_initialized", False) \
        else None
    if fast is None:
        numba.set_num_threads(n)
    else:
        fast(n)


@contextmanager
def serial_if(small: bool):
    if not small:
        yield
        return
    with at_most(1):
        yield


class _Timing:
    __slots__ = ("calls", "serial", "pooled", "pick", "final")

    def __init__(self, trials: int):
        self.calls = 0                          # since timing began, or since the last revisit
        self.serial: deque = deque(maxlen=trials)    # the latest counted seconds of each way
        self.pooled: deque = deque(maxlen=trials)
        self.pick = None                        # True: the pool; None: still timing
        self.final = False                      # fixed when a session was made: no revisits


class ThreadChoice:
    """Whether a recurring call (one kernel, one shape: a fused chain in a region) runs faster on
    the calling thread alone or on the pool, decided by timing its own calls on this machine, as
    ONNX Runtime's TunableOp and cuDNN's benchmark mode pick among implementations: the first
    calls run in blocks of ``block`` one way, then ``block`` the other, until each way has
    ``trials`` timings; the pool is kept if its median is below ``POOL_MARGIN`` times the calling
    thread's, else the calling thread is. Blocks, not call-by-call alternation, so that each way
    is timed as it runs once chosen (a pool whose workers spin a while after a region, ``edgeops
    compile --omp-wait spin``, finds them awake on back-to-back calls but not after a call that
    left them idle), and the first call of a block, which pays that switch (and a compile or a
    cold cache on the very first call), is not counted.
    Every ``revisit`` calls after a choice, ``trials + 1`` calls run the other way and the choice
    is made again from their timings against the chosen way's latest: what else the process runs
    changes which way is faster, and one unlucky start (timed while another session held a
    core) must not fix it for good. That costs ``(trials + 1) / revisit`` of the calls the
    other way. A choice a session settled while it was made (:meth:`settle`), or read from this
    machine's record (:meth:`fix`), is final instead: nothing is re-timed while serving.
    The margin stands for what the kernel's own clock does not see: the pool's wake-up and join
    land partly outside the call, and its output sits in two cores' caches for whatever reads it
    next. Fixed thresholds cannot make this call: the pool's wake-up differs by machine and wait
    policy (figures for all of this: docs/notes/threads.md).
    One choice per thread count of the pool. Sessions on several threads may share the object:
    a lost or misplaced sample under a race only delays a choice."""
    __slots__ = ("trials", "block", "revisit", "_by_threads")
    POOL_MARGIN = 0.85
    BLOCK = 3
    REVISIT = 256

    def __init__(self, trials: int = 4, block: int = BLOCK, revisit: int = REVISIT):
        if block < 2 or revisit <= trials:
            raise ValueError("a block needs a counted call after its first, and a revisit must "
                             "leave calls between")
        self.trials, self.block, self.revisit = trials, block, revisit
        self._by_threads: dict[int, _Timing] = {}

    def parallel(self, threads: int) -> bool:
        """Whether the next call should use the pool of ``threads`` (> 1)."""
        t = self._by_threads.get(threads)
        if t is None:
            return False
        if t.pick is None:
            return (t.calls // self.block) % 2 == 1
        if t.final:
            return t.pick
        return t.pick if t.calls < self.revisit else not t.pick

    def record(self, threads: int, parallel: bool, seconds: float) -> None:
        """The seconds of a call that :meth:`parallel` placed (``parallel``: how it ran)."""
        t = self._by_threads.get(threads)
        if t is None:
            t = self._by_threads[threads] = _Timing(self.trials)
        if t.final:
            return
        n = t.calls
        t.calls = n + 1
        ways = t.pooled if parallel else t.serial
        if t.pick is None:               # first timing, in blocks
            if n % self.block:
                ways.append(seconds)
            if len(t.serial) == len(t.pooled) == self.trials:
                self._choose(t)
        elif n < self.revisit:           # the chosen way's latest calls
            ways.append(seconds)
        elif n > self.revisit:           # the other way's (its first call paid the switch)
            ways.append(seconds)
            if n - self.revisit >= self.trials:
                self._choose(t)

    def _choose(self, t: _Timing) -> None:
        s, p = sorted(t.serial), sorted(t.pooled)
        t.pick = p[len(p) // 2] < self.POOL_MARGIN * s[len(s) // 2]
        t.calls = 0

    def decided(self, threads: int):
        """The choice made for ``threads`` (True: the pool), or None while first timing."""
        t = self._by_threads.get(threads)
        return None if t is None else t.pick

    def settle(self, threads: int, trial=None):
        """The choice for ``threads``, made now if it is still timing by ``trial()`` calls (each
        a call that times itself into this choice, capped to ``threads``): what a native step
        fixes while it is made, not while serving. Once settled it is final: the Python path's
        calls of the same kernel and shape follow it and are not timed again. None when there
        is no trial or it did not decide."""
        if trial is not None:
            for _ in range(self.calls_to_decide() + 2):
                if self.decided(threads) is not None:
                    break
                capped(threads, trial)
        got = self.decided(threads)
        if got is not None:
            self.fix(threads, got)
        return got

    def fix(self, threads: int, pool: bool) -> None:
        """Make ``pool`` the final choice for ``threads`` (a decision read from this machine's
        record, or settled while a session was made): never timed again."""
        t = self._by_threads.get(threads)
        if t is None:
            t = self._by_threads[threads] = _Timing(self.trials)
        t.pick, t.final = bool(pool), True

    def calls_to_decide(self) -> int:
        """How many calls, one after another, the first choice takes."""
        rounds = -(-self.trials // (self.block - 1))
        return 2 * self.block * rounds


_CHOICES: dict = {}     # (kernel, shape, ...) -> ThreadChoice; cleared when it grows past 4096


def choice(key) -> ThreadChoice:
    """The process's :class:`ThreadChoice` for one recurring call (a kernel on one shape)."""
    tc = _CHOICES.get(key)
    if tc is None:
        if len(_CHOICES) >= 4096:
            _CHOICES.clear()
        tc = _CHOICES[key] = ThreadChoice()
    return tc


def decide(key, elements: int):
    """(the call's ThreadChoice or None, pool size, whether to use the pool) for a call of
    ``elements``: alone below ``SMALL_ELEMENTS`` (tens of microseconds of work) or on a
    one-thread pool (None: nothing to time); otherwise as the call's :class:`ThreadChoice`
    (``key``: one itself, or a key of :func:`choice`, e.g. kernel and shape) decides from timing
    its runs both ways, which the caller reports with ``record``."""
    threads = num_threads()
    if threads == 1 or elements < SMALL_ELEMENTS:
        return None, threads, False
    tc = key if isinstance(key, ThreadChoice) else choice(key)
    return tc, threads, tc.parallel(threads)


def run(key, parallel, serial, elements: int, *args) -> None:
    """A kernel compiled twice (``parallel``, a prange loop, and its ``serial`` twin) run on the
    pool or alone as :func:`decide` says for the call (see :func:`launch`), timed for it."""
    tc, threads, pool = decide(key, elements)
    t = time.perf_counter()
    launch(parallel, serial, pool, elements, *args)
    if tc is not None:
        tc.record(threads, pool, time.perf_counter() - t)


def launch(parallel, serial, pool: bool, elements: int, *args) -> None:
    """Run a kernel compiled twice: ``parallel`` (a prange loop) on the pool when ``pool``;
    alone, ``serial`` for a small call (no parallel-region launch nor thread-count round trip)
    and ``parallel`` on a one-thread team otherwise. Numba compiles a prange body with its
    arrays marked noalias once its alias analysis finds none, so LLVM vectorises it without
    runtime overlap checks; the serial twin gets no such mark and runs slower on the same
    thread (figures: docs/notes/threads.md)."""
    if pool:
        parallel(*args)
    elif elements < SMALL_ELEMENTS:
        serial(*args)
    else:
        before = num_threads()
        if before > 1:
            _set(1)
        try:
            parallel(*args)
        finally:
            if before > 1:
                _set(before)


@contextmanager
def alone_or_pool(key, elements: int):
    """The block's kernel call on the calling thread alone or on the pool, as :func:`decide`
    says (the block is timed for it); for kernels whose loops use the pool (prange)."""
    tc, threads, par = decide(key, elements)
    t = time.perf_counter()
    if par:
        yield
    else:
        with at_most(1):
            yield
    if tc is not None:
        tc.record(threads, par, time.perf_counter() - t)


# ---- the per-machine record of thread decisions ----------------------------------------------
# A native step's way of using threads (its Numba team alone or pooled; ONNX Runtime's intra-op
# pool for a step that can be cut) is decided while a session is made, by timing it on this
# machine the first time, then kept here: later sessions read it and time nothing, and nothing is
# re-timed while serving. One file per machine (CPU, cores, threading layer, ONNX Runtime), as
# ONNX Runtime's TunableOp keeps its tuning results.

DECISIONS_ENV = "EDGEOPS_THREAD_DECISIONS"   # "off": time every session; "ort"/"numba": force
_decisions: dict | None = None
_DECISIONS_FORMAT = 1


def layer() -> str:
    """The Numba threading layer edgeops pinned (see :func:`pin_layer`), once it is started."""
    try:
        return numba.threading_layer()
    except ValueError:            # not started yet
        return str(numba.config.THREADING_LAYER)


def pin_layer() -> str:
    """Pin Numba's threading layer to one that takes parallel launches from several threads at
    once (GNU or LLVM OpenMP, else TBB): its ``default`` falls back to ``workqueue``, which
    aborts the process under concurrent launches (a session run from several threads). A user's
    own ``NUMBA_THREADING_LAYER`` stands. Returns the layer asked for; call before the layer
    starts (edgeops.plans.prepare_numba starts it and checks what it got)."""
    if os.environ.get("NUMBA_THREADING_LAYER") or _par._is_initialized:
        return str(numba.config.THREADING_LAYER)
    # found without loading: loading OpenMP's runtime now would fix its wait policy before
    # edgeops.ort.configure_openmp sets it (OpenMP reads its environment when it loads)
    import ctypes.util
    import importlib.util
    for name, module, lib in (("omp", "omppool", "gomp"), ("omp", "omppool", "omp"),
                              ("tbb", "tbbpool", "tbb")):
        if importlib.util.find_spec(f"numba.np.ufunc.{module}") is None:
            continue
        if ctypes.util.find_library(lib) is None and not _bundled(module):
            continue
        numba.config.THREADING_LAYER = name
        return name
    return str(numba.config.THREADING_LAYER)


def _bundled(module: str) -> bool:
    """Whether the layer's extension links a runtime library shipped inside the numba wheel
    (the wheels' OpenMP layer needs the system libgomp; TBB comes as the ``tbb`` wheel)."""
    if module != "tbbpool":
        return False
    import importlib.util
    return importlib.util.find_spec("tbb") is not None


def pool_safe() -> bool:
    """Whether kernels may launch Numba's pool from a session run on several threads: not on
    ``workqueue`` (what an unpinned layer falls back to without OpenMP or TBB)."""
    return layer() != "workqueue"


def _machine_key() -> str:
    import hashlib
    import platform
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "")
    except OSError:
        pass
    try:
        import onnxruntime
        ort = onnxruntime.__version__
    except ImportError:
        ort = ""
    what = "|".join([platform.machine(), cpu, str(os.cpu_count()), layer(), ort,
                     numba.__version__, str(_DECISIONS_FORMAT)])
    return hashlib.sha256(what.encode()).hexdigest()[:16]


def _decisions_path():
    from edgeops import cache
    return cache.root() / "threads" / f"decisions-{_machine_key()}.json"


def _load_decisions() -> dict:
    global _decisions
    if _decisions is None:
        import json
        try:
            _decisions = json.loads(_decisions_path().read_text())
            if not isinstance(_decisions, dict):
                _decisions = {}
        except (OSError, ValueError):
            _decisions = {}
    return _decisions


def decision(key: str, threads: int):
    """What this machine decided for ``key`` (a kernel family and size class) at ``threads``:
    a string the caller stored, or None (not decided yet, or decisions are off)."""
    if os.environ.get(DECISIONS_ENV) == "off":
        return None
    return _load_decisions().get(f"{key}@{threads}")


def forced_pool() -> bool | None:
    """``EDGEOPS_THREAD_DECISIONS=ort`` / ``numba``: every step that can be cut runs on ONNX
    Runtime's pool / on its prepared Numba team (benchmarks and tests compare the two)."""
    v = os.environ.get(DECISIONS_ENV)
    return True if v == "ort" else False if v == "numba" else None


def remember(key: str, threads: int, value: str) -> None:
    """Keep a decision for later sessions (the file is rewritten whole, atomically; a lost
    update under a race between processes only means one more timing later)."""
    if os.environ.get(DECISIONS_ENV) in ("off", "ort", "numba"):
        return
    d = _load_decisions()
    if d.get(f"{key}@{threads}") == value:
        return
    d[f"{key}@{threads}"] = value
    import json
    import tempfile
    path = _decisions_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(d, f, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except OSError:               # an unwritable cache: decide again next time
        pass


def size_class(n: int) -> int:
    """The power of two at or below ``n``: decisions are kept per size class, not per shape."""
    return max(0, int(n).bit_length() - 1)


pin_layer()     # before any kernel of this process can start the layer
