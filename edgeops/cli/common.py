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


def fmt_s(s) -> str:
    """Seconds as the CLI prints them: ms from 1 ms up, else us; "-" for none."""
    if s is None:
        return "-"
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def fmt_bytes(b) -> str:
    if b is None:
        return "-"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.2f} {unit}"
    return f"{int(b)} B"
