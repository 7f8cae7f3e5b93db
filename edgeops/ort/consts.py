"""Held constants: an ai.edgeops node's constant inputs (graph initializers, Constant outputs)
kept in this process as read-only numpy arrays instead of flowing through the bridge.

The bridge copies every input tensor into a new numpy array on every call; for a GEMM-bound node
with small activations the weights' copy is most of the call. :func:`edgeops.ort.prepare` (which
runs in the process that makes the session) moves each such input into :data:`_store`, keyed by
a sha256 digest of its dtype, shape and bytes, names the digest in the node's dispatch attribute
(``"consts": {"<input position>": "<digest>"}``) and feeds the node the empty placeholder in
that position; the dispatch puts the same array back on every call (no copy).

Why a placeholder rather than fewer declared inputs: onnxruntime-extensions declares one input
list per op name for the whole process, so a node with k runtime inputs would need an op name
per (op, k) declared before the session options are registered, and renamed nodes. An empty
fp32 placeholder costs far less per call than copying a weight (figures:
docs/notes/ort-bridge.md), and keeps every op's one declaration and its real name.

The digest, not the node, names the array: two models whose nodes are alike but whose weights
differ get different digests (so different dispatch entries, each with its own kernel state),
and the same weights prepared twice share one array.

Lifetime. Each :func:`hold` is one reference. :func:`edgeops.ort.session` releases the references
its :func:`edgeops.ort.prepare` took when the session object is garbage-collected; an array whose
last reference goes is dropped with the dispatch entries that name it, so a process that makes
sessions for many models (or reloads one) does not keep every model's weights. A model prepared
by hand holds them until the digests its ``holds`` list received are released (:func:`release`), else for the
process.
:func:`held_bytes` says how much is held.
"""
from __future__ import annotations

import hashlib
import threading

import numpy as np

_lock = threading.Lock()
_store: dict[str, np.ndarray] = {}
_refs: dict[str, int] = {}


def digest(a: np.ndarray) -> str:
    """sha256 over dtype, shape and bytes: equal digests mean interchangeable arrays."""
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def hold(a: np.ndarray) -> str:
    """Keep a read-only copy of ``a`` (or the one already held with equal content); its digest."""
    key = digest(a)
    with _lock:
        if key not in _store:
            c = np.array(a, copy=True, order="C")
            c.setflags(write=False)   # shared by every session and node holding these bytes
            _store[key] = c
        _refs[key] = _refs.get(key, 0) + 1
    return key


def release(keys) -> list[str]:
    """Give back one reference per key (as :func:`hold` returned them); the digests whose
    last reference went, whose arrays and dispatch entries are now dropped."""
    gone = []
    with _lock:
        for key in keys:
            n = _refs.get(key, 0) - 1
            if n > 0:
                _refs[key] = n
            elif key in _refs:
                del _refs[key]
                _store.pop(key, None)
                gone.append(key)
    for fn in _on_release if gone else ():
        fn(gone)
    return gone


_on_release: list = []


def on_release(fn) -> None:
    """Call ``fn(digests)`` when constants are dropped (the caches of dispatch entries and regions
    built on them register here, so this module imports neither)."""
    _on_release.append(fn)


def get(key: str) -> np.ndarray | None:
    return _store.get(key)


def held_bytes() -> int:
    """Bytes of constants this process holds for ai.edgeops nodes."""
    with _lock:
        return sum(a.nbytes for a in _store.values())
