"""Where edgeops keeps what it builds or measures on this machine: ``$EDGEOPS_CACHE_DIR``, else
``~/.cache/edgeops`` (measured kernel tables, wheels pushed to boards, the native bridge)."""
from __future__ import annotations

import os
from pathlib import Path


def root() -> Path:
    env = os.environ.get("EDGEOPS_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "edgeops"
