"""The native bridge: prepared ai.edgeops nodes run as ONNX Runtime custom ops of a small C
library (``native.c``) instead of onnxruntime-extensions' Python custom ops.

Why. onnxruntime-extensions' bridge copies every input of a custom node into a new numpy array,
turns the node's attributes into a Python dict on every call and copies every output back. For
a memory-bound fused chain that is about a quarter of the node (figures:
docs/notes/ort-bridge.md, ``benchmarks/region_breakdown.py``). The library registers the same
op names, with the same fp32 inputs and outputs, in domain :data:`NATIVE_DOMAIN`; each call
enters Python through a ctypes callback (which takes the GIL), the inputs handed over as
read-only numpy views of ONNX Runtime's own tensors, the node's dispatch string read once per
kernel, and the outputs copied once into ONNX Runtime's buffers. The Python function called is
the one the onnxruntime-extensions path calls (:func:`edgeops.ort.bridge.op_table`), so kernels,
regions, fallback rules and error recording behave the same.

Where it is used. :func:`edgeops.ort.session` (so packages, ``edgeops run``, the lowering's
measurements) moves a prepared model's nodes to the native domain when the library is available;
:func:`edgeops.ort.register` and :func:`edgeops.ort.prepare` in a user's own session keep the
onnxruntime-extensions ops. ``EDGEOPS_NATIVE_BRIDGE=0`` turns it off.

Building. The library is compiled on first use with the C compiler (``$CC``, else ``cc``) into
``<edgeops cache>/native/`` (``$EDGEOPS_CACHE_DIR``, else ``~/.cache/edgeops``), keyed by the
source, the machine and ONNX Runtime's version, then checked once in a child process by running
a small session through it against numpy (the library names ONNX Runtime's C API entries by
their index in its table: a mismatch must not reach a user's process). Without a compiler, or
if that check fails, sessions use onnxruntime-extensions, and :func:`status` says why.
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

NATIVE_DOMAIN = "ai.edgeops.native"
ENV = "EDGEOPS_NATIVE_BRIDGE"
_SOURCE = Path(__file__).with_name("native.c")
_DONE_KEY = "edgeops.native_registered"
_DESC_LEN = 1024              # as DESC_LEN in native.c
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


def wanted() -> bool:
    """Whether sessions should use the native bridge (``EDGEOPS_NATIVE_BRIDGE`` is not 0)."""
    return switch(ENV, True)


def status() -> dict:
    """``{"used": bool, "library": path or None, "why": reason when not used}`` (builds and
    checks the library if that was not tried yet in this process)."""
    lib = library()
    return {"used": lib is not None, "library": str(_path) if lib is not None else None,
            "why": _why}


def library():
    """The loaded native library, or None (off, no compiler, or its check failed: see
    :func:`status`). Built and checked once per machine, loaded once per process."""
    global _lib, _path, _why, _tried
    if not wanted():
        _why = f"turned off ({ENV}=0)"
        return None
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        try:
            path = _build()
            _loadable(path)
            if not switch("EDGEOPS_NATIVE_SELFTEST", False):
                _check(path)
            _lib, _path = _load(path), path
            _why = None
        except _Unavailable as e:
            _why = str(e)
        except (OSError, subprocess.SubprocessError) as e:   # e.g. an unwritable cache
            _why = f"{type(e).__name__}: {e}"
        _tried = True
    return _lib


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


def _check(path: Path) -> None:
    """Run :func:`_selftest` in a child process once per built library (a marker file keeps the
    verdict): an ABI mismatch would crash the child, not this process."""
    mark = path.with_suffix(".checked")
    if mark.is_file():
        verdict = mark.read_text()
        if verdict == "ok":
            return
        raise _Unavailable(verdict)
    env = dict(os.environ, EDGEOPS_NATIVE_SELFTEST="1")
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
    if lib.edgeops_native_abi() != 1:
        raise _Unavailable(f"{path} is another version of the library; delete it")
    lib.edgeops_native_declare.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64]
    lib.edgeops_native_declare.restype = ctypes.c_int64
    lib.edgeops_native_output.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                          ctypes.c_int64]
    lib.edgeops_native_output.restype = ctypes.c_void_p
    lib.edgeops_native_take_dead.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.edgeops_native_take_dead.restype = ctypes.c_int64
    lib.edgeops_native_callbacks.argtypes = [_CREATE, _COMPUTE]
    lib.edgeops_native_set_plan.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    lib.edgeops_native_set_plan.restype = ctypes.c_int
    lib.edgeops_native_plan_active.argtypes = [ctypes.c_void_p]
    lib.edgeops_native_plan_active.restype = ctypes.c_int
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
            _planning.pop(h, None)
        name, n_out, fn = _ops[op]
        h = next(_handles)
        _kernels[h] = (fn, (spec or b"").decode(), n_out, name)
        if plans_wanted() and name.startswith(_REGION):
            _watch(h, _kernels[h][1])
        return h
    except BaseException:  # noqa: BLE001  (nothing may escape into ONNX Runtime)
        return -1


# Plans. A region that is one fused norm chain (edgeops.ort.regions._Region.native_plan) is
# compiled, once its chain's thread choice is made, to a cfunc that the library runs for later
# calls without entering Python at all: no GIL, no numpy objects, X read and Y written in ONNX
# Runtime's buffers. After PLAN_CALLS such calls the library hands calls to Python again until
# the chain's ThreadChoice has revisited its choice (_revisit_wait() calls cover a whole
# revisit), then the region is planned again the way that choice now says.
_REGION = "Region_"
PLAN_CALLS = 4096
_planning: dict[int, list] = {}   # handle -> [calls to let pass, plan in use, plans published]
plan_failures: deque = deque(maxlen=64)   # why regions could not be planned (run via Python)


def plans_wanted() -> bool:
    """Whether regions get native plans (``EDGEOPS_NATIVE_PLANS`` is not 0)."""
    return switch("EDGEOPS_NATIVE_PLANS", True)


def _watch(handle, spec) -> None:
    """Plan region kernel ``handle`` when its calls allow (see :func:`_plan`), if it is one
    chain; the plans' cfunc is compiled now, while ONNX Runtime makes the session (~1-2 s once
    per process), rather than inside a run."""
    from edgeops.ort import regions
    try:
        if not regions.resolve(spec).warm_native():
            return
    except Exception as e:  # noqa: BLE001  (the region still runs through Python)
        plan_failures.append(f"{type(e).__name__}: {e}")
        return
    _planning[handle] = [0, None, []]     # [Python calls to let pass, plan in use, every plan
    #                                       published: the library may still be running one]


def _revisit_wait() -> int:
    from edgeops.threads import ThreadChoice
    return ThreadChoice.REVISIT + ThreadChoice().trials + 2


def _plan(handle, spec, shape, kernel) -> None:
    """After a call of region kernel ``handle`` through Python: publish its plan when it has
    one (a call through Python while a plan was in use means the library dropped it)."""
    st = _planning[handle]
    if st[1] is not None:
        if _lib.edgeops_native_plan_active(kernel):
            return                    # a call with an input of another size
        st[0], st[1] = _revisit_wait(), None    # dropped after PLAN_CALLS: a revisit first
    if st[0] > 0:
        st[0] -= 1
        return
    from edgeops.ort import regions
    plan = regions.resolve(spec).native_plan(shape)
    if plan is False:                 # this region never has one
        del _planning[handle]
    elif plan is not None and _lib.edgeops_native_set_plan(
            kernel, plan.address, plan.arrays.ctypes.data, plan.values.ctypes.data,
            plan.elements, PLAN_CALLS) == 0:
        st[1] = plan
        if all(p is not plan for p in st[2]):   # alive as long as the kernel (the library
            st[2].append(plan)                  # frees no plan a call may still be running)


class _Tensor:
    """A read-only fp32 tensor in ONNX Runtime's memory, as numpy sees it (no copy)."""
    __slots__ = ("__array_interface__",)

    def __init__(self, addr, shape):
        self.__array_interface__ = {"data": (addr, True), "shape": shape, "typestr": "<f4",
                                    "version": 3}


def _compute(handle, context, desc, kernel):
    """One call of a kernel: inputs from ``desc`` (see native.c), outputs into ONNX Runtime's
    buffers. Never raises: failures are recorded as the other bridge records them."""
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
        if handle in _planning:
            try:
                _plan(handle, spec, ins[0].shape, kernel)
            except Exception as e:  # noqa: BLE001  (the call itself succeeded: keep Python's way)
                _planning.pop(handle, None)
                plan_failures.append(f"{name}: {type(e).__name__}: {e}")
        return 0
    except BaseException as e:  # noqa: BLE001  (nothing may escape into ONNX Runtime)
        try:
            from edgeops.ort.errors import record_error
            record_error(f"native bridge: {type(e).__name__}: {e}")
        except BaseException:  # noqa: BLE001
            pass
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
    library, against numpy; prints "native bridge ok" and exits 0 only if both match."""
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
    print(json.dumps({"library": str(_path)}))
    print("native bridge ok")
