"""Shared CLI helpers: JSON output, rich console on stderr."""
from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np


def _default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def print_json(doc: Any) -> None:
    """The one JSON document a ``--json`` command prints on stdout."""
    json.dump(doc, sys.stdout, indent=2, default=_default)
    sys.stdout.write("\n")


def console(stderr: bool = False):
    """The CLI console; piped into a file or a pager it does not fold names at 80 columns."""
    from rich.console import Console
    c = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal:
        c.width = max(c.width, 160)
    return c
