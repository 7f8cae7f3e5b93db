"""Per-node dispatch of ai.edgeops ops: the ``edgeops_dispatch`` attribute that
:func:`edgeops.ort.prepare` writes (JSON: op, node name, target, optional kernel id and tiling,
attributes, which inputs are present, optional board), parsed once per distinct string and
cached, then the kernel chosen from it: the named kernel, else the highest-priority kernel of the
target that accepts the inputs, else the ``reference`` kernel. A node lowered for a board names
it (``board`` attribute); a kernel whose signature takes ``board`` is called with it.

Held constants (:mod:`edgeops.ort.consts`): the spec's ``consts`` maps input positions to
digests; the dispatch puts those read-only arrays back in place of the placeholder the node is
fed, the same objects on every call. Each dispatch entry has a ``state`` dict, handed to kernels
whose signature takes ``state``: a kernel may keep prepared weights there, and may trust that a
held constant it receives (the same read-only object) has not changed. An entry is per spec
string, which names the node and its constants' digests, so the state is per node (sessions of
one model prepared twice share it, and its constants)."""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeops.errors import EdgeOpsError
from edgeops.ort.consts import get as held_constant
from edgeops.ort.consts import on_release
from edgeops.ort.errors import OrtIntegrationError

DISPATCH_ATTR = "edgeops_dispatch"
FORMAT = 1

# Standard ONNX ops that lowering may hand to an edgeops kernel. A lowered node keeps its op_type
# and attributes but moves to the ai.edgeops domain ("ai.edgeops::Conv"): ONNX Runtime would run
# a node of the standard domain itself, and a custom op cannot take over a standard name. Only
# ops whose inputs are all float tensors and whose one output is all a package needs: the
# bridge declares float inputs and a fixed output count (Reshape's int64 shape, Concat's and
# Split's variable arity, Dropout's mask stay in ONNX Runtime).
LOWERABLE_STANDARD_OPS = frozenset({
    "Conv", "Gemm", "MatMul", "BatchNormalization", "Relu", "LeakyRelu", "Clip", "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh", "Erf", "Gelu", "Softmax", "LayerNormalization",
    "GroupNormalization", "InstanceNormalization", "MaxPool", "AveragePool", "GlobalAveragePool",
    "Add", "Sub", "Mul", "Div", "Transpose", "Flatten", "Identity",
})


def opdef_for(op_type: str, domain: str):
    """The op definition of a node: its own, or for ``ai.edgeops::<standard op>`` (a lowered
    standard node) the standard one."""
    from edgeops.ops import EDGEOPS_DOMAIN, get_op, has_op
    if domain == EDGEOPS_DOMAIN and not has_op(op_type, domain) and op_type in LOWERABLE_STANDARD_OPS:
        return get_op(op_type, "")
    return get_op(op_type, domain)


@dataclass
class _NodeView:
    """What registry predicates read of a node, built from the actual inputs."""
    op_type: str
    domain: str
    attrs: dict
    input_dtypes: list
    input_shapes: list


@dataclass
class _Dispatch:
    od: Any
    node: str
    target: str
    kernel: Any                 # a registry Kernel, or None: choose per input shapes
    tiling: Any
    attrs: dict
    present: tuple[bool, ...]
    board: str | None = None    # the board the node was lowered for
    kernel_error: str = "error"  # edgeops.ort.fallback: "reference" or "error"
    nan_guard: bool = False
    held: dict = field(default_factory=dict)    # input position -> held read-only array
    threads: int | None = None  # at most this many kernel threads (the session's), None: any

    def __post_init__(self):
        self._by_shape: dict = {}
        self._trim = len(self.present) - self.present[::-1].index(True)   # omitted trailing inputs
        self._all = all(self.present[:self._trim]) and not self.held
        # per position: _RUNTIME (what the bridge hands), None (absent) or the held array
        self._slots = tuple(self.held.get(i, _RUNTIME) if p else None
                            for i, p in enumerate(self.present[:self._trim]))
        self._half: dict = {}     # position -> fp16 copy of a held array, for fp16 kernels
        self._reference = f"reference.{self.od.name}"     # the op's numpy reference kernel
        self.state: dict = {}
        self.fell_back = False    # its kernel failed once: never a native step
        self._held_set = frozenset(self.held)

    def inputs(self, inputs) -> list:
        """The kernel's inputs from the bridge's: absent ones None, held constants put back."""
        if self._all:
            return list(inputs[:self._trim])
        return [x if s is _RUNTIME else s for x, s in zip(inputs[:self._trim], self._slots)]

    def call(self, inputs):
        if self.threads is not None:
            from edgeops.threads import capped
            return capped(self.threads, self._call, inputs)
        return self._call(inputs)

    def _call(self, inputs):
        xs = self.inputs(inputs)
        k = self.kernel
        if k is None:   # chosen once per input shapes (a predicate may depend on them)
            key = tuple([None if x is None else x.shape for x in xs])
            k = self._by_shape.get(key)
            if k is None:
                k = self._by_shape[key] = _choose_kernel(self.od, self.target, self.attrs, xs, self.node)
        try:
            outs = self._run(k, xs)
        except Exception as e:  # noqa: BLE001  (any kernel failure is what the rule is about)
            if self.kernel_error != "reference" or k.name == self._reference:
                raise
            from edgeops.ort.fallback import record
            record(self.node, k.name, f"raised {type(e).__name__}: {e}")
            self.fell_back = True
            outs = self.od.run(xs, self.attrs, self.node)
        else:
            if self.nan_guard and k.name != self._reference and not _finite(outs) and _finite(xs):
                from edgeops.ort.fallback import record
                record(self.node, k.name, "returned NaN/Inf from finite inputs")
                self.fell_back = True
                outs = self.od.run(xs, self.attrs, self.node)
        if len(outs) == 1:
            o = outs[0]
            # the bridge copies the array into ONNX Runtime's buffer: hand it over as it is
            return o if o.dtype == np.float32 and o.flags.c_contiguous else \
                np.ascontiguousarray(o, dtype=np.float32)
        return tuple(np.ascontiguousarray(o, dtype=np.float32) for o in outs)

    def _run(self, k, xs):
        if "fp32" not in k.dtypes and "fp16" in k.dtypes:   # fp16 lives inside the call
            xs = [x if x is None else self._fp16(i) if i in self.held else x.astype(np.float16)
                  for i, x in enumerate(xs)]
        kw = {} if self.tiling is None else {"tiling": self.tiling}
        if self.board is not None and _takes(k.fn, "board"):
            kw["board"] = self.board
        if _takes(k.fn, "state"):
            kw["state"] = self.state
        if _takes(k.fn, "held"):          # which inputs are held constants (the same each call)
            kw["held"] = self._held_set
        outs = k.fn(xs, self.attrs, **kw)
        return [outs] if isinstance(outs, np.ndarray) else outs

    def native_step(self, inputs):
        """This node as a native step (:mod:`edgeops.plans`) for the inputs of a call that just
        ran through Python (the bridge's, placeholders included); None while its kernel cannot
        say yet (a thread choice still timing), a string when it never will for these inputs."""
        if self.nan_guard:
            return "the manifest's nan_guard checks every call from Python"
        if self.fell_back:
            return "its kernel failed on a call: it keeps running through Python and its rules"
        xs = self.inputs(inputs)
        k = self.kernel
        if k is None:
            k = self._by_shape.get(tuple([None if x is None else x.shape for x in xs]))
        if k is None or k.native is None:
            return f"kernel {k.name if k else '?'} has no native entry"
        if "fp32" not in k.dtypes:
            return f"kernel {k.name} computes in {'/'.join(k.dtypes)}"
        from edgeops.threads import num_threads
        threads = num_threads() if self.threads is None else min(self.threads, num_threads())
        kw = {"threads": threads, "state": self.state, "held": frozenset(self.held)}
        if self.tiling is not None:
            kw["tiling"] = self.tiling
        step = k.native(xs, self.attrs, **kw)
        if step is not None and not isinstance(step, str) and len(step.reads) != len(step.inputs):
            return (f"kernel {k.name}: its step reads {len(step.reads)} inputs, declares "
                    f"{len(step.inputs)}")
        return step

    def _fp16(self, i):
        h = self._half.get(i)
        if h is None:
            h = self.held[i].astype(np.float16)
            h.setflags(write=False)
            self._half[i] = h
        return h


_RUNTIME = object()


def _finite(arrays) -> bool:
    """All elements finite; a sum is the fast test (a non-finite element makes it non-finite),
    the exact one runs only when the sum overflowed or is not finite."""
    for a in arrays:
        if a is None or a.dtype.kind != "f" or a.size == 0:
            continue
        if not np.isfinite(a.sum(dtype=np.float64)) and not np.isfinite(a).all():
            return False
    return True


_takes_cache: dict = {}


def _takes(fn, name: str) -> bool:
    """Whether ``fn`` has a parameter ``name`` (cached per function)."""
    key = (fn, name)
    r = _takes_cache.get(key)
    if r is None:
        try:
            r = name in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            r = False
        _takes_cache[key] = r
    return r


def _choose_kernel(od, target, attrs, xs, node):
    from edgeops.registry import REFERENCE, kernels, op_key
    view = _NodeView(od.name, od.domain, attrs, [None if x is None else "fp32" for x in xs],
                     [None if x is None else tuple(x.shape) for x in xs])
    op = op_key(od.name, od.domain)
    for k in kernels(op, target) + (kernels(op, REFERENCE) if target != REFERENCE else []):
        if k.applies(view)[0]:
            return k
    raise OrtIntegrationError(f"node {node!r}: no kernel for {op} on target {target!r} or "
                              f"{REFERENCE!r} accepts inputs {view.input_shapes}")


def make_spec(od, node: str, target: str, kernel: str | None, tiling: str | None, attrs: dict,
              present: list[bool], board: str | None = None, fallback: dict | None = None,
              consts: dict[int, str] | None = None, threads: int | None = None) -> str:
    """The dispatch attribute's value (floats as JSON numbers: exact, unlike the bridge's own
    attribute printing). ``board``: the board the node was lowered for (absent when None).
    ``fallback``: run-time rules from :func:`edgeops.ort.fallback.rules` (absent when None).
    ``consts``: {input position: digest} of held constants (:mod:`edgeops.ort.consts`).
    ``threads``: the most threads the kernel may use (the session's; absent when None)."""
    d = {"format": FORMAT, "op": od.name, "domain": od.domain, "node": node,
         "target": target, "kernel": kernel, "tiling": tiling,
         "attrs": {a: list(v) if isinstance(v, tuple) else v for a, v in attrs.items()},
         "present": present}
    if board is not None:
        d["board"] = board
    if fallback is not None:
        d["fallback"] = fallback
    if consts:
        d["consts"] = {str(i): h for i, h in sorted(consts.items())}
    if threads is not None:
        d["threads"] = int(threads)
    return json.dumps(d, sort_keys=True)


_cache: dict[str, _Dispatch] = {}


def resolve(spec: str) -> _Dispatch:
    d = _cache.get(spec)
    if d is None:
        d = _cache[spec] = _parse(spec)
    return d


def forget(digests, cache: dict | None = None) -> None:
    """Drop the entries of ``cache`` (default: the dispatch entries) whose spec names any of
    these held constants (edgeops.ort.consts.release; regions pass their own cache)."""
    cache = _cache if cache is None else cache
    for spec in [s for s in list(cache) if any(k in s for k in digests)]:
        cache.pop(spec, None)


def _parse(spec: str) -> _Dispatch:
    from edgeops.ops import get_op
    from edgeops.pipeline.targets import load_targets
    from edgeops.registry import KNOWN_TARGETS, kernel_by_name, op_key
    # a session of one's own may run a prepared model in a fresh process; a package session
    # loaded its own targets, and a kernel of another one loads the rest (kernel_by_name)
    load_targets(only=())
    try:
        d = json.loads(spec)
        op_type, domain, node = d["op"], d["domain"], d["node"]
    except (ValueError, KeyError, TypeError):
        raise OrtIntegrationError(f"{DISPATCH_ATTR} attribute {spec[:80]!r} is not what "
                                  f"edgeops.ort.prepare writes; prepare the model again") from None
    if d.get("format") != FORMAT:
        raise OrtIntegrationError(f"node {node!r}: {DISPATCH_ATTR} format {d.get('format')} is "
                                  f"not {FORMAT}; prepare the model with this edgeops")
    od = get_op(op_type, domain)
    attrs = od.parse_attrs(d["attrs"], node)
    target = d["target"]
    if target not in KNOWN_TARGETS:
        raise OrtIntegrationError(f"node {node!r}: unknown target {target!r}; known: "
                                  f"{', '.join(KNOWN_TARGETS)}")
    kernel = None
    if d.get("kernel"):
        try:
            kernel = kernel_by_name(d["kernel"])
        except EdgeOpsError as e:
            raise OrtIntegrationError(f"node {node!r}: attribute kernel={d['kernel']!r}: {e}") from None
        if kernel.op != op_key(op_type, domain):
            raise OrtIntegrationError(f"node {node!r}: kernel {kernel.name!r} implements "
                                      f"{kernel.op}, not {op_key(op_type, domain)}")
    tiling = _tiling(d.get("tiling"), node, kernel)
    board = d.get("board")
    if board is not None and not isinstance(board, str):
        raise OrtIntegrationError(f"node {node!r}: {DISPATCH_ATTR} board {board!r} is not a name")
    from edgeops.ort.fallback import DEFAULT, rules
    try:
        fb = rules(d.get("fallback")) or DEFAULT
    except OrtIntegrationError as e:
        raise OrtIntegrationError(f"node {node!r}: {e}") from None
    threads = d.get("threads")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise OrtIntegrationError(f"node {node!r}: {DISPATCH_ATTR} threads {threads!r} is not a "
                                  f"positive integer")
    return _Dispatch(od, node, target, kernel, tiling, attrs, tuple(d["present"]), board,
                     fb["kernel_error"], fb["nan_guard"], _held(d.get("consts"), d["present"], node),
                     threads)


def _held(consts, present, node) -> dict:
    if not consts:
        return {}
    held = {}
    for pos, key in consts.items():
        a = held_constant(key) if isinstance(key, str) else None
        try:
            i = int(pos)
        except ValueError:
            i = -1
        if not 0 <= i < len(present) or not present[i]:
            raise OrtIntegrationError(f"node {node!r}: {DISPATCH_ATTR} holds a constant at input "
                                      f"{pos!r}, which the node does not have")
        if a is None:
            raise OrtIntegrationError(
                f"node {node!r}: held constant {str(key)[:12]}... (input {i}) is not in this "
                f"process: a prepared model runs only in the process that prepared it; prepare "
                f"the unprepared model (a package's model.onnx) where the session is made")
        held[i] = a
    return held


def _tiling(text, node, kernel):
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise OrtIntegrationError(f"node {node!r}: attribute tiling is not valid JSON ({e}): "
                                  f"{text[:80]!r}") from None
    if kernel is None:
        raise OrtIntegrationError(f"node {node!r}: a tiling is given without a kernel attribute; "
                                  f"a tiling belongs to one kernel, so name it")
    if "tiling" not in inspect.signature(kernel.fn).parameters:
        raise OrtIntegrationError(f"node {node!r}: kernel {kernel.name!r} takes no tiling")
    from edgeops.tiling import Tiling   # the versioned value packages and the tuning cache hold
    try:
        return Tiling.from_dict(value)
    except EdgeOpsError as e:
        raise OrtIntegrationError(f"node {node!r}: attribute tiling: {e}") from None


on_release(forget)     # held constants dropped: their dispatch entries go too
