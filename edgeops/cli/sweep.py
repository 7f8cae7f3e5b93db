"""``edgeops sweep FILE.json [--workers N | --scheduler ADDRESS] [--json] [--out FILE [--force]]``:
simulate many (op or model, board, tiling) points on a local process pool, or on a Dask
distributed cluster with ``--scheduler tcp://HOST:8786`` (the ``dist`` extra).

The file format is in :mod:`edgeops.tiling.sweep`; :func:`edgeops.tiling.sweep.sweep` is the
Python function behind this command.
"""
from __future__ import annotations

from edgeops.cli.common import int_in

from edgeops.cli.common import console, print_json
from edgeops.cli.common import fmt_bytes, fmt_s
from edgeops.cli.tune import check_out, progress_bar
from edgeops.errors import EdgeOpsError


def add(sub):
    p = sub.add_parser("sweep", help="simulate many (op/model, board, tiling) points in parallel")
    p.add_argument("file", help="sweep JSON: a list of points, {\"points\": [...]}, or {\"grid\": {...}}")
    p.add_argument("--workers", type=int_in(0, 4096, "a worker count"), help="local worker processes (default: CPU count; 0: in-process)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler address (tcp://host:8786)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--out", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--force", action="store_true", help="let --out overwrite an existing file")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgeops.pipeline.models import load_graph
    from edgeops.tiling import sweep as S
    from edgeops.tiling.graphsim import write_json
    if args.workers is not None and args.workers < 0:
        raise EdgeOpsError(f"--workers must be >= 0, got {args.workers}")
    if args.workers is not None and args.scheduler:
        raise EdgeOpsError("give --workers (local pool) or --scheduler (Dask), not both")
    check_out(args.out, args.force)
    points = S.load(args.file)
    with progress_bar(not args.json, f"sweep of {len(points)} points") as bar:
        res = S.sweep(points, workers=args.workers, scheduler=args.scheduler, progress=bar,
                      load_model=load_graph)
    doc = res.to_dict()
    if args.out:
        write_json(args.out, doc, force=args.force)
    if args.json:
        print_json(doc)
        return 0
    from rich.markup import escape as e
    from rich.table import Table
    t = Table(title=f"{len(res.results)} points on {res.backend} in {res.seconds:.1f} s")
    for col in ("#", "subject", "board", "tiling", "off-chip", "latency", "bound / error"):
        t.add_column(col, overflow="fold")
    for i, r in enumerate(res.results):
        lat = r.get("latency_s", r.get("total_latency_s"))
        t.add_row(str(i), e(r.get("label") or r.get("op") or str(r.get("model"))), r["board"],
                  r["tiling_mode"], fmt_bytes(r.get("offchip_bytes")), fmt_s(lat),
                  e(r.get("error") or r.get("bound") or ""))
    console().print(t)
    if args.out:
        console().print(f"wrote {e(args.out)}")
    return 0
