"""Prepared package models kept on disk, so that a package session starts without onnx.

Making a package's session prepares its model (:func:`edgeops.ort.prepare`: dispatch strings,
held constants, regions) and moves its nodes to the native bridge (:func:`native.adopt`), all on
the protobuf with the ``onnx`` package, whose import alone is 0.7-0.9 s on the development
machine (its ``ml_dtypes`` registers its dtypes' numpy loops: see docs/notes/ort-bridge.md),
and registers onnxruntime-extensions' library, which imports onnx too. A prepared model depends
only on the model's bytes, the preparation's arguments, edgeops' code and whether the native
bridge is used, so it is kept in the cache under a key of all of them (``<cache>/prepared/``):
the model as ONNX Runtime takes it, the constants its nodes hold (by digest), and whether any
node still needs onnxruntime-extensions. A later session reads those, holds the constants again
(their digests checked) and hands the bytes to ONNX Runtime: no onnx import, no onnxruntime-
extensions when every node is native. Kernels and regions are still resolved from their dispatch
strings when ONNX Runtime makes them, as always. ``EDGEOPS_PREPARED_CACHE=0`` turns it off.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from edgeops.env import switch

ENV = "EDGEOPS_PREPARED_CACHE"
FORMAT = 1
_code_hash: str | None = None


def wanted() -> bool:
    return switch(ENV, True)


def _code() -> str:
    """A hash of the code a prepared model depends on (the bridges, the ops' definitions, the
    registry, the version): an edit there makes every entry stale."""
    global _code_hash
    if _code_hash is None:
        import edgeops
        root = Path(edgeops.__file__).parent
        h = hashlib.sha256(edgeops.__version__.encode())
        files = sorted([*root.glob("ort/*.py"), root / "ort" / "native.c", *root.glob("ops/*.py"),
                        root / "registry.py", root / "plans.py"])
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        _code_hash = h.hexdigest()
    return _code_hash


def key(model_sha256: str, *, target: str, threads, fallback, native: bool) -> str:
    doc = json.dumps({"format": FORMAT, "model": model_sha256, "target": target,
                      "threads": threads, "fallback": fallback, "native": native,
                      "code": _code()}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:24]


def _dir(k: str) -> Path:
    from edgeops import cache
    return cache.root() / "prepared" / k


def load(k: str):
    """(model bytes, {digest: array} of the held constants, needs onnxruntime-extensions) of
    entry ``k``, or None when there is none or it is unreadable."""
    d = _dir(k)
    try:
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("format") != FORMAT:
            return None
        body = (d / "model.onnx").read_bytes()
        if hashlib.sha256(body).hexdigest() != meta["model_sha256"]:
            return None
        consts = {}
        if meta["consts"]:
            with np.load(d / "consts.npz", allow_pickle=False) as z:
                consts = {name: z[name] for name in meta["consts"]}
        return body, consts, bool(meta["extensions"])
    except (OSError, ValueError, KeyError):
        return None


def store(k: str, body: bytes, consts: dict, extensions: bool) -> None:
    """Write entry ``k`` (whole or not at all: a directory renamed into place)."""
    d = _dir(k)
    if d.is_dir():
        if load(k) is not None:
            return
        # a damaged entry (its bytes no longer match) would make every later session prepare
        # the model again: move it aside and write this one in its place
        import shutil
        old = d.with_name(f".old-{d.name}-{os.getpid()}")
        try:
            os.replace(d, old)
        except OSError:       # another process replaced it first
            return
        shutil.rmtree(old, ignore_errors=True)
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=".tmp-"))
    try:
        (tmp / "model.onnx").write_bytes(body)
        if consts:
            np.savez(tmp / "consts.npz", **consts)
        (tmp / "meta.json").write_text(json.dumps({
            "format": FORMAT, "model_sha256": hashlib.sha256(body).hexdigest(),
            "consts": sorted(consts), "extensions": extensions}))
        os.replace(tmp, d)
    except OSError:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
