"""The one loader of kernel targets: targets register their kernels into ``edgeops.registry`` when
imported, and this module is the only one that imports them by name (tests/test_layering.py)."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType

from edgeops import registry

PACKAGE = "edgeops.targets"


TARGETS = ("ascend", "neon", "cuda")      # the targets that landed, in registration order


def load_targets(only=None) -> None:
    """Import every target and the ``reference`` target (numpy references); idempotent. The
    registry answers queries only after this. ``only``: just these targets and the reference
    (a package session's: the others' imports are 0.1-0.4 s); a later query that needs every
    target (all kernels of an op, a kernel name of another target) loads the rest then."""
    if registry.targets_loaded():
        return
    names = TARGETS if only is None else [t for t in only if t in TARGETS]
    for t in names:
        if not registry.target_loaded(t):
            importlib.import_module(f"{PACKAGE}.{t}")
            registry.mark_target_loaded(t, load_targets)
    if not registry.target_loaded(registry.REFERENCE):
        importlib.import_module("edgeops.reference_kernels")
        registry.mark_target_loaded(registry.REFERENCE, load_targets)
    if only is None:
        registry.mark_targets_loaded()


def import_target(name: str) -> ModuleType | None:
    """The module of target ``name`` (importing it registers its kernels), or None for the
    reference target and for a target that is missing or fails to import: it then offers no
    kernels and its nodes stay in ONNX Runtime."""
    load_targets()
    if name == registry.REFERENCE:
        return None
    try:
        return importlib.import_module(f"{PACKAGE}.{name}")
    except ImportError:
        return None


def target_module(name: str) -> ModuleType | None:
    """Target ``name``'s module if it is loaded (its optional hooks, e.g. ``accepts_tiling``)."""
    return sys.modules.get(f"{PACKAGE}.{name}")
