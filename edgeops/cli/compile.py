"""``edgeops compile MODEL --board B -o PKG [--lower auto|all|none] [--shapes ...] [--json] [--force]``:
fuse, lower for a board, print where every node runs and how fast it should be, then write the
package (``edgeops.package``).

The placement table and the predicted total are printed before anything runs: which node goes to
which target (or stays in ONNX Runtime) and why, the predicted latency and what bounds it. Then
the reference outputs are computed by ONNX Runtime on the original model and, unless
``--no-verify``, the lowered model is run here once and its error recorded in the manifest. A
kernel that fails that run has its node moved to ONNX Runtime and the model is compiled again
(the reason is in the placement table), so a target's bug costs speed, not a broken package.
Exit status 1 when the check runs but the package is above its tolerance (a quantized model:
when an edgeops node is off ONNX Runtime on the QDQ model by more than its quantization steps
allow, :func:`edgeops.pipeline.quantize.check_int8`).
:func:`edgeops.pipeline.compile.compile_model` is the same in Python.
"""
from __future__ import annotations

from edgeops.cli.common import calib_data, seed, threads

from edgeops.cli.common import console, fmt_s, print_json


def add(sub):
    p = sub.add_parser("compile", help="fuse and lower a model for a board, write a package")
    p.add_argument("model", help="path to an .onnx model, or 'sample' for the bundled one")
    p.add_argument("--board", required=True, help="board name (edgeops boards) or board file")
    p.add_argument("-o", "--out", required=True, metavar="PKG", help="package directory to write")
    p.add_argument("--lower", default="auto", choices=("auto", "all", "none"),
                   help="auto: edgeops kernels where predicted/measured faster than ONNX Runtime "
                        "(every supported node on NPUs); all: every supported node; none: none")
    p.add_argument("--targets", metavar="T1,T2", help="kernel targets instead of the board's "
                   "(e.g. reference)")
    p.add_argument("--shapes", action="append", metavar="NAME:1x3x224x224[;...]",
                   help="concrete sizes for inputs with symbolic dims (repeatable)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the reference inputs")
    p.add_argument("--threads", type=threads, help="ONNX Runtime threads the package asks for")
    p.add_argument("--omp-wait", choices=("passive", "spin"), default=None,
                   help="how the kernels' OpenMP workers wait between parallel regions, measured "
                        "with and named in the manifest: passive (default; nothing spins against "
                        "ONNX Runtime's threads) or spin (~0.5 ms first: faster back-to-back "
                        "edgeops regions at 2+ threads, slower ONNX Runtime nodes right after "
                        "them)")
    p.add_argument("--no-tune", action="store_true",
                   help="no tiling search: kernels use their default blocking and there are no "
                        "predictions (auto then keeps CPU/GPU nodes in ONNX Runtime)")
    p.add_argument("--no-verify", action="store_true",
                   help="do not run the lowered model here before writing the package")
    p.add_argument("--force", action="store_true", help="replace an existing package at PKG")
    p.add_argument("--quantize", metavar="DATA", type=calib_data, help="INT8-quantize first (QDQ, then int8 "
                   "kernels), calibrated on DATA: .npz, folder of .npy/images, or 'random[:N]'")
    p.add_argument("--method", default="minmax", choices=("minmax", "percentile", "entropy", "mse"),
                   help="calibration method for --quantize")
    p.add_argument("--sign", metavar="KEY", help="sign the package with this ed25519 private "
                   "key (edgeops keygen); writes PKG/manifest.sig")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    show = None if args.json else print_placement
    key = None
    if args.sign:       # a bad key fails before the work
        from edgeops.deploy.signing import load_private_key, sign
        key = load_private_key(args.sign)
    model, qrep, qdoc = args.model, None, None
    if args.quantize:
        from edgeops.pipeline.quantize import manifest_section, quantize_for_compile
        model, qrep = quantize_for_compile(args.model, args.quantize, method=args.method)
        qdoc = manifest_section(qrep)
    from edgeops.pipeline.compile import compile_model
    doc = compile_model(model, args.board, args.out, mode=args.lower,
                        shapes=";".join(args.shapes) if args.shapes else None,
                        targets=args.targets.split(",") if args.targets else None,
                        force=args.force, verify=not args.no_verify, seed=args.seed,
                        threads=args.threads, plan=not args.no_tune, show=show,
                        say=None if args.json else _say, omp_wait=args.omp_wait,
                        quantization=qdoc)
    if qrep is not None:
        doc["quantization"] = {**qdoc, "end_to_end": qrep["end_to_end"]}
    if key is not None:
        doc["signature"] = sign(args.out, key)
    if args.json:
        print_json(doc)
    else:
        print_written(doc)
    return 1 if doc["verified"] is not None and not doc["verified"]["ok"] else 0


# ---- human output ---------------------------------------------------------------------------

def _say(line: str) -> None:
    console().print(f"[yellow]{line}[/yellow]")


def print_placement(doc: dict) -> None:
    from rich.markup import escape
    from rich.table import Table
    rows = doc["placement"]
    t = Table(title=f"placement of {doc['model']} on {doc['board']} ({doc['board_kind']}), "
                    f"--lower {doc['mode']}")
    for col, kw in (("node", {}), ("op", {}), ("runs on", {}), ("predicted", {"justify": "right"}),
                    ("bound", {}), ("reason", {"overflow": "fold"})):
        t.add_column(col, **kw)
    for r in rows:
        where = r["where"] if r["target"] else f"[dim]{r['where']}[/dim]"
        band = r.get("band")
        pred = fmt_s(r["latency_s"]) + (f" ±{band:.0%}" if band is not None and r["latency_s"] else "")
        t.add_row(escape(r["node"]), escape(r["op"]), where, pred,
                  r["bound"] or "-", escape(r["reason"]))
    c = console()
    c.print(t)
    on = [r for r in rows if r["target"]]
    line = (f"predicted total [bold]{fmt_s(doc['predicted_latency_s'])}[/bold]: {len(on)} of "
            f"{len(rows)} nodes on edgeops kernels ({', '.join(doc['used_targets']) or 'none'}), "
            f"{len(rows) - len(on)} in ONNX Runtime")
    if doc["unmodelled"]:
        line += f"; {len(doc['unmodelled'])} node(s) not modelled (not in the total)"
    c.print(line)
    for tgt, note in doc["precision"].items():
        if tgt != "boundary":
            c.print(f"precision ({tgt}): {note}")


def print_written(doc: dict) -> None:
    c = console()
    v = doc.get("verified")
    if v is None:
        check = "not run here (--no-verify)"
    elif "int8" in v:
        state = "[green]ok[/green]" if v["ok"] else \
            f"[red]FAILED[/red] at {', '.join(v['int8']['failed'])}"
        worst = max((r["max_steps"] for r in v["int8"]["tensors"].values()), default=None)
        nodes = ("no edgeops node to check (ONNX Runtime runs the QDQ model)" if worst is None
                 else f"every edgeops node within {worst:.2f} quantization steps of ONNX Runtime "
                      f"on the QDQ model (allowed: 1 on 99.9%, 2 on all)")
        check = f"{nodes}: {state}; end to end max relative error {v['max_rel']:.2e}"
    else:
        state = "[green]ok[/green]" if v["ok"] else "[red]ABOVE TOLERANCE[/red]"
        check = (f"max relative error {v['max_rel']:.2e} vs ONNX Runtime on the original "
                 f"(tolerance {doc['tolerance']['rel']:.0e}): {state}")
    c.print(f"package written to [bold]{doc['package']}[/bold]; check: {check}")
    q = doc.get("quantization")
    if q:       # accuracy, not a verdict: int8 is meant to differ from float
        from edgeops.quantize.analysis import fmt_db
        a = q["accuracy"]
        top1 = "" if a["top1_agreement"] is None else \
            f", top-1 agreement {a['top1_agreement']:.1%}"
        c.print(f"accuracy of int8 ({q['method']}) vs the float model {q['source']['name']} on "
                f"{a['on']}: SQNR {fmt_db(a['sqnr_db'])} dB, cosine {a['cosine']:.5f}{top1}")
