"""The native bridge: prepared ai.edgeops nodes run as ONNX Runtime custom ops of a small C
library (``native.c``) instead of onnxruntime-extensions' Python custom ops.

Why. onnxruntime-extensions' bridge copies every input of a custom node into a new numpy array,
turns the node's attributes into a Python dict on every call and copies every output back. For
a memory-bound fused chain that is about a quarter of the node (figures:
docs/notes/ort-bridge.md, ``benchmarks/region_breakdown.py``). The library registers the same
op names, with the same fp32 inputs and outputs, in domain :data:`NATIVE_DOMAIN`.

Two paths per call. A kernel (one node or region of one session) whose kernels all have native
entries (:mod:`edgeops.plans`) is prepared, after its first call, as a *program*: the entries
with their held data, run by the library on ONNX Runtime's buffers without Python or the GIL,
intermediates in an arena from the kernel's own pool. Every other call enters Python through a
ctypes callback (which takes the GIL): the inputs handed over as read-only numpy views of ONNX
Runtime's tensors, the node's dispatch string read once per kernel, the outputs copied once
into ONNX Runtime's buffers. The Python function called is the one the onnxruntime-extensions
path calls (:func:`edgeops.ort.bridge.op_table`), so kernels, regions, fallback rules and error
recording behave the same; it calls the same compiled kernels as the programs, with the same
thread teams, so both paths give the same bits. Why a node runs through Python:
:data:`plan_failures`; what runs natively: :func:`programs`, :func:`counters`.

Where it is used. :func:`edgeops.ort.session` (so packages, ``edgeops run``, the lowering's
measurements) moves a prepared model's nodes to the native domain when the library is available;
:func:`edgeops.ort.register` and :func:`edgeops.ort.prepare` in a user's own session keep the
onnxruntime-extensions ops. ``EDGEOPS_NATIVE_BRIDGE=0`` turns it off;
``EDGEOPS_NATIVE_PLANS=0`` keeps the bridge but runs every call through Python.

Building. The library is compiled on first use with the C compiler (``$CC``, else ``cc``) into
``<edgeops cache>/native/`` (``$EDGEOPS_CACHE_DIR``, else ``~/.cache/edgeops``), keyed by the
source, the machine and ONNX Runtime's version, then checked once in a child process by running
a small session through it against numpy, its programs included (the library names ONNX
Runtime's C API entries by their index in its table: a mismatch must not reach a user's
process). Without a compiler, or if that check fails, sessions use onnxruntime-extensions, and
:func:`status` says why.
"""
from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path

import numpy as np

from edgeops.env import switch
from edgeops.plans import ORT_POOL, PREPARED, TRIAL

NATIVE_DOMAIN = "ai.edgeops.native"
ENV = "EDGEOPS_NATIVE_BRIDGE"
_SOURCE = Path(__file__).with_name("native.c")
_DONE_KEY = "edgeops.native_registered"
_DESC_LEN = 1024              # as DESC_LEN in native.c
ABI = 4                       # as edgeops_native_abi in native.c
_FLOAT = 1                    # ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT

_lock = threading.Lock()
_lib = None                   # the loaded library, once built and checked
_path: Path | None = None
_why: str | None = None       # why it is not used (None: not tried yet, or used)
_tried = False
_ops: list = []               # op index -> (op type, outputs, function)
_index: dict[str, int] = {}   # op type -> op index
_kernels: dict[int, tuple] = {}   # handle -> (function, dispatch string, outputs)
_handles = itertools.count()
_views: dict[int, np.ndarray] = {}   # a thread's call description buffer -> a view of it


def _ort_version() -> str:
    import onnxruntime
    return onnxruntime.__version__


def _key() -> str:
    h = hashlib.sha256(_SOURCE.read_bytes())
    h.update(f"|{platform.machine()}|{sys.platform}|{_ort_version()}".encode())
    return h.hexdigest()[:16]


def source_hash() -> str:
    """sha256 of the native.c beside this module (what a prebuilt library must embed)."""
    return hashlib.sha256(_SOURCE.read_bytes()).hexdigest()


PREBUILT = Path(__file__).with_name("_prebuilt")
PREBUILT_ENV = "EDGEOPS_NATIVE_PREBUILT"
_how: str | None = None       # "prebuilt" or "built" once used
_skipped: str | None = None   # why the prebuilt library was not used


def prebuilt_path(machine: str | None = None) -> Path:
    """Where the wheel's prebuilt library for ``machine`` (this one's by default) lies."""
    return PREBUILT / (machine or platform.machine()) / "edgeops_native.so"


def wanted() -> bool:
    """Whether sessions should use the native bridge (``EDGEOPS_NATIVE_BRIDGE`` is not 0)."""
    return switch(ENV, True)


def status() -> dict:
    """``{"used": bool, "how": "prebuilt" | "built" | None, "library": path or None, "why":
    reason when not used, "prebuilt": why the prebuilt library was not used (None when it
    was)}`` (finds, builds and checks the library if that was not tried yet in this process)."""
    lib = library()
    return {"used": lib is not None, "how": _how if lib is not None else None,
            "library": str(_path) if lib is not None else None, "why": _why,
            "prebuilt": _skipped}


def describe() -> str:
    """One line for ``edgeops doctor``: which bridge packages use here, and why."""
    st = status()
    if st["used"]:
        extra = f" (prebuilt not used: {st['prebuilt']})" if st["how"] != "prebuilt" else ""
        return f"native bridge {st['how']}: {st['library']}{extra}"
    return (f"native bridge not used ({st['why']}); packages run through "
            f"onnxruntime-extensions' Python custom ops, slower")


def library():
    """The loaded native library, or None (off, no compiler, or its check failed: see
    :func:`status`). Prebuilt (the wheel's, for this machine, when built from this native.c),
    else built with the C compiler once per machine; checked once per library and ONNX Runtime
    version; loaded once per process."""
    global _lib, _path, _why, _tried, _how
    if not wanted():
        _why = f"turned off ({ENV}=0)"
        return None
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        try:
            path, how = _prebuilt(), "prebuilt"
            if path is None:
                path, how = _build(), "built"
            _loadable(path)
            if not switch("EDGEOPS_NATIVE_SELFTEST", False):
                _check(path, how)
            _lib, _path, _how = _load(path), path, how
            _why = None
        except _Unavailable as e:
            _why = str(e)
        except (OSError, subprocess.SubprocessError) as e:   # e.g. an unwritable cache
            _why = f"{type(e).__name__}: {e}"
        _tried = True
    return _lib


def _prebuilt() -> Path | None:
    """The prebuilt library for this machine when it was built from this native.c, else None
    (and :data:`_skipped` says why)."""
    global _skipped
    p = prebuilt_path()
    if not switch(PREBUILT_ENV, True):
        _skipped = f"turned off ({PREBUILT_ENV}=0)"
    elif sys.platform != "linux" or not p.is_file():
        _skipped = f"none for {sys.platform}/{platform.machine()}"
    else:
        try:
            lib = ctypes.CDLL(str(p))
            lib.edgeops_native_source.restype = ctypes.c_char_p
            got = lib.edgeops_native_source().decode()
        except (OSError, AttributeError) as e:
            _skipped = f"{p} cannot be loaded here: {e}"
            return None
        if got == source_hash():
            _skipped = None
            return p
        _skipped = (f"{p} was built from another native.c (scripts/build_bridge.sh rebuilds "
                    f"it)")
    return None


class _Unavailable(Exception):
    pass


def _build() -> Path:
    from edgeops import cache
    out = cache.root() / "native" / f"edgeops_native-{_key()}.so"
    if out.is_file():
        return out
    cc = os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise _Unavailable(f"no C compiler ({cc!r} not found; install gcc or set CC)")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(_SOURCE), "-lpthread"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise _Unavailable(f"{cc} failed on {_SOURCE.name}: {r.stderr.strip()[-400:]}")
        os.replace(tmp, out)      # atomic: a concurrent build finds a whole file or none
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _loadable(path: Path) -> None:
    """Load the library in this process (harmless: nothing runs until a session registers it):
    a compiler that made it for another machine (a host compiler found under an emulated board)
    is caught here."""
    try:
        ctypes.CDLL(str(path))
    except OSError as e:
        raise _Unavailable(f"{path.name} cannot be loaded here: {e}") from None


def _check(path: Path, how: str = "built") -> None:
    """Run :func:`_selftest` in a child process once per library and ONNX Runtime version (a
    marker file in the cache keeps the verdict; a prebuilt library's lies where it may not be
    writable, so its marker goes to the cache): an ABI mismatch would crash the child, not
    this process."""
    mark = path.with_suffix(".checked")
    if how == "prebuilt":
        from edgeops import cache
        h = hashlib.sha256(path.read_bytes())
        h.update(f"|{_ort_version()}".encode())
        mark = cache.root() / "native" / f"prebuilt-{h.hexdigest()[:16]}.checked"
        mark.parent.mkdir(parents=True, exist_ok=True)
    if mark.is_file():
        verdict = mark.read_text()
        if verdict == "ok":
            return
        raise _Unavailable(verdict)
    # the child checks programs too: a caller's EDGEOPS_NATIVE_PLANS=0 (region_breakdown sets
    # it for its own sessions) must not fail the library's verdict for good
    env = dict(os.environ, EDGEOPS_NATIVE_SELFTEST="1", EDGEOPS_NATIVE_PLANS="1")
    try:
        r = subprocess.run([sys.executable, "-c", "from edgeops.ort import native; "
                            "native._selftest()"], capture_output=True, text=True, env=env,
                           timeout=300)
        ok = r.returncode == 0 and r.stdout.strip().endswith("native bridge ok")
        verdict = "ok" if ok else (f"its self-test failed (exit {r.returncode}): "
                                   f"{(r.stderr or r.stdout).strip()[-400:]}")
    except subprocess.TimeoutExpired:
        verdict = "its self-test did not finish in 300 s"
    tmp = mark.with_suffix(f".{os.getpid()}")
    tmp.write_text(verdict)
    os.replace(tmp, mark)
    if verdict != "ok":
        raise _Unavailable(verdict)


_CREATE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64)
_COMPUTE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p)


def _load(path: Path):
    lib = ctypes.CDLL(str(path))
    if lib.edgeops_native_abi() != ABI:
        raise _Unavailable(f"{path} is another version of the library; delete it")
    lib.edgeops_native_declare.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64]
    lib.edgeops_native_declare.restype = ctypes.c_int64
    lib.edgeops_native_output.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                          ctypes.c_int64]
    lib.edgeops_native_output.restype = ctypes.c_void_p
    lib.edgeops_native_take_dead.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.edgeops_native_take_dead.restype = ctypes.c_int64
    lib.edgeops_native_callbacks.argtypes = [_CREATE, _COMPUTE]
    lib.edgeops_native_fail.argtypes = [ctypes.c_char_p]
    lib.edgeops_native_status_compute.restype = ctypes.c_int
    lib.edgeops_native_publish.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_void_p]
    lib.edgeops_native_parallel_for.restype = ctypes.c_int
    lib.edgeops_native_step_mode.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.edgeops_native_step_mode.restype = ctypes.c_int
    lib.edgeops_native_publish.restype = ctypes.c_int
    lib.edgeops_native_has_program.argtypes = [ctypes.c_void_p]
    lib.edgeops_native_has_program.restype = ctypes.c_int
    lib.edgeops_native_counters.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.edgeops_native_counters.restype = ctypes.c_int64
    lib.edgeops_native_threads.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    from edgeops.ort.bridge import op_table
    for name, n_in, n_out, fn in op_table():
        i = lib.edgeops_native_declare(name.encode(), n_in, n_out)
        if i < 0:
            raise _Unavailable(f"the library refused op {name!r} (too many ops or too long)")
        while len(_ops) <= i:
            _ops.append(None)
        _ops[i] = (name, n_out, fn)
        _index[name] = i
    global _create_cb, _compute_cb, _output
    _create_cb, _compute_cb = _CREATE(_create), _COMPUTE(_compute)
    lib.edgeops_native_callbacks(_create_cb, _compute_cb)
    _output = lib.edgeops_native_output
    import atexit
    atexit.register(lib.edgeops_native_callbacks, _CREATE(), _COMPUTE())
    return lib


_create_cb = _compute_cb = _output = None
_dead = np.zeros(256, np.int64)


def _create(op, spec, n):
    """ONNX Runtime makes a kernel of op index ``op`` for a node whose dispatch string is
    ``spec``: a handle for its calls (-1: none; its calls then record the error)."""
    try:
        got = _lib.edgeops_native_take_dead(_dead.ctypes.data, _dead.size)
        for h in _dead[:got].tolist():
            _kernels.pop(h, None)
            _pending.pop(h, None)
            _published.pop(h, None)
            _trials.pop(h, None)
        name, n_out, fn = _ops[op]
        h = next(_handles)
        _kernels[h] = (fn, (spec or b"").decode(), n_out, name)
        if plans_wanted():
            _watch(h, name, _kernels[h][1])
        return h
    except BaseException:  # noqa: BLE001  (nothing may escape into ONNX Runtime)
        return -1


# Programs. Every node and region whose kernels have native entries (edgeops.plans) is
# prepared, after its first call through Python (which fixes its shapes and makes its held
# state: packed weights, chains), as one program: its steps' entries with their arrays and
# values, run by the library without Python or the GIL from then on. Thread teams are fixed
# when a step is made (a thread choice still timing is settled then, by timed calls of the
# kernel; a step that still cannot say is tried again on the next calls, at most PLAN_TRIES),
# never re-timed while serving.
PLAN_TRIES = 64
_pending: dict[int, list] = {}     # handle -> [calls left to try, region or None]
_published: dict[int, tuple] = {}  # handle -> what its program's memory belongs to
_trials: dict[int, list] = {}      # handle -> [(kernel, step, decision key, threads)] timing
plan_failures: deque = deque(maxlen=256)   # (node or region, why it runs through Python)
_sampled = threading.local()        # a region's slots from the call that just ran


def plans_wanted() -> bool:
    """Whether nodes get native programs (``EDGEOPS_NATIVE_PLANS`` is not 0)."""
    return switch("EDGEOPS_NATIVE_PLANS", True)


def _sample(env) -> None:
    _sampled.env = env


def _watch(handle, name, spec) -> None:
    """Mark kernel ``handle`` to be prepared as a program after its first call, compiling the
    entries its kernels have now, while ONNX Runtime makes the session."""
    from edgeops.ort import regions
    from edgeops.ort.dispatch import resolve
    try:
        if name.startswith(_REGION):
            region = regions.resolve(spec)
            region.warm_native()
            region.sample = _sample
        else:
            region = None
            k = resolve(spec).kernel
            if k is not None and k.native is None:
                return
            if k is not None and k.plans is not None:
                k.plans()
    except Exception as e:  # noqa: BLE001  (the node still runs through Python)
        plan_failures.append((name, f"{type(e).__name__}: {e}"))
        return
    _pending[handle] = [PLAN_TRIES, region]


def _plan(handle, spec, ins, kernel) -> None:
    """After a call of kernel ``handle`` through Python (``ins``: its inputs, still valid):
    publish its program when every step has one."""
    st = _pending[handle]
    region = st[1]
    if region is not None:
        env, _sampled.env = getattr(_sampled, "env", None), None
        if env is None:
            return
        steps = region.native_steps(env)
        where = region.name
    else:
        from edgeops.ort.dispatch import resolve
        d = resolve(spec)
        step = d.native_step(ins)
        steps = step if step is None or isinstance(step, str) else \
            [(step, tuple(step.reads), tuple(range(len(step.outputs))))]
        where = d.node
        env = None
    if steps is None:
        st[0] -= 1
        if st[0] <= 0:
            del _pending[handle]
            plan_failures.append((where, f"not ready after {PLAN_TRIES} calls"))
        return
    del _pending[handle]
    if region is not None:
        region.sample = None if not _pending_regions(region) else region.sample
    if isinstance(steps, str):
        plan_failures.append((where, steps))
        return
    n_in = region.n_in if region is not None else len(ins)
    outputs = region.outputs if region is not None else tuple(range(len(steps[0][0].outputs)))
    _hand_threads()
    words, fns, arrs, vals, cvals, keep = _program(steps, n_in, outputs, region is not None)
    rc = _lib.edgeops_native_publish(kernel, words.ctypes.data, words.size, fns.ctypes.data,
                                     arrs.ctypes.data, vals.ctypes.data, cvals.ctypes.data)
    if rc == 0:
        _published[handle] = (words, fns, arrs, vals, keep, cvals)
        timing = [(kernel, i, s.split.key, s.split.chunks) for i, s in enumerate(keep)
                  if s.split is not None and s.split.mode == TRIAL]
        if timing:
            _trials[handle] = timing
    else:
        plan_failures.append((where, f"the library refused its program ({rc})"))


_threads_handed = []


def _hand_threads() -> None:
    """Give the library the threading layer's team get/set, once (started first)."""
    if _threads_handed:
        return
    from edgeops.plans import prepare_numba
    from numba.np.ufunc import parallel
    prepare_numba()
    get, put = parallel._get_num_threads, parallel._set_num_threads
    _lib.edgeops_native_threads(ctypes.cast(get, ctypes.c_void_p),
                                ctypes.cast(put, ctypes.c_void_p))
    _threads_handed.append((get, put))


def _pending_regions(region) -> bool:
    return any(r is region for _c, r in _pending.values())


def _program(steps, n_in: int, outputs, region: bool):
    """The program's description for native.c's edgeops_native_publish: int64 words and the
    steps' entry, arrays and values pointer tables (and what keeps them alive). Buffers: the
    call's inputs (slots 0..n_in-1), its outputs, then intermediates in the arena.
    ``outputs``: the slot of each output (a lone node: its outputs are slots n_in + j)."""
    from edgeops.plans import ALIGN, ELEMENT_TYPES
    buf: dict = {}
    ins: dict = {}            # input slot -> (dtype, shape) as read
    for step, reads, _w in steps:
        for slot, (dt, shape) in zip(reads, step.inputs):
            if slot < n_in:
                ins[slot] = (dt, tuple(shape))
    out_of = {}
    for step, _r, writes in steps:
        for slot, spec in zip(writes, step.outputs):
            if slot is not None:
                out_of[slot] = (spec[0], tuple(spec[1]))
    if not region:
        outputs = tuple(range(len(steps[0][0].outputs)))
        steps = [(s, r, tuple(n_in + j for j in range(len(w)))) for s, r, w in steps]
        out_of = {n_in + j: v for j, v in enumerate(steps[0][0].outputs)}
        outputs = tuple(n_in + j for j in outputs)
    for i in range(n_in):
        buf[i] = i
    for j, slot in enumerate(outputs):
        buf[slot] = n_in + j
    mids, off = [], 0
    for step, _r, writes in steps:
        for slot, (dt, shape) in zip(writes, step.outputs):
            if slot is None or slot in buf:
                continue
            buf[slot] = n_in + len(outputs) + len(mids)
            mids.append(off)
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
            off += -(-nbytes // ALIGN) * ALIGN
    scratch_off = off
    arena = off + max((-(-s.scratch // ALIGN) * ALIGN for s, _r, _w in steps), default=0)
    words = [3, n_in, len(outputs), len(steps), len(mids), arena, scratch_off]
    for i in range(n_in):
        if i in ins:
            dt, shape = ins[i]
            words += [1, ELEMENT_TYPES[dt], len(shape), *shape]
        else:
            words += [0, 0, 0]
    for slot in outputs:
        _dt, shape = out_of[slot]
        words += [len(shape), *shape]
    words += mids
    for step, reads, writes in steps:
        args = [buf[r] for r in reads] + [buf[w] for w in writes if w is not None]
        words += [len(args), *args, int(_team(step))]
        sp = _split(step, len(args))
        words += [0] if sp is None else [sp.units, sp.grain, sp.count_word, sp.values.size,
                                         sp.chunks, sp.mode, *sp.strides]
    fns = np.array([s.address for s, _r, _w in steps], np.uintp)
    arrs = np.array([s.pointers.ctypes.data for s, _r, _w in steps], np.uintp)
    vals = np.array([s.values.ctypes.data for s, _r, _w in steps], np.uintp)
    cvals = np.array([0 if _split(s, 0) is None else s.split.values.ctypes.data
                      for s, _r, _w in steps], np.uintp)
    return (np.array(words, np.int64), fns, arrs, vals, cvals,
            tuple(s for s, _r, _w in steps))


def _split(step, n_args: int):
    """The step's split when the runtime can run it: ONNX Runtime's ParallelFor present and more
    than one chunk (else the step runs as prepared, its split unused)."""
    sp = step.split
    if sp is None or sp.chunks < 2 or sp.units < 1 or not _lib.edgeops_native_parallel_for():
        return None
    if n_args and len(sp.strides) != n_args:
        return None
    return sp


def _team(step) -> int:
    return step.threads if step.threads and step.threads > 0 else 0


_FEED_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
               "tensor(float16)": np.float16, "tensor(int64)": np.int64,
               "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
               "tensor(bool)": np.bool_}


def prepare_programs(sess) -> bool:
    """Run session ``sess`` once on zeros when every input's type and shape are static, so its
    nodes are prepared as programs (held state made, thread teams fixed, arenas allocated) while
    the session is made rather than on the first real call; True when it ran. Failures are not
    the caller's: whatever the run recorded is dropped, and the nodes are then prepared on their
    first real call instead."""
    from edgeops.ort.errors import take_errors
    feeds = {}
    for i in sess.get_inputs():
        dt = _FEED_TYPES.get(i.type)
        if dt is None or not all(isinstance(d, int) and d >= 0 for d in i.shape):
            return False
        feeds[i.name] = np.zeros(i.shape, dt)
    try:
        from onnxruntime import InferenceSession
        from edgeops.ort.fallback import unrecorded
        known = set(_trials)
        with unrecorded():
            InferenceSession.run(sess, None, feeds)
            timing = [h for h in list(_trials) if h not in known]
            if timing:         # steps timing their ways: run until each has decided
                for _ in range(TRIAL_CALLS):
                    InferenceSession.run(sess, None, feeds)
                _settle_trials(timing)
    except Exception as e:  # noqa: BLE001  (the first real call prepares them instead)
        plan_failures.append(("session", f"warm-up run on zeros: {type(e).__name__}: {e}"))
        take_errors()
        return False
    take_errors()
    return True


TRIAL_CALLS = 14      # native.c: 2 * (TRIALS + 1) calls, alternating ways


def _settle_trials(handles) -> None:
    """Keep what the timed steps of these kernels decided, for later sessions on this machine
    (edgeops.threads' record); a step still timing keeps timing on its first real calls."""
    from edgeops.threads import remember
    for h in handles:
        for kernel, i, key, threads in _trials.pop(h, ()):
            mode = _lib.edgeops_native_step_mode(kernel, i)
            if mode in (PREPARED, ORT_POOL):
                remember(key, threads, "ort" if mode == ORT_POOL else "numba")


def counters() -> dict:
    """The library's counters: live programs, calls run natively / through Python, bytes of the
    live arena pools, arenas allocated past a pool, entries that failed, calls whose inputs did
    not match their program (all zero when the library is not used)."""
    names = ("programs", "native_calls", "python_calls", "pool_bytes", "overflow_arenas",
             "entry_failures", "mismatched_calls")
    out = np.zeros(len(names), np.int64)
    if library() is not None:
        _lib.edgeops_native_counters(out.ctypes.data, out.size)
    return dict(zip(names, out.tolist()))


def programs() -> dict:
    """{handle: [each step's description (edgeops.plans.NativeStep.describe)]} of the kernels
    that run from programs (what an ahead-of-time runtime would load)."""
    return {h: [s.describe() for s in v[4]] for h, v in list(_published.items())}


_REGION = "Region_"


class _Tensor:
    """A read-only fp32 tensor in ONNX Runtime's memory, as numpy sees it (no copy)."""
    __slots__ = ("__array_interface__",)

    def __init__(self, addr, shape):
        self.__array_interface__ = {"data": (addr, True), "shape": shape, "typestr": "<f4",
                                    "version": 3}


def _compute(handle, context, desc, kernel):
    """One call of a kernel: inputs from ``desc`` (see native.c), outputs into ONNX Runtime's
    buffers. Never raises: failures are recorded as the other bridge records them."""
    from edgeops.ort import errors
    stop = _status_compute()
    n0 = errors.recorded()
    quiet = errors.set_quiet(True) if stop else None
    try:
        k = _kernels.get(handle)
        if k is None:
            raise RuntimeError("the node's kernel was not made (see the error before this)")
        fn, spec, n_out, name = k
        d = _views.get(desc)
        if d is None:
            if len(_views) >= 256:        # threads come and go: their buffers' views too
                _views.clear()
            d = _views[desc] = np.frombuffer((ctypes.c_int64 * _DESC_LEN).from_address(desc),
                                             np.int64)
        n, words = d[0:2].tolist()
        if n < 0:
            raise RuntimeError("ONNX Runtime's inputs could not be read")
        w = d[2:2 + words].tolist()
        ins, pos = [], 0
        for _ in range(n):
            addr, et, rank = w[pos:pos + 3]
            shape = tuple(w[pos + 3:pos + 3 + rank])
            pos += 3 + rank
            if et != _FLOAT:
                raise RuntimeError(f"input of element type {et}, not fp32")
            ins.append(np.asarray(_Tensor(addr, shape)) if addr else
                       np.zeros(shape, np.float32))
        rv = fn(*ins, edgeops_dispatch=spec)
        outs = rv if isinstance(rv, tuple) else (rv,)
        if len(outs) != n_out:
            raise RuntimeError(f"{name} returned {len(outs)} outputs, declared {n_out}")
        for j, y in enumerate(outs):
            if type(y) is not np.ndarray or y.dtype != np.float32 or not y.flags.c_contiguous:
                y = np.ascontiguousarray(y, np.float32)
            dims = np.array(y.shape, np.int64)
            dst = _output(context, j, dims.ctypes.data, y.ndim)
            if not dst:
                if y.size:
                    raise RuntimeError(f"ONNX Runtime gave no buffer for output {j} {y.shape}")
                continue
            ctypes.memmove(dst, y.ctypes.data, y.nbytes)
        if stop and errors.recorded() > n0:     # the kernel failed (recorded, NaN outputs)
            return _fail(errors.since(n0))
        if handle in _pending:
            try:
                _plan(handle, spec, ins, kernel)
            except Exception as e:  # noqa: BLE001  (the call itself succeeded: keep Python's way)
                _pending.pop(handle, None)
                plan_failures.append((name, f"{type(e).__name__}: {e}"))
        return 0
    except BaseException as e:  # noqa: BLE001  (nothing may escape into ONNX Runtime)
        try:
            errors.record_error(f"native bridge: {type(e).__name__}: {e}")
            return _fail(errors.since(n0))
        except BaseException:  # noqa: BLE001
            return 1
    finally:
        if stop:
            errors.set_quiet(quiet)


def _status_compute() -> bool:
    """Whether the ops were registered with the status-returning compute (ONNX Runtime >= 1.16:
    a failing kernel then stops the run with its message)."""
    return bool(_lib is not None and _lib.edgeops_native_status_compute())


def _fail(messages) -> int:
    """Hand the library the failing call's message (its status for ONNX Runtime); nonzero."""
    msg = "; ".join(messages) or "edgeops kernel failed"
    _lib.edgeops_native_fail(msg.encode("utf-8", "replace")[:2000])
    return 1


def adopt(model) -> bool:
    """Move the prepared ai.edgeops nodes of ``model`` (in place) to :data:`NATIVE_DOMAIN` when
    the library is available; True when any moved. Nodes of ops the library does not declare
    stay with onnxruntime-extensions."""
    from edgeops.ops import EDGEOPS_DOMAIN
    from edgeops.ort.dispatch import DISPATCH_ATTR
    if library() is None:
        return False
    moved = False
    for n in model.graph.node:
        if (n.domain == EDGEOPS_DOMAIN and n.op_type in _index
                and any(a.name == DISPATCH_ATTR for a in n.attribute)):
            n.domain = NATIVE_DOMAIN
            moved = True
    if moved and not any(o.domain == NATIVE_DOMAIN for o in model.opset_import):
        from onnx import helper
        model.opset_import.append(helper.make_opsetid(NATIVE_DOMAIN, 1))
    return moved


def register(so) -> None:
    """Register the library on SessionOptions ``so`` (once per ``so``)."""
    if library() is None:
        raise RuntimeError(f"the native bridge is not available: {_why}")
    try:
        done = so.get_session_config_entry(_DONE_KEY)
    except RuntimeError:
        done = None
    if done is None:
        so.register_custom_ops_library(str(_path))
        so.add_session_config_entry(_DONE_KEY, "1")


def _selftest() -> None:
    """Child process of :func:`_check`: a prepared two-node region and a lone node through the
    library, against numpy, then the region run from a native program; prints "native bridge
    ok" and exits 0 only if all match."""
    from onnx import TensorProto, helper
    import onnxruntime as ort
    from edgeops.ops import EDGEOPS_DOMAIN
    from edgeops.ort import prepare, register as reg
    from edgeops.ort.errors import raise_errors
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    want_r = 1 / (1 + np.exp(-np.maximum(x, 0)))
    nodes = [helper.make_node("Relu", ["x"], ["r"], domain=EDGEOPS_DOMAIN),
             helper.make_node("Sigmoid", ["r"], ["y"], domain=EDGEOPS_DOMAIN),
             helper.make_node("Neg", ["x"], ["z"])]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(EDGEOPS_DOMAIN, 1)])
    for use_regions in (True, False):
        so = reg(ort.SessionOptions(), "reference")
        p = prepare(m, "reference", regions=use_regions)
        if not adopt(p):
            raise SystemExit(f"nothing adopted: {_why}")
        register(so)
        s = ort.InferenceSession(p.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for _ in range(3):
            y, z = s.run(None, {"x": x})
            raise_errors()
            if not (np.allclose(y, want_r, rtol=1e-6, atol=1e-7) and np.array_equal(z, -x)):
                raise SystemExit(f"wrong outputs (regions={use_regions})")
    # programs: the same region on the neon target, its later calls run natively
    from edgeops.pipeline.targets import load_targets
    load_targets()
    so = reg(ort.SessionOptions(), "neon")
    p = prepare(m, "neon")
    adopt(p)
    register(so)
    s = ort.InferenceSession(p.SerializeToString(), so, providers=["CPUExecutionProvider"])
    before = counters()["native_calls"]
    for _ in range(3):
        y, z = s.run(None, {"x": x})
        raise_errors()
        if not (np.allclose(y, want_r, rtol=1e-6, atol=1e-7) and np.array_equal(z, -x)):
            raise SystemExit("wrong outputs from a native program")
    if counters()["native_calls"] - before != 2:
        raise SystemExit(f"the region did not run from its program: {list(plan_failures)}")
    print(json.dumps({"library": str(_path)}))
    print("native bridge ok")
