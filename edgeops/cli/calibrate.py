"""``edgeops calibrate [--board host] [--grid tiny|small|full] [--threads 1 2] [--to TRANSPORT]
[--output FILE [--force]] [--json]``: measure a shape grid and fit the calibrated cost model that
simulate, tune and compile predict with (:func:`edgeops.pipeline.calibrate.calibrate`; rules:
docs/notes/calibration.md). ``--to`` runs the grid on a board through deploy's transports
(``local:`` or ``ssh://``; an emulator's times are refused)."""
from __future__ import annotations

import argparse
import os

from edgeops.cli.common import console, fmt_s, print_json
from edgeops.cli.tune import check_out, progress_bar

GRID_ENV = "EDGEOPS_CALIBRATE_GRID"     # CI sets "tiny"


def add(sub):
    from edgeops.pipeline.calibrate import DEFAULT_GRID, GRIDS
    p = sub.add_parser("calibrate", help="measure a shape grid and fit the calibrated cost model")
    p.add_argument("--board", default="host", help="the board calibrated (default host: this machine)")
    p.add_argument("--grid", choices=sorted(GRIDS), default=None,
                   help=f"shape grid (default ${GRID_ENV}, else {DEFAULT_GRID}; tiny: CI)")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="thread counts to measure (default 1 and 2, capped at the cores)")
    p.add_argument("--to", metavar="TRANSPORT", help="run on a board: local:/DIR or ssh://user@host/DIR")
    p.add_argument("--output", metavar="FILE",
                   help="write here instead of the cache (not read by predictions)")
    p.add_argument("--force", action="store_true", help="let --output / --to replace a file")
    # set by --to on the board: this machine is the board named
    p.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout (no rows)")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops.errors import EdgeOpsError
    from edgeops.pipeline import calibrate as C
    grid = args.grid or os.environ.get(GRID_ENV) or C.DEFAULT_GRID
    if grid not in C.GRIDS:
        raise EdgeOpsError(f"{GRID_ENV}={grid!r}: use one of {', '.join(sorted(C.GRIDS))}")
    threads = args.threads or sorted({1, min(2, os.cpu_count() or 1)})
    if args.output is not None and not args.output.strip():
        raise EdgeOpsError("--output needs a file name (without it the calibration goes to the "
                           "cache)")
    if args.to:
        if args.output:
            raise EdgeOpsError("--to stores the board's calibration in the cache; drop --output")
        from edgeops.deploy.calibrate import calibrate_remote
        doc = calibrate_remote(args.to, args.board, grid=grid, threads=threads, force=args.force)
    else:
        check_output(args.output, args.force)
        with progress_bar(not args.json, f"calibrating {args.board} ({grid} grid)") as update:
            state = {"done": 0}

            def progress(total):
                def advance():
                    state["done"] += 1
                    update(state["done"], total)
                return advance
            doc = C.calibrate(args.board, grid=grid, threads=threads, out=args.output,
                              force=args.force, here=args.here, progress=progress)
    if args.json:
        print_json({k: v for k, v in doc.items() if k != "rows"})
        return 0
    _print(doc)
    return 0


def check_output(path: str | None, force: bool) -> None:
    """Refuse, before minutes of measuring, an ``--output`` the file cannot be written to: a
    directory, something not a regular file, a folder edgeops cannot create files in."""
    import tempfile
    from pathlib import Path

    from edgeops.errors import EdgeOpsError
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise EdgeOpsError(f"--output {path} is a directory; give a file name, e.g. "
                           f"{p / 'calibration.json'}")
    if p.exists() and not p.is_file():
        raise EdgeOpsError(f"--output {path} is not a regular file; give a file name of yours")
    check_out(path, force)
    if not p.parent.is_dir():
        raise EdgeOpsError(f"--output {path}: directory {p.parent} does not exist; create it first")
    try:        # the file is written next to itself, then renamed over it
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise EdgeOpsError(f"--output {path}: cannot write files in {p.parent} "
                           f"({e.strerror}); choose another place") from None


def _print(doc: dict) -> None:
    from rich.markup import escape
    from rich.table import Table
    prov = doc["provenance"]
    t = Table(title=f"calibration of {doc['board']} ({prov['grid']} grid, {len(doc['rows'])} rows, "
                    f"{prov['wall_s']:.0f} s)")
    for col in ("side", "family", "dtype", "threads", "rows", "per call", "compute eff",
                "bandwidth eff", "weights eff", "band"):
        t.add_column(col, justify="right" if col not in ("side", "family", "dtype") else "left")
    for key, e in sorted(doc["entries"].items()):
        side, fam, dt, th = key.split("|")
        pct = lambda v: "-" if v is None else f"{v:.0%}"     # noqa: E731
        t.add_row(side, escape(fam), dt, th[1:], str(e["rows"]), fmt_s(e["call_s"]),
                  pct(e["comp_eff"]), pct(e["bw_eff"]), pct(e.get("weight_bw_eff")),
                  f"±{e['band']:.0%}")
    c = console()
    c.print(t)
    c.print(f"wrote {escape(doc['path'])}; session run overhead taken off each row: "
            + ", ".join(f"{k} thr {fmt_s(v)}" for k, v in prov["session_overhead_s"].items()))
