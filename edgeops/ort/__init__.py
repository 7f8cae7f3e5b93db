"""Run ``ai.edgeops`` ops inside ONNX Runtime, through onnxruntime-extensions' Python custom ops.

Usage, in your own session::

    so = onnxruntime.SessionOptions()
    edgeops.ort.register(so, target="reference")
    model = edgeops.ort.prepare(model)           # see "Why prepare" below
    sess = onnxruntime.InferenceSession(model.SerializeToString(), so)
    outputs = sess.run(None, feeds)
    edgeops.ort.raise_errors()                   # kernel failures of this thread's last runs

or ``edgeops.ort.session(model_or_path, target=...)``, which does all of that and raises kernel
failures from ``run`` itself, and runs the prepared nodes through edgeops' native bridge where it
is built (:mod:`edgeops.ort.native`: no copies of the inputs, fused norm-chain regions run without
entering Python). Running ai.edgeops nodes needs Python in the ONNX Runtime process.

How dispatch works. onnxruntime-extensions registers ONE Python function per op name for the
whole process, so the target cannot be a global switch (two sessions with different targets
would race on it). :func:`prepare` writes everything a node needs into one string attribute,
``edgeops_dispatch`` (JSON: op attributes, target, optional ``kernel`` id and ``tiling`` taken
from the node's own attributes of those names, which inputs are present); the op's function
looks the kernel up per call from that string, cached, so every node carries its own choice.
Without a ``kernel`` attribute a node gets the highest-priority kernel of its target that
accepts its inputs, then the ``reference`` kernel.

Why prepare. The bridge declares every input required and every declared attribute mandatory
(a missing one fails session creation), and it prints float attributes with 6 digits. So each op
is registered with its full input list and one string attribute; prepare pads omitted optional
inputs with an empty fp32 placeholder, carries attributes exactly, and checks kernel ids, tiling
JSON and attributes with clear errors, because at run time a Python exception inside a custom op
aborts the process (pybind11's error escapes the bridge). The op function therefore never
raises: it records the error and returns NaN outputs; :func:`session`'s ``run`` raises it, or
:func:`raise_errors` in your own session. A package's session follows its manifest's fallback
rules instead: a failing kernel runs the op's numpy reference for that call, warned once per node
and counted in :func:`fallback_counts` (:mod:`edgeops.ort.fallback`).

Held constants. The bridge copies every input into a new numpy array on every call, weights
included. :func:`prepare` therefore takes each ai.edgeops node's fp32 inputs that are graph
initializers (not overridable graph inputs) or Constant outputs out of the node: the node is fed
the empty placeholder there, the array is held in this process under a sha256 digest of its
content, named in ``edgeops_dispatch``, and handed back to the kernel on every call, the same
read-only object (:mod:`edgeops.ort.consts`). An initializer other standard nodes still use
stays in the graph for ONNX Runtime; one no node uses any more is dropped from the prepared copy.
So a prepared model runs only in the process that prepared it; packages store the unprepared
model and :func:`session` prepares it. ``prepare(..., hold_constants=False)`` keeps the copies.

Dtypes. The bridge aborts on fp16 tensors, so ai.edgeops nodes are declared fp32 (ONNX Runtime
refuses an fp16 input when the session is made); a kernel that computes in fp16 gets its inputs
converted inside the call. The bridge returns outputs through ``.tolist()``, slow for large
tensors; edgeops' op functions return arrays whose ``tolist()`` is the array itself, so no
list is built and nothing of onnxruntime-extensions is patched (docs/notes/ort-bridge.md).

Threads. A custom op runs on the thread that called ``run``, holding the GIL; its kernel may use
Numba's pool (GNU OpenMP by default). ONNX Runtime's intra-op threads spin-wait between ops and
OpenMP workers spin after each parallel region, so on few cores each side waits for the other's
spinners to be descheduled, many-fold slower than with neither spinning. A purely passive pool
pays a futex wake-up of its workers at every parallel region, and GNU OpenMP's
``GOMP_SPINCOUNT`` bounds spinning instead, but that collapses as soon as another thread pool in
the process spins too (a plain ONNX Runtime session run alongside). A package shares its process
with whatever sessions the user runs, so the default stays passive; ``GOMP_SPINCOUNT`` is the
lever for a process that runs only edgeops sessions (figures: docs/notes/threads.md).
So :func:`register` turns ORT's spinning off (``session.intra_op.allow_spinning`` and
``session.inter_op.allow_spinning`` = "0"), sets ``OMP_WAIT_POLICY=PASSIVE`` unless the
environment sets it or ``GOMP_SPINCOUNT`` (they only take effect before OpenMP starts: a
warning says when that was too late), runs nodes sequentially (parallel execution only queues
on the GIL) and keeps intra_op_num_threads at the core count.
Settings the caller made are kept.

Wait policies (:data:`WAIT_POLICIES`). ``passive`` is that default. ``spin`` bounds the workers'
spinning (:data:`SPIN_COUNT` spins), so that back-to-back kernels find them awake; a
package is compiled with one (``edgeops compile --omp-wait``: its lowering is measured in a
process running it, the kernel table is keyed by it) and names it in its manifest, and
``Package.session`` applies it when nothing has started OpenMP yet, else warns that the package
runs at other speeds than measured. ``EDGEOPS_OMP_WAIT`` picks the process's policy.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from edgeops.ort.bridge import declare_ops, session_class
from edgeops.ort.dispatch import (DISPATCH_ATTR, LOWERABLE_STANDARD_OPS, make_spec, opdef_for,
                                  resolve)
from edgeops.ort.errors import KernelRuntimeError, OrtIntegrationError, raise_errors, take_errors
from edgeops.ort.fallback import fallback_counts, reset_fallback_counts

PLACEHOLDER = "edgeops.absent"
_TARGET_KEY, _DONE_KEY = "edgeops.target", "edgeops.registered"
_SETTINGS_KEY = "edgeops.settings"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def _entry(so, key: str) -> str | None:
    try:
        return so.get_session_config_entry(key)
    except RuntimeError:   # ONNX Runtime raises for an absent key
        return None


# How Numba's OpenMP workers wait between parallel regions (see "Threads"). ``passive``: they
# sleep at once, every region pays their wake-up and nothing spins against ONNX Runtime's
# threads: safe whatever else the process runs. ``spin``: they spin a bounded while first, so
# back-to-back regions and runs find them awake. It costs ONNX Runtime nodes that run right
# after an edgeops one in the same process up to that while, so a package chooses it (``edgeops
# compile --omp-wait``, manifest ``runtime.omp_wait_policy``) and its lowering is measured with
# it (figures: docs/notes/threads.md).
SPIN_COUNT = 30000
WAIT_POLICIES = {"passive": {"OMP_WAIT_POLICY": "PASSIVE"},
                 "spin": {"GOMP_SPINCOUNT": str(SPIN_COUNT)}}
OPENMP_ENV = WAIT_POLICIES["passive"]
_USER_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def _policy_name(policy: str | None) -> str:
    name = (policy or os.environ.get("EDGEOPS_OMP_WAIT") or "passive").strip().lower()
    if name not in WAIT_POLICIES:
        raise OrtIntegrationError(f"unknown OpenMP wait policy {policy or name!r} "
                                  f"(EDGEOPS_OMP_WAIT or --omp-wait); known: "
                                  f"{', '.join(WAIT_POLICIES)}")
    return name


def openmp_started() -> bool:
    """Whether GNU OpenMP is loaded in this process (Numba's pool started): its wait policy is
    then fixed. False where that cannot be read (not Linux)."""
    try:
        with open("/proc/self/maps") as f:
            return "libgomp" in f.read()
    except OSError:
        return False


def wait_policy() -> str:
    """The wait policy this process's OpenMP runs (or will run) with, from its environment:
    ``passive``, ``spin``, or the user's own setting as ``NAME=value``; ``default`` when nothing
    chose one (GNU OpenMP then spins several ms)."""
    env = {k: os.environ[k].strip() for k in _USER_KEYS if k in os.environ}
    for name, want in WAIT_POLICIES.items():
        if env == want:
            return name
    if env.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE" or env.get("GOMP_SPINCOUNT") == "0":
        return "passive"
    return ",".join(f"{k}={v}" for k, v in sorted(env.items())) or "default"


def configure_openmp(policy: str | None = None) -> bool:
    """Set the environment of wait policy ``policy`` (:data:`WAIT_POLICIES`; None: the one
    ``EDGEOPS_OMP_WAIT`` names, else ``passive``) unless the environment already chose one (see
    "Threads"); call it before anything starts OpenMP (Numba's first parallel kernel). True
    when it set them."""
    name = _policy_name(policy)
    if any(k in os.environ for k in _USER_KEYS):    # the user's choice, or an earlier call's
        return False
    os.environ.update(WAIT_POLICIES[name])
    _ours.update(WAIT_POLICIES[name])
    os.environ[_MARK] = ";".join(f"{k}={v}" for k, v in sorted(_ours.items()))
    return True


# What configure_openmp set, not the user: it may still be changed. Child processes inherit the
# environment, so the marker tells them too (a serve worker or a benchmark run from an edgeops
# process would otherwise take the parent's default for the user's choice).
_MARK = "EDGEOPS_OMP_WAIT_SET"
_ours: dict[str, str] = dict(kv.split("=", 1) for kv in os.environ.get(_MARK, "").split(";")
                             if "=" in kv)


def _chosen_by_user() -> bool:
    return any(k in os.environ and os.environ[k] != _ours.get(k) for k in _USER_KEYS)


def use_wait_policy(policy: str | None, why: str) -> str:
    """Make this process's OpenMP run with ``policy`` (None: keep what it has, else passive);
    returns the policy it runs with. Raises OrtIntegrationError when OpenMP already started with
    another one or the environment chose another (a package must be measured and run with the
    policy it names); ``why`` says who asked."""
    if policy is None:
        configure_openmp()
        return wait_policy()
    name = _policy_name(policy)
    if wait_policy() == name:
        return name
    if not openmp_started() and not _chosen_by_user():
        for k in (*_USER_KEYS, _MARK):
            os.environ.pop(k, None)
        _ours.clear()
        configure_openmp(name)
        import sys
        threads = sys.modules.get("edgeops.threads")
        if threads is not None:      # its reading of the policy, taken before this change
            threads.forget_policy()
        return name
    where = ("OpenMP already started in this process" if openmp_started()
             else "the environment sets " + ", ".join(f"{k}={os.environ[k]}" for k in _USER_KEYS
                                                     if k in os.environ))
    raise OrtIntegrationError(
        f"{why} needs OpenMP wait policy {name!r}, but this process runs {wait_policy()!r} "
        f"({where}); run it in a fresh process (the edgeops CLI is one), or set EDGEOPS_OMP_WAIT="
        f"{name} and unset OMP_WAIT_POLICY/GOMP_SPINCOUNT before anything starts OpenMP")


def _passive_openmp() -> None:
    if not configure_openmp() or not openmp_started():
        return
    import warnings
    from edgeops.errors import EdgeOpsWarning
    warnings.warn(EdgeOpsWarning(
        "OpenMP was started before edgeops.ort.register, so its workers keep spin-waiting and "
        "slow ONNX Runtime sessions with edgeops ops several-fold on few cores; set "
        "OMP_WAIT_POLICY=PASSIVE (or EDGEOPS_OMP_WAIT) in the environment"), stacklevel=3)


# ONNX Runtime's u8s8 int8 kernels on x86 without VNNI (SSE4.1, AVX2, AVX-512F) add pairs of
# u8 x s8 products in int16 (pmaddubsw) and saturate once a weight lies outside [-64, 63]: a
# QLinearConv with full-range int8 weights is then off (figures: docs/notes/ort-bridge.md), exact
# on VNNI and Arm (sdot/udot) hosts, the board's. With this entry its graph optimiser moves such
# constant weights to the exact u8u8 path (onnxruntime PR #12088; a no-op elsewhere). edgeops'
# int8 kernels are exact, so package sessions and the reference outputs a package is checked
# against set it: a quantized package's figures do not depend on the compiling host's ISA.
EXACT_INT8 = {"session.x64quantprecision": "1"}


def exact_int8(so):
    """Set :data:`EXACT_INT8` on SessionOptions ``so`` unless the caller chose; returns ``so``."""
    for key, value in EXACT_INT8.items():
        if _entry(so, key) is None:
            so.add_session_config_entry(key, value)
    return so


def register(session_options=None, target: str = "reference", *, threads: int | None = None,
             extensions: bool = True):
    """Make every ai.edgeops op runnable in sessions made with ``session_options`` (created when
    None; returned). ``target``: the default :func:`prepare` uses for nodes with no kernel
    attribute. ``threads``: ONNX Runtime's intra-op threads (default: the cores this process may
    use, unless already set). Calling it twice on one SessionOptions is harmless.
    ``extensions=False``: the session settings only, without onnxruntime-extensions' library
    (a prepared model whose every node runs through the native bridge: it imports onnx)."""
    import onnxruntime as ort
    from edgeops.registry import KNOWN_TARGETS
    if target not in KNOWN_TARGETS:
        raise OrtIntegrationError(f"unknown target {target!r}; known: {', '.join(KNOWN_TARGETS)}")
    so = session_options if session_options is not None else ort.SessionOptions()
    _passive_openmp()
    if extensions:
        declare_ops()
    if _entry(so, _TARGET_KEY) != target:
        so.add_session_config_entry(_TARGET_KEY, target)
    if extensions and _entry(so, _DONE_KEY) is None:   # twice makes session creation fail
        from onnxruntime_extensions import get_library_path
        so.register_custom_ops_library(get_library_path())
        so.add_session_config_entry(_DONE_KEY, "1")
    if _entry(so, _SETTINGS_KEY) is None:
        so.add_session_config_entry(_SETTINGS_KEY, "1")
        for key in ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning"):
            if _entry(so, key) is None:
                so.add_session_config_entry(key, "0")
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        exact_int8(so)
    if threads is not None:
        so.intra_op_num_threads = int(threads)
    elif so.intra_op_num_threads == 0:
        so.intra_op_num_threads = _cores()
    return so


def prepare(model, target: str | None = None, *, session_options=None, fallback: dict | None = None,
            hold_constants: bool = True, regions: bool = True, threads: int | None = None,
            holds: list | None = None):
    """A copy of ``model`` (ModelProto) whose ai.edgeops nodes carry the dispatch attribute and
    all their inputs, ready for a session registered with :func:`register`. ``target``: explicit,
    else the one ``session_options`` was registered with, else ``reference``. ``fallback``: what
    a node does when its kernel fails (a package manifest's ``runtime.fallback``, see
    :mod:`edgeops.ort.fallback`; default: record the failure, NaN outputs, raise after run).
    ``hold_constants``: hold the nodes' constant inputs in this process (see "Held constants").
    ``regions``: run each run of consecutive ai.edgeops nodes as one ONNX Runtime node, one
    bridge crossing (:mod:`edgeops.ort.regions`); off: one ONNX Runtime node per ai.edgeops node.
    ``threads``: the most threads a kernel may use (a session's intra-op thread count: Numba's
    pool otherwise runs every kernel on all the process's cores); None: no limit.
    ``holds``: a list that receives the digest of every constant this call held (one reference
    each; give them back with :func:`edgeops.ort.consts.release` once no session uses the model:
    :func:`session` does so when its session is collected).
    Raises OrtIntegrationError / OpDefinitionError / KernelNotFoundError naming the node."""
    import onnx
    from onnx import helper, numpy_helper
    from edgeops.ops import EDGEOPS_DOMAIN
    from edgeops.pipeline.targets import load_targets
    if target is None:
        target = (_entry(session_options, _TARGET_KEY) if session_options is not None else None) or "reference"
    from edgeops.ort.fallback import rules
    fb = rules(fallback)
    load_targets()
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    names = {t.name for t in g.initializer} | {i.name for i in g.input} | {
        x for n in g.node for x in [*n.input, *n.output]}
    placeholder = PLACEHOLDER
    while placeholder in names:
        placeholder += "_"
    consts = _Constants(g) if hold_constants else None
    for k, n in enumerate(g.node):
        if n.domain != EDGEOPS_DOMAIN:
            continue
        where = n.name or f"{n.op_type}#{k}"
        from edgeops.ort import regions as _regions
        if _regions.is_region(n.op_type):     # prepared already (a region): check it, keep it
            spec = next((a.s.decode() for a in n.attribute if a.name == DISPATCH_ATTR), "")
            _regions.resolve(spec)
            continue
        od = opdef_for(n.op_type, n.domain)
        raw = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        raw = {key: v.decode() if isinstance(v, bytes) else v for key, v in raw.items()}
        if DISPATCH_ATTR in raw:     # prepared already: check it, keep it
            resolve(raw[DISPATCH_ATTR])
            continue
        kernel, tiling = raw.pop("kernel", None), raw.pop("tiling", None)
        board = raw.pop("board", None)
        if not od.min_inputs <= len(n.input) <= od.max_inputs:
            raise OrtIntegrationError(f"node {where!r}: {od.qualname()} takes {od.min_inputs}.."
                                      f"{od.max_inputs} inputs, got {len(n.input)}")
        present = [bool(x) for x in n.input] + [False] * (od.max_inputs - len(n.input))
        attrs = od.parse_attrs(raw, where)
        held = {} if consts is None else {
            i: h for i, x in enumerate(n.input) if x and (h := consts.hold(x)) is not None}
        spec = make_spec(od, where, target, kernel, tiling, attrs, present, board, fb, held,
                         threads)
        resolve(spec)    # every check now, before ONNX Runtime holds the node
        if held:
            present = [p and i not in held for i, p in enumerate(present)]
        if not all(present):
            ins = [x if p else placeholder for x, p in zip([*n.input, *[""] * len(present)], present)]
            del n.input[:]
            n.input.extend(ins)
        n.attribute.append(helper.make_attribute(DISPATCH_ATTR, spec))
    if consts is not None:
        consts.drop_unused()
        if holds is not None:
            holds.extend(h for h in consts.digests.values() if h is not None)
    if regions:
        from edgeops.ort.regions import collapse
        collapse(g, placeholder, DISPATCH_ATTR, EDGEOPS_DOMAIN)
    if any(x == placeholder for n in g.node for x in n.input):
        g.initializer.append(numpy_helper.from_array(np.zeros(0, np.float32), placeholder))
    if not any(o.domain == EDGEOPS_DOMAIN for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid(EDGEOPS_DOMAIN, 1))
    return m


class _Constants:
    """The fp32 constants of a graph that ai.edgeops nodes may hold: initializers that are not
    graph inputs (those a caller may override) and outputs of Constant nodes."""

    def __init__(self, g):
        inputs = {i.name for i in g.input}
        self.g = g
        self.protos = {t.name: t for t in g.initializer if t.name not in inputs}
        self.nodes = {n.output[0]: n for n in g.node
                      if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.output) == 1}
        self.digests: dict[str, str | None] = {}

    def hold(self, name: str) -> str | None:
        if name not in self.digests:
            a = self._array(name)
            from edgeops.ort.consts import hold
            self.digests[name] = None if a is None else hold(a)
        return self.digests[name]

    def _array(self, name):
        from onnx import TensorProto, numpy_helper
        t = self.protos.get(name)
        if t is None and name in self.nodes:
            a = self.nodes[name].attribute
            t = a[0].t if len(a) == 1 and a[0].name == "value" else None
        # fp32 only (what the bridge would hand); external data not loaded stays an input
        if t is None or t.data_type != TensorProto.FLOAT or t.data_location == TensorProto.EXTERNAL:
            return None
        return numpy_helper.to_array(t)

    def drop_unused(self) -> None:
        """Drop held initializers and Constant nodes nothing reads any more (subgraphs and graph
        outputs included), so that ONNX Runtime keeps no second copy."""
        held = {n for n, h in self.digests.items() if h is not None}
        if not held:
            return
        from edgeops.ort.regions import _reads
        used = {o.name for o in self.g.output} | _reads(self.g)
        gone = held - used
        if not gone:
            return
        keep = [t for t in self.g.initializer if t.name not in gone or t.name not in self.protos]
        del self.g.initializer[:]
        self.g.initializer.extend(keep)
        nodes = [n for n in self.g.node if not (n.op_type == "Constant" and n.output
                                                and n.output[0] in gone and n.output[0] in self.nodes)]
        del self.g.node[:]
        self.g.node.extend(nodes)


def _load(src):
    import onnx
    from edgeops.errors import ModelError
    if isinstance(src, onnx.ModelProto):
        return src
    if isinstance(src, (bytes, bytearray)):
        return onnx.load_model_from_string(bytes(src))
    path = os.fspath(src)
    if os.path.isdir(path):        # a package directory
        path = os.path.join(path, "model.onnx")
    if not os.path.isfile(path):
        raise ModelError(f"{path} does not exist; give an .onnx file, a package directory or a "
                         f"ModelProto")
    return onnx.load(path)


def session(model_or_path, target: str = "reference", providers: Sequence[str] | None = None, *,
            threads: int | None = None, session_options=None, fallback: dict | None = None,
            prepare_programs: bool = False, model_sha256: str | None = None):
    """An ``onnxruntime.InferenceSession`` for a model (ModelProto, bytes, .onnx path or package
    directory) with edgeops' ops registered and the model prepared for ``target`` (and the
    ``fallback`` rules, see :func:`prepare`). Its ``run`` raises KernelRuntimeError when a
    kernel failed during that run (and no fallback rule covered it). ``prepare_programs``: run
    it once on zeros now when its inputs are static, so its nodes are native programs before
    the first real call (package sessions do). ``model_sha256``: the sha256 of the model's
    bytes, verified by the caller (a package's manifest): the prepared model is then kept in
    the cache and later sessions start from it (:mod:`edgeops.ort.prepared`)."""
    from edgeops.ort import prepared
    entry = None
    if model_sha256 is not None and session_options is None and prepared.wanted():
        from edgeops.ort import native
        entry = prepared.key(model_sha256, target=target, threads=threads, fallback=fallback,
                             native=native.library() is not None and native.plans_wanted())
        sess = _from_prepared(entry, target, providers, threads, prepare_programs)
        if sess is not None:
            return sess
    model = _load(model_or_path)
    providers = list(providers or ["CPUExecutionProvider"])
    from edgeops.ops import EDGEOPS_DOMAIN
    if not any(n.domain == EDGEOPS_DOMAIN for n in model.graph.node) and session_options is None:
        # nothing runs through the Python bridge: keep ONNX Runtime's own defaults (spinning,
        # parallel execution), which are what a package that lowered nothing should cost
        import onnxruntime as ort
        so = exact_int8(ort.SessionOptions())
        if threads is not None:
            so.intra_op_num_threads = int(threads)
        return session_class()(model.SerializeToString(), so, providers=providers)
    so = register(session_options, target, threads=threads)
    # kernels use the session's threads too (None: ONNX Runtime's and Numba's defaults, the cores)
    holds: list[str] = []
    from edgeops.ort.consts import release
    try:
        model = prepare(model, target, fallback=fallback, threads=threads, holds=holds)
        from edgeops.ort import native
        adopted = native.adopt(model)     # the C bridge where it is built (edgeops.ort.native)
        if adopted:
            native.register(so)
        body = model.SerializeToString()
        sess = session_class()(body, so, providers=providers)
        if entry is not None:
            from edgeops.ort import consts as _consts
            prepared.store(entry, body, {h: _consts.get(h) for h in holds},
                           any(n.domain == EDGEOPS_DOMAIN for n in model.graph.node))
        if prepare_programs and adopted and native.plans_wanted():   # programs now, not in a run
            native.prepare_programs(sess)
    except BaseException:
        release(holds)
        raise
    if holds:      # the constants go with the session (see edgeops.ort.consts, "Lifetime")
        import weakref
        weakref.finalize(sess, release, holds)
    return sess


def _from_prepared(entry: str, target: str, providers, threads, prepare_programs: bool):
    """A session from prepared model ``entry`` of the cache, or None when there is none (or its
    constants' digests do not match: the caller prepares the model again)."""
    from edgeops.ort import native, prepared
    from edgeops.ort.consts import hold, release
    got = prepared.load(entry)
    if got is None:
        return None
    body, arrays, extensions = got
    holds: list[str] = []
    try:
        for name, a in arrays.items():
            holds.append(hold(a))
            if holds[-1] != name:
                release(holds)
                return None
        so = register(None, target, threads=threads, extensions=extensions)
        adopted = native.library() is not None
        if adopted:
            native.register(so)
        sess = session_class()(body, so, providers=list(providers or ["CPUExecutionProvider"]))
        if prepare_programs and adopted and native.plans_wanted():
            native.prepare_programs(sess)
    except BaseException:
        release(holds)
        raise
    if holds:
        import weakref
        weakref.finalize(sess, release, holds)
    return sess


__all__ = ["DISPATCH_ATTR", "LOWERABLE_STANDARD_OPS", "KernelRuntimeError", "OrtIntegrationError",
           "configure_openmp", "exact_int8", "openmp_started", "use_wait_policy", "wait_policy",
           "fallback_counts", "opdef_for", "prepare", "raise_errors",
           "register", "reset_fallback_counts", "session", "take_errors"]
