"""Kernel registry and dispatch.

Targets register kernels keyed by (op, target) with the dtypes they accept, a predicate over the
node's shapes/attributes and a priority. ``select(node, board)`` walks the board's targets in
order of preference and returns the kernel with a human reason, or says why the node stays in
ONNX Runtime. The ``reference`` target holds the numpy references of ``edgeops.ops``; it is the
oracle kernels are checked against and is never chosen for a board.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

from edgeops.errors import KernelNotFoundError

REFERENCE = "reference"
KNOWN_TARGETS = ("ascend", "neon", "cuda", REFERENCE)


class NodeLike(Protocol):
    """What dispatch needs of a node (``edgeops.graph.Node`` provides it)."""
    op_type: str
    domain: str

    @property
    def attrs(self) -> dict[str, Any]: ...
    @property
    def input_dtypes(self) -> list[str | None]: ...
    @property
    def input_shapes(self) -> list[tuple | None]: ...


# predicate(node) -> True when the kernel applies, otherwise a string saying why not
Predicate = Callable[[NodeLike], "bool | str"]


@dataclass(frozen=True)
class Kernel:
    op: str              # "Conv" or "ai.edgeops::SwiGLU"
    target: str
    name: str            # stable kernel id stored in packages, e.g. "neon.gemm_packed"
    fn: Callable = field(compare=False, repr=False)
    dtypes: tuple[str, ...] = ("fp32",)
    predicate: Predicate | None = field(default=None, compare=False, repr=False)
    priority: int = 0
    doc: str = ""
    # the kernel as one stage of a fused chain, or None: stage(inputs, attrs, x_shape) -> an
    # object with ``follows(previous stage)`` and ``chain(stages)``, a callable ``(X, keep)``
    # that runs the stages on X in one pass and returns each one's output, None for a stage
    # whose ``keep`` flag is false (nothing outside the chain reads it; the last is always
    # returned) (edgeops.ort.regions fuses consecutive stages of a region this way);
    # inputs[0] is None, X comes at the call
    stage: Callable | None = field(default=None, compare=False, repr=False)
    # compiles, once per process, the native code the chains of its stages run from native
    # plans (edgeops.ort.native calls it while a session is made, not inside a run); None: its
    # chains have no native plan
    plans: Callable | None = field(default=None, compare=False, repr=False)
    # the kernel prepared as a native step (edgeops.plans): native(inputs, attrs, threads=,
    # state=, tiling=) -> NativeStep, or a string saying why these inputs cannot be (inputs:
    # held constants as arrays, runtime inputs as arrays of their shapes; state: the node's
    # dispatch state). None: the kernel runs only from Python.
    native: Callable | None = field(default=None, compare=False, repr=False)

    def applies(self, node: NodeLike) -> tuple[bool, str]:
        dt = _node_dtype(node)
        if dt is not None and dt not in self.dtypes:
            return False, f"{self.name} takes {'/'.join(self.dtypes)}, node is {dt}"
        if self.predicate is not None:
            ok = self.predicate(node)
            if ok is not True:
                return False, f"{self.name}: {ok if isinstance(ok, str) and ok else 'predicate rejects node'}"
        return True, f"{self.name} ({'/'.join(self.dtypes)})"


@dataclass(frozen=True)
class Selection:
    kernel: Kernel | None
    reason: str

    @property
    def target(self) -> str:
        return self.kernel.target if self.kernel else "onnxruntime"


_KERNELS: dict[tuple[str, str], list[Kernel]] = {}
_BY_NAME: dict[str, Kernel] = {}


def op_key(op_type: str, domain: str = "") -> str:
    return f"{domain}::{op_type}" if domain not in ("", "ai.onnx") else op_type


def register_kernel(op: str, target: str, *, dtypes: Sequence[str] = ("fp32",),
                    predicate: Predicate | None = None, priority: int = 0,
                    name: str | None = None, doc: str = "", stage: Callable | None = None,
                    plans: Callable | None = None, native: Callable | None = None):
    """Decorator: ``@register_kernel("Conv", "neon", dtypes=("fp32",), priority=10)``.
    ``stage``, ``plans``, ``native``: see :attr:`Kernel.stage`, :attr:`Kernel.plans`,
    :attr:`Kernel.native`.

    A second kernel with the same name, or a second one for the same (op, target) at the same
    priority, is a programming error and raises at import time.
    """
    if target not in KNOWN_TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {KNOWN_TARGETS}")

    def deco(fn):
        kname = name or f"{target}.{fn.__name__}"
        k = Kernel(op, target, kname, fn, tuple(dtypes), predicate, priority,
                   doc or (fn.__doc__ or "").strip().split("\n")[0], stage, plans, native)
        if kname in _BY_NAME:
            raise RuntimeError(f"kernel {kname!r} registered twice ({_BY_NAME[kname].fn.__module__} "
                               f"and {fn.__module__})")
        same = [o for o in _KERNELS.get((op, target), []) if o.priority == priority]
        if same:
            raise RuntimeError(f"kernels {same[0].name!r} and {kname!r} both claim ({op}, {target}) at "
                               f"priority {priority}; give one a different priority")
        _KERNELS.setdefault((op, target), []).append(k)
        _KERNELS[(op, target)].sort(key=lambda x: -x.priority)
        _BY_NAME[kname] = k
        return fn
    return deco


def unregister_kernel(name: str) -> None:
    """For tests that register throwaway kernels."""
    k = _BY_NAME.pop(name)
    _KERNELS[(k.op, k.target)].remove(k)
    if not _KERNELS[(k.op, k.target)]:
        del _KERNELS[(k.op, k.target)]


_loaded = False
_some: set[str] = set()     # targets loaded so far (a package session loads only its own)
_loader = None              # the target loader's load-them-all, for queries that need every one


def mark_targets_loaded() -> None:
    """Called by the target loader (:mod:`edgeops.pipeline.targets`) once every target has
    registered; core never imports a target itself."""
    global _loaded
    _loaded = True


def mark_target_loaded(target: str, load_all=None) -> None:
    """Called by the target loader when it loaded only some targets (a package's own: the
    others cost a package session 0.1-0.4 s to import); ``load_all`` loads the rest when a query
    needs every target."""
    global _loader
    _some.add(target)
    if load_all is not None:
        _loader = load_all


def targets_loaded() -> bool:
    return _loaded


def target_loaded(target: str) -> bool:
    return _loaded or target in _some


def _require_targets(target: str | None = None) -> None:
    # a query before the loader ran would answer "no kernel" for every node, silently
    if _loaded or (target is not None and target in _some):
        return
    if _some and _loader is not None:      # some targets only: load the others now
        _loader()
        return
    raise RuntimeError("the kernel registry was queried before the targets were loaded: "
                       "call edgeops.pipeline.targets.load_targets() first")


def kernels(op: str | None = None, target: str | None = None) -> list[Kernel]:
    _require_targets(target)
    return [k for (o, t), ks in sorted(_KERNELS.items()) for k in ks
            if (op is None or o == op) and (target is None or t == target)]


def kernel_by_name(name: str) -> Kernel:
    if name in _BY_NAME and (_loaded or _some):     # registered by a loaded target
        return _BY_NAME[name]
    _require_targets()
    if name not in _BY_NAME:
        raise KernelNotFoundError(f"no kernel named {name!r}; known: {', '.join(sorted(_BY_NAME))}")
    return _BY_NAME[name]


def _node_dtype(node: NodeLike) -> str | None:
    for d in node.input_dtypes:
        if d is not None:
            return d
    return None


def _available(op: str) -> str:
    ks = kernels(op)
    if not ks:
        return "none"
    by_t: dict[str, set] = {}
    for k in ks:
        by_t.setdefault(k.target, set()).update(k.dtypes)
    return ", ".join(f"{t}({','.join(sorted(d))})" for t, d in sorted(by_t.items()))


def find(op: str, target: str, dtype: str | None = None) -> Kernel:
    """The highest-priority kernel for (op, target[, dtype]); a failed lookup names what exists."""
    for k in kernels(op, target):
        if dtype is None or dtype in k.dtypes:
            return k
    raise KernelNotFoundError(
        f"no kernel for {op} on target {target!r}" + (f" with dtype {dtype}" if dtype else "")
        + f"; available: {_available(op)}; add one in targets/{target}/")


def select(node: NodeLike, board) -> Selection:
    """Pick the kernel for ``node`` on ``board`` (its ``targets`` in order of preference)."""
    op = op_key(node.op_type, node.domain)
    reasons = []
    for target in board.targets:
        cands = kernels(op, target)
        if not cands:
            reasons.append(f"no {target} kernel for {op}")
            continue
        for k in cands:
            ok, why = k.applies(node)
            if ok:
                return Selection(k, f"{target}: {why}")
            reasons.append(why)
    return Selection(None, "stays in ONNX Runtime: " + "; ".join(reasons)
                     + f" (available: {_available(op)})")


def support_matrix(ops: Iterable[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """{op: {target: sorted dtypes}} over every registered kernel (and every defined op)."""
    from edgeops.ops import all_ops
    _require_targets()
    names = list(ops) if ops is not None else sorted({op_key(o.name, o.domain) for o in all_ops()}
                                                     | {o for (o, _t) in _KERNELS})
    out: dict[str, dict[str, list[str]]] = {}
    for op in names:
        row: dict[str, set] = {}
        for k in kernels(op):
            row.setdefault(k.target, set()).update(k.dtypes)
        out[op] = {t: sorted(d) for t, d in sorted(row.items())}
    return out
