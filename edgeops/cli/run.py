"""``edgeops run PKG [--inputs FILE.npz] [--model ORIGINAL.onnx] [--json] [--layers]``: run a
package here through ONNX Runtime with edgeops' ops, compare with a golden answer, time it
(:func:`edgeops.run.run_package`). Exit status 1 when an output exceeds the package's tolerance.
"""
from __future__ import annotations

from edgeops.cli.common import runs, threads

from edgeops.cli.common import console, fmt_s, print_json


def add(sub):
    p = sub.add_parser("run", help="run a package here and compare it with ONNX Runtime")
    p.add_argument("package", metavar="PKG", help="package directory (edgeops compile -o PKG)")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs by name (default: the package's "
                   "reference inputs)")
    p.add_argument("--model", metavar="ORIGINAL.onnx", help="golden: ONNX Runtime on this model")
    p.add_argument("--layers", action="store_true", help="compare every intermediate tensor")
    p.add_argument("--runs", type=runs, default=5, help="timed runs after one warm-up (median)")
    p.add_argument("--threads", type=threads, help="ONNX Runtime threads (default: the package's)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--to", metavar="URI", help="run on the board at URI (edgeops deploy) instead")
    p.add_argument("--out", metavar="FILE.npz", help="with --to: save the board's outputs here")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.to:     # on the board: edgeops.deploy runs the installed package, outputs come back
        from edgeops.deploy import run_remote
        doc, _ = run_remote(args.to, pkg=args.package, inputs=args.inputs, runs=args.runs,
                            out=args.out)
        if args.json:
            print_json(doc)
        else:
            console().print(f"ran {doc['installed_as']} on {doc['to']}", markup=False)
            print_report(doc)
        return 0 if doc["ok"] is not False else 1
    from edgeops.run import run_package
    doc = run_package(args.package, inputs=args.inputs, model=args.model, layers=args.layers,
                      runs=args.runs, threads=args.threads)
    if args.json:
        print_json(doc)
    else:
        print_report(doc)
    return 0 if doc["ok"] is not False else 1


# ---- human output ---------------------------------------------------------------------------

def print_report(doc: dict) -> None:
    from rich.markup import escape
    from rich.table import Table
    c = console()
    c.print(f"package {escape(doc['package'])} (board {doc['board']}), inputs: "
            f"{escape(doc['inputs'])}, golden: {escape(doc['golden'] or 'none (pass --model)')}")
    t = Table()
    for col in ("output", "shape", "max abs error", "max rel error"):
        t.add_column(col)
    for n, o in doc["outputs"].items():
        t.add_row(escape(n), str(o["shape"]), _e(o.get("max_abs")), _e(o.get("max_rel")))
    c.print(t)
    if "layers" in doc:
        lt = Table(title=f"per layer, golden: {doc['layers_golden']}")
        for col in ("tensor", "node", "op", "runs on", "max abs", "max rel"):
            lt.add_column(col)
        for r in doc["layers"]:
            bad = r["max_rel"] > doc["tolerance"]
            lt.add_row(escape(r["tensor"]), escape(r["node"]), escape(r["op"]), r["where"],
                       _e(r["max_abs"]), f"[red]{_e(r['max_rel'])}[/red]" if bad else _e(r["max_rel"]))
        c.print(lt)
    if doc.get("fallbacks"):
        c.print(f"[yellow]kernel failures ran the reference instead (calls per node, over "
                f"{doc['latency_s']['runs'] + 1} runs): "
                f"{escape(', '.join(f'{n}: {k}' for n, k in sorted(doc['fallbacks'].items())))}[/yellow]")
    lat = doc["latency_s"]
    verdict = {None: "not compared", True: "[green]ok[/green]",
               False: "[red]ABOVE TOLERANCE[/red]"}[doc["ok"]]
    if doc.get("int8") is not None:
        failed = doc["int8"]["failed"]
        c.print(f"int8 check, {escape(doc['int8']['criterion'])}: "
                + ("[green]ok[/green]" if not failed else
                   f"[red]FAILED[/red] at {escape(', '.join(failed))}"))
        verdict = verdict.replace("ABOVE TOLERANCE", "FAILED (int8 check)")
    c.print(f"latency here: median {fmt_s(lat['median'])} over {lat['runs']} runs (predicted on "
            f"{doc['board']}: {fmt_s(doc['predicted_latency_s'])}); accuracy: {verdict} "
            f"(tolerance {doc['tolerance']:.0e} relative)")


def _e(x) -> str:
    return "-" if x is None else f"{x:.2e}"
