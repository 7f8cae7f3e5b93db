"""What a node does when its kernel misbehaves at run time, and how often that happened.

A package's manifest carries ``runtime.fallback`` (``edgeops.package.FALLBACK``); its session
hands the two run-time rules to every ai.edgeops node through the dispatch attribute:

* ``kernel_error``: ``"reference"`` runs the op's numpy reference for that call when the chosen
  kernel raises (warned once per node, counted); ``"error"`` records the failure, returns NaN
  outputs and raises :class:`KernelRuntimeError` after ``run`` (what a session of one's own gets:
  a silent slow path is a surprise there).
* ``nan_guard``: a target kernel whose outputs are not all finite although its inputs are is
  recomputed with the reference (counted). Off by default: the check reads every output.

``unknown_kernel`` ("refuse") and ``nodes_without_kernel`` ("onnxruntime") are enforced before
anything runs (:func:`edgeops.ort.prepare` refuses unknown kernel ids; nodes edgeops does not
lower are standard ONNX that ONNX Runtime runs); other values are refused, since this edgeops
would not do what the package asks.

Counts are per node name for the whole process: :func:`fallback_counts` reads them (``edgeops
serve`` reports them), :func:`reset_fallback_counts` starts again.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
import warnings

from edgeops.ort.errors import OrtIntegrationError

KERNEL_ERROR = ("reference", "error")
DEFAULT = {"kernel_error": "error", "nan_guard": False}
_FIXED = {"unknown_kernel": "refuse", "nodes_without_kernel": "onnxruntime"}

_lock = threading.Lock()
_counts: dict[str, int] = {}
_warned: set[str] = set()


def rules(fallback: dict | None) -> dict | None:
    """The run-time part of a manifest's ``fallback`` block, checked; None for the default."""
    if fallback is None:
        return None
    if not isinstance(fallback, dict):
        raise OrtIntegrationError(f"fallback rules must be a mapping, got {fallback!r}")
    for key, want in _FIXED.items():
        if key in fallback and fallback[key] != want:
            raise OrtIntegrationError(f"fallback rule {key}={fallback[key]!r} is not one this "
                                      f"edgeops implements (only {want!r}); compile the package "
                                      f"with this edgeops")
    unknown = set(fallback) - set(DEFAULT) - set(_FIXED)
    if unknown:
        raise OrtIntegrationError(f"unknown fallback rule(s) {sorted(unknown)}; this edgeops knows "
                                  f"{sorted([*DEFAULT, *_FIXED])}")
    ke = fallback.get("kernel_error", DEFAULT["kernel_error"])
    if ke not in KERNEL_ERROR:
        raise OrtIntegrationError(f"fallback rule kernel_error={ke!r}; use one of {KERNEL_ERROR}")
    guard = fallback.get("nan_guard", DEFAULT["nan_guard"])
    if not isinstance(guard, bool):
        raise OrtIntegrationError(f"fallback rule nan_guard={guard!r} is not true/false")
    out = {"kernel_error": ke, "nan_guard": guard}
    return None if out == DEFAULT else out


def record(node: str, kernel: str, why: str) -> None:
    """Count one fallback of ``node``; warn the first time it happens to that node (neither
    inside :func:`unrecorded`)."""
    from edgeops.errors import EdgeOpsWarning
    if getattr(_quiet, "on", False):
        return
    with _lock:
        _counts[node] = _counts.get(node, 0) + 1
        first = node not in _warned
        _warned.add(node)
    if first:
        warnings.warn(EdgeOpsWarning(
            f"node {node!r}: kernel {kernel} {why}; its op's numpy reference ran instead (and "
            f"will whenever this happens again; edgeops.ort.fallback_counts() counts it)"),
            stacklevel=2)


def fallback_counts() -> dict[str, int]:
    """{node name: how many calls ran the reference instead of the node's kernel} since the
    process started or :func:`reset_fallback_counts`."""
    with _lock:
        return dict(_counts)


def reset_fallback_counts() -> None:
    """Start counting again (nodes already warned about are not warned about again)."""
    with _lock:
        _counts.clear()


_quiet = threading.local()


@contextmanager
def unrecorded():
    """Fallbacks of this thread's calls inside the block are neither counted nor warned about
    (a session's warm-up run on zeros, edgeops.ort.native.prepare_programs: not the user's)."""
    _quiet.on = True
    try:
        yield
    finally:
        _quiet.on = False
