"""``edgeops tune (MODEL | --op SPEC) --board NAME [--objective latency|traffic] [--top K] [--json]
[--out FILE [--force]] [--plot PNG]``: the best tilings of one op, or of every node of a model.
``edgeops tune MODEL --board host --measure-table [--remeasure]`` instead fills this machine's
measured kernel table (:mod:`edgeops.lower.measure`) for the model's nodes and prints it: what
``edgeops compile --board host`` would otherwise measure at its first run.

With ``--op`` it searches the op (:func:`edgeops.tiling.search`) and reports the best tiling, the
top K, the Pareto front, the compulsory traffic and the I/O lower bound; with a MODEL it tunes
every node through the tuning cache (:func:`edgeops.tiling.graphsim.tune_model`). ``--out``
writes the best tiling (op) or the plan of the model ({node: tiling}), which ``edgeops simulate
--tiling FILE`` reads back. ``--plot`` draws off-chip traffic over two tile sizes around the
best tiling (for a model: around the slowest node's).
"""
from __future__ import annotations

from edgeops.cli.common import budget, int_in, threads

import contextlib
import os

from edgeops.cli.common import console, fmt_bytes, fmt_s, print_json
from edgeops.errors import EdgeOpsError


def add(sub):
    p = sub.add_parser("tune", help="search the best tiling of an op or of every node of a model")
    p.add_argument("model", nargs="?", help="path to an .onnx model, or 'sample' (or use --op)")
    p.add_argument("--op", metavar="SPEC", help="one operator, e.g. gemm:M=1024,N=1024,K=1024,dtype=fp16")
    p.add_argument("--board", required=True, help="board name or board file")
    p.add_argument("--target", help="target of the board (default: its first)")
    p.add_argument("--objective", choices=["latency", "traffic"], default="latency")
    p.add_argument("--top", type=int_in(1, 10_000, "a number of tilings"), default=5, metavar="K", help="how many tilings to report (op)")
    p.add_argument("--budget", type=budget, default=250_000, help="about how many candidates to evaluate")
    p.add_argument("--shapes", action="append", metavar="NAME:1x3x224x224[;...]",
                   help="concrete sizes for model inputs with symbolic dims")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the tuning cache")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--out", metavar="FILE", help="write the best tiling (op) or the plan (model) as JSON")
    p.add_argument("--force", action="store_true", help="let --out overwrite an existing file")
    p.add_argument("--plot", metavar="PNG", help="heatmap of off-chip traffic over two tile sizes")
    p.add_argument("--measure-table", action="store_true",
                   help="(board host) time each lowerable node/fused chain of MODEL through the "
                        "custom-op bridge vs ONNX Runtime, cached per machine; compile reads it")
    p.add_argument("--remeasure", action="store_true",
                   help="with --measure-table: measure this thread count's entries again instead of reading them")
    p.add_argument("--threads", type=threads, metavar="N",
                   help="threads both sides run with: --measure-table's, and the calibrated "
                        "predictions' of a MODEL (default: every core)")
    p.set_defaults(func=run)


def one_of(args) -> None:
    if bool(args.model) == bool(args.op):
        raise EdgeOpsError("give a MODEL or --op SPEC (exactly one of them)")


def check_out(path: str | None, force: bool) -> None:
    """Fail before the work, not after it."""
    if path and os.path.exists(path) and not force:
        raise EdgeOpsError(f"{path} already exists; pass --force to overwrite it")


@contextlib.contextmanager
def progress_bar(enabled: bool, label: str):
    """A rich progress bar on stderr; yields ``update(done, total, what="")`` (a no-op if off)."""
    err = console(stderr=True) if enabled else None
    if err is None or not err.is_terminal:      # piped stderr: no bar, no stray blank lines
        yield lambda *a, **k: None
        return
    from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn,
                               TimeElapsedColumn)
    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[what]}"),
                  console=err, transient=True) as prog:
        task = prog.add_task(label, total=1.0, what="")

        def update(done, total, what=""):
            prog.update(task, completed=float(done), total=float(max(total, 1)), what=str(what))
        yield update


def run(args) -> int:
    if args.measure_table or args.remeasure:
        if not args.model or args.op:
            raise EdgeOpsError("--measure-table measures the nodes of a MODEL (or 'sample'), not --op")
        from edgeops.pipeline.measure import measure_table
        with progress_bar(True, "measuring kernels vs ONNX Runtime"):
            doc = measure_table(args.model, args.board, remeasure=args.remeasure,
                                threads=args.threads,
                                shapes=";".join(args.shapes) if args.shapes else None)
        if args.json:
            print_json(doc)
        else:
            _print_table(doc)
        return 0
    one_of(args)
    if args.top < 1:
        raise EdgeOpsError(f"--top must be >= 1, got {args.top}")
    check_out(args.out, args.force)
    if args.op:
        doc = tune_op(args)
    else:
        doc = tune_model_cli(args)
    if args.json:
        print_json(doc)
    elif args.op:
        _print_op(doc)
    else:
        _print_model(doc)
    return 0


def tune_op(args) -> dict:
    from edgeops.tiling import search
    from edgeops.tiling.graphsim import write_json
    with progress_bar(not args.json, f"tuning {args.op}") as bar:
        r = search(args.op, args.board, objective=args.objective, top=args.top, target=args.target,
                   budget=args.budget, progress=bar)
    doc = r.to_dict()
    if args.out:
        write_json(args.out, r.best.tiling.to_dict(), force=args.force)
        doc["out"] = args.out
    if args.plot:
        doc["plot"] = _heatmap(args.op, args.board, r.best.tiling, args.plot, args.target)
    return doc


def tune_model_cli(args) -> dict:
    from edgeops.pipeline.models import load_graph
    from edgeops.tiling.graphsim import tune_model, write_plan
    model = load_graph(args.model, ";".join(args.shapes) if args.shapes else None)
    with progress_bar(not args.json, "tuning nodes") as bar:
        doc = tune_model(model, args.board, objective=args.objective, cache=not args.no_cache,
                         target=args.target, budget=args.budget, progress=bar)
    from edgeops.pipeline.predict import calibrate_tuned
    calibrate_tuned(doc, model, args.board, args.threads)
    tuned = [n for n in doc["nodes"] if "best" in n]
    if args.out:
        write_plan(args.out, doc["board"], {n["node"]: n["best"]["tiling"] for n in tuned},
                   force=args.force)
        doc["out"] = args.out
    if args.plot:
        if not tuned:
            raise EdgeOpsError("no node of the model has a tiling: nothing to plot")
        slow = max(tuned, key=lambda n: n["best"]["latency_s"])
        from edgeops.tiling import Tiling
        doc["plot"] = _heatmap(slow["signature"], args.board, Tiling.from_dict(slow["best"]["tiling"]),
                               args.plot, args.target, f" (slowest node {slow['node']})")
    return doc


def _heatmap(op, board, tiling, path, target, suffix="") -> str:
    from edgeops import boards
    from edgeops.simulator.plot import heatmap
    from edgeops.tiling.grid import tile_grid
    g = tile_grid(op, boards.load(board), tiling, target=target)
    return heatmap(g, path, title=f"off-chip bytes around the best tiling{suffix}\n{g.op} on {g.board}")


def _print_op(doc: dict) -> None:
    from rich.markup import escape as e
    from rich.table import Table
    from edgeops.tiling import Tiling
    c = console()
    b = doc["best"]
    c.print(f"[bold]{e(doc['op'])}[/bold] on {doc['board']}: {doc['decomposition']}, objective "
            f"{doc['objective']}; {doc['candidates_evaluated']:,} candidates in {doc['seconds']:.2f} s")
    c.print(f"best: {e(Tiling.from_dict(b['tiling']).describe())}")
    c.print(f"  off-chip {fmt_bytes(b['offchip_bytes'])}, latency {fmt_s(b['latency_s'])}, "
            f"bound {b['bound']}; compulsory {fmt_bytes(doc['compulsory_bytes'])}"
            + (f", lower bound {fmt_bytes(doc['lower_bound_bytes'])} (ratio "
               f"{doc['ratio_to_bound']:.2f})" if doc["lower_bound_bytes"] else ""))
    t = Table(title=f"top {len(doc['top'])}")
    for col in ("#", "tiling", "off-chip", "latency", "bound"):
        t.add_column(col, overflow="fold")
    for i, ev in enumerate(doc["top"]):
        t.add_row(str(i + 1), e(Tiling.from_dict(ev["tiling"]).describe()),
                  fmt_bytes(ev["offchip_bytes"]), fmt_s(ev["latency_s"]), ev["bound"])
    c.print(t)
    for k in ("out", "plot"):
        if doc.get(k):
            c.print(f"wrote {e(doc[k])}")


def _print_model(doc: dict) -> None:
    from rich.markup import escape as e
    from rich.table import Table
    c = console()
    t = Table(title=f"{e(doc['model'])} on {doc['board']} (objective {doc['objective']})")
    for col in ("node", "op", "decomposition", "off-chip", "latency", "bound", "vs bound",
                "calibrated", "ORT calibrated", "note"):
        t.add_column(col, overflow="fold")

    def band(cb, side):
        s = cb.get(f"{side}_s")
        return "" if s is None else f"{fmt_s(s)} ±{cb[side + '_band']:.0%}"
    for n in doc["nodes"]:
        if "best" in n:
            b, cb = n["best"], n.get("calibrated", {})
            t.add_row(e(n["node"]), e(n["op"]), n["decomposition"], fmt_bytes(b["offchip_bytes"]),
                      fmt_s(b["latency_s"]), b["bound"],
                      f"{n['ratio_to_bound']:.2f}" if n.get("ratio_to_bound") else "",
                      band(cb, "edgeops"), band(cb, "ort"), "cached" if n["cached"] else "")
        else:
            t.add_row(e(n["node"]), e(n["op"]), "-", "", "", "", "", "", "", e(n["reason"][:60]))
    c.print(t)
    tt = doc["totals"]
    c.print(f"{tt['tuned']} of {tt['nodes']} nodes tiled ({tt['cached']} from the cache); sum of "
            f"latencies {fmt_s(tt['latency_s'])}, off-chip {fmt_bytes(tt['offchip_bytes'])}; "
            f"{tt['candidates_evaluated']:,} candidates in {tt['seconds']:.2f} s")
    if "calibrated_edgeops_s" in tt:
        c.print(f"calibrated ({e(doc['calibration'])}): edgeops kernels "
                f"{fmt_s(tt['calibrated_edgeops_s'])}, ONNX Runtime {fmt_s(tt['calibrated_ort_s'])}")
    elif doc.get("calibration"):
        c.print(f"latencies are ideal-tiling floors: {e(doc['calibration'])}")
    for k in ("out", "plot"):
        if doc.get(k):
            c.print(f"wrote {e(doc[k])}")


def _print_table(doc: dict) -> None:
    from rich.markup import escape as e
    from rich.table import Table
    c = console()
    t = Table(title=f"measured kernel table, {doc['board']} ({e(doc['machine']['fingerprint'])})")
    for col in ("op / chain", "kernel", "signature", "edgeops", "ORT", "ORT/edgeops", "lowered"):
        t.add_column(col, overflow="fold")
    for r in doc["entries"]:
        t.add_row(e("+".join(r["chain"])), e(r["kernel"]), e(r["signature"][:48]),
                  fmt_s(r["edgeops_s"]) if r["edgeops_s"] != float("inf") else "failed",
                  fmt_s(r["ort_s"]), f"{r['ratio']:.2f}x" if r["ratio"] else "-",
                  "yes" if r["lowered"] else "")
    c.print(t)
    c.print(f"{doc['measured_now']} measured now, {doc['cached']} from {e(doc['table'])}; a kernel "
            f"is used where it is at least {1 - doc['margin']:.0%} faster than ONNX Runtime")
