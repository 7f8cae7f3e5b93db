"""What goes wrong in ONNX Runtime sessions: the error types, and the per-thread record of kernel
failures (an op function records its failure instead of raising, which would abort the process;
the session's ``run`` raises them afterwards)."""
from __future__ import annotations

import sys
import threading

from edgeops.errors import EdgeOpsError

_errors = threading.local()


class OrtIntegrationError(EdgeOpsError):
    """An ai.edgeops node cannot be prepared or run in ONNX Runtime (kernel id, tiling, op)."""


class KernelRuntimeError(OrtIntegrationError):
    """A kernel failed while ONNX Runtime ran a session; its outputs were NaN. ``failures``:
    {node name: what went wrong} for the failures that name their node (compile's repair
    moves exactly those nodes to ONNX Runtime)."""

    def __init__(self, message: str, failures: dict[str, str] | None = None):
        super().__init__(message)
        self.failures = dict(failures or {})


def record_error(msg: str, node: str | None = None, reason: str | None = None) -> None:
    """Keep a kernel failure for :func:`raise_errors` (per thread: ONNX Runtime's sequential
    executor runs each node on the thread calling run) and say it on stderr. ``node`` and
    ``reason``: the failed node, for :attr:`KernelRuntimeError.failures`."""
    _errors.__dict__.setdefault("items", []).append((msg, node, reason))
    if not getattr(_errors, "quiet", False):
        print(f"edgeops: {msg} (outputs set to NaN)", file=sys.stderr)


def recorded() -> int:
    """How many failures this thread holds (the native bridge compares before and after a call)."""
    return len(getattr(_errors, "items", []))


def since(n: int) -> list[str]:
    """The messages of this thread's failures after the first ``n``."""
    return [m for m, _, _ in getattr(_errors, "items", [])[n:]]


def set_quiet(on: bool) -> bool:
    """Record this thread's failures without saying them on stderr (the native bridge's
    status-returning compute fails the run with them instead); the previous setting."""
    was = getattr(_errors, "quiet", False)
    _errors.quiet = on
    return was


def _take() -> list[tuple[str, str | None, str | None]]:
    items = getattr(_errors, "items", [])
    _errors.items = []
    return items


def take_errors() -> list[str]:
    """Kernel failures recorded on this thread since the last call (and forget them)."""
    return [m for m, _, _ in _take()]


def raise_errors(stopped: BaseException | None = None) -> None:
    """Raise :class:`KernelRuntimeError` if a kernel failed on this thread since the last check.
    ``stopped``: ONNX Runtime's exception when a failing kernel stopped the run (the native
    bridge's status-returning compute): raised from it, and re-raised when nothing was recorded."""
    items = _take()
    if items:
        tail = (f"; the run stopped at that node. {_HINT}" if stopped is not None
                else f"; its outputs were NaN. {_HINT}")
        raise KernelRuntimeError("; ".join(m for m, _, _ in items) + tail,
                                 {n: r for _, n, r in items if n is not None}) from stopped
    if stopped is not None:
        raise stopped


_HINT = ("Compile the model again to move the node to ONNX Runtime, or give the package's "
         "runtime.fallback a kernel_error rule")
