"""The one loader of kernel targets: targets register their kernels into ``edgeops.registry`` when
imported, and this module is the only one that imports them by name (tests/test_layering.py)."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType

from edgeops import registry

PACKAGE = "edgeops.targets"


def load_targets() -> None:
    """Import every target (``edgeops.targets`` imports those that landed) and the ``reference``
    target (numpy references); idempotent. The registry answers queries only after this."""
    if registry.targets_loaded():
        return
    importlib.import_module(PACKAGE)
    importlib.import_module("edgeops.reference_kernels")
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
