"""Shared CLI helpers: JSON output, rich console on stderr."""
from __future__ import annotations

import argparse
import json
import math
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


# ---- argument types: numbers range-checked at parse time (argparse: one line, exit 2) --------

def _number(kind, lo, hi, what):
    def parse(text: str):
        try:
            v = kind(text)
        except (ValueError, OverflowError):
            raise _ArgError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") \
                from None
        if kind is float and not math.isfinite(v):
            raise _ArgError(f"{text!r}: give a finite number")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            f = (lambda x: f"{x:,}") if kind is int else (lambda x: f"{x:g}")
            rng = (f"{f(lo)} to {f(hi)}" if lo is not None and hi is not None else
                   f"at least {f(lo)}" if lo is not None else f"at most {f(hi)}")
            raise _ArgError(f"{text} is out of range: {what} is {rng}")
        return v
    parse.__name__ = what
    return parse


class _ArgError(argparse.ArgumentTypeError):
    pass


def int_in(lo, hi=None, what="a count"):
    """``type=`` for an integer flag in ``[lo, hi]``."""
    return _number(int, lo, hi, what)


def float_in(lo, hi=None, what="a number"):
    return _number(float, lo, hi, what)


MAX_SEED = 2**63 - 1         # numpy's default_rng takes any non-negative int; keep it an int64
port = int_in(0, 65535, "a TCP port (0 picks a free one)")
seed = int_in(0, MAX_SEED, "a seed")
runs = int_in(1, 1_000_000, "a number of runs")
threads = int_in(1, 4096, "a thread count")
seconds = float_in(0, 86400, "a time in seconds")
budget = int_in(1, 100_000_000, "a search budget")


def calib_data(text: str) -> str:
    """``type=`` for a calibration DATA argument: ``random:N`` must carry a sane count (paths are
    checked when opened)."""
    if text.startswith("random:"):
        int_in(1, 100_000, "a number of random calibration batches")(text[len("random:"):])
    return text
