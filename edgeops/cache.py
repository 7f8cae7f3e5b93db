"""Where edgeops keeps what it builds or measures on this machine (measured kernel tables, the
tuning cache, host figures, wheels pushed to boards, the native bridge): ``$EDGEOPS_CACHE_DIR``,
else ``$XDG_CACHE_HOME/edgeops``, else ``~/.cache/edgeops``. Every cache lives below :func:`root`."""
from __future__ import annotations

import os
from pathlib import Path

ENV = "EDGEOPS_CACHE_DIR"


def root() -> Path:
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgeops"
