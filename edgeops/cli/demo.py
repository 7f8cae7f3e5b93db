"""``edgeops demo [--out DIR] [--json]``: the main job end to end on the bundled sample model.

Build the sample model, inspect it, list the boards and the op x target support matrix, compile
it for the default board (``host``; ``rpi5`` where edgeops' CPU kernels cannot load) printing the
placement and the predicted latency, then run the package and check it against ONNX Runtime.
The demo is a list of small steps (each ``step(ctx) -> JSON-able part``) so that simulate and
deploy can be appended as they land. Without ``--out`` the model and the package live in a
temporary folder that is removed afterwards; with ``--out DIR`` they are written to
``DIR/edgeops-sample.onnx`` and ``DIR/edgeops-sample-BOARD.pkg``, and an existing file there
is never overwritten.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any, Callable

from edgeops.cli.common import print_json
from edgeops.cli.inspect import wide_console as console


def add(sub):
    p = sub.add_parser("demo", help="run edgeops on the bundled sample model (inspect, boards, "
                       "kernels, compile, run)")
    p.add_argument("--out", metavar="DIR",
                   help="keep the sample model and its package in DIR (refuses to overwrite)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    run_demo(out=args.out, show=not args.json, as_json=args.json)
    return 0


# ---- steps -------------------------------------------------------------------------------------

def step_model(ctx: dict) -> dict:
    from edgeops.sample import SAMPLE_MODEL_NAME, write_sample_model
    path = write_sample_model(Path(ctx["dir"]) / f"{SAMPLE_MODEL_NAME}.onnx")
    ctx["model_path"] = path
    data = path.read_bytes()
    if ctx["show"]:
        where = str(path) if ctx["keep"] else "a temporary folder"
        console().print(f"[bold]1. sample model[/bold] {SAMPLE_MODEL_NAME}: {len(data):,} bytes, "
                        f"written to {where}")
    return {"name": SAMPLE_MODEL_NAME, "path": str(path) if ctx["keep"] else None,
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def step_inspect(ctx: dict) -> dict:
    from edgeops.cli.inspect import print_report
    from edgeops.pipeline.inspect import inspect_model
    doc = inspect_model(ctx["model_path"])
    if not ctx["keep"]:   # the temporary file is gone when the demo returns
        doc["model"] = "sample (edgeops-sample)"
    if ctx["show"]:
        console().print("\n[bold]2. edgeops inspect[/bold]")
        print_report(doc)
    return doc


def step_boards(ctx: dict) -> list[dict]:
    from edgeops import boards
    from edgeops.cli.boards import summary
    docs = [summary(boards.load(n)) for n in boards.names()]
    if ctx["show"]:
        from rich.markup import escape
        from rich.table import Table
        console().print("\n[bold]3. boards[/bold]")
        t = Table()
        for col in ("name", "kind", "targets", "fp32 peak", "off-chip BW", "description"):
            t.add_column(col)
        for s in docs:
            t.add_row(s["name"], s["kind"], ",".join(s["targets"]),
                      f"{s['peak_flops']['fp32'] / 1e9:.0f} GFLOP/s",
                      f"{s['offchip_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s",
                      escape(s["description"].split(":")[0]))
        console().print(t)
    return docs


def step_support_matrix(ctx: dict) -> dict:
    from edgeops.pipeline.targets import load_targets
    from edgeops.registry import KNOWN_TARGETS, support_matrix
    load_targets()
    m = support_matrix()
    if ctx["show"]:
        from rich.table import Table
        console().print("\n[bold]4. kernels: op x target (dtypes)[/bold]")
        t = Table()
        t.add_column("op")
        for tg in KNOWN_TARGETS:
            t.add_column(tg)
        for op, row in m.items():
            t.add_row(op, *[",".join(row.get(tg, [])) or "-" for tg in KNOWN_TARGETS])
        console().print(t)
    return {"targets": list(KNOWN_TARGETS), "ops": m}


def demo_board() -> str:
    """``host`` (this machine, measured) when edgeops' CPU kernels load here, else ``rpi5``."""
    from edgeops.pipeline.targets import import_target
    try:
        neon = import_target("neon")     # the kernels the host board uses
    except Exception:  # noqa: BLE001  (numba missing or broken: the demo still compiles)
        neon = None
    return "host" if neon is not None else "rpi5"


def step_compile(ctx: dict) -> dict:
    from edgeops.cli.common import fmt_s
    from edgeops.cli.compile import print_placement
    from edgeops.pipeline.compile import compile_model
    board = demo_board()
    out = Path(ctx["dir"]) / f"edgeops-sample-{board}.pkg"
    if ctx["show"]:
        console().print(f"\n[bold]5. edgeops compile[/bold] for board {board}: placement and "
                        f"predicted latency, before anything runs")
    doc = compile_model(ctx["model_path"], board, out, show=print_placement if ctx["show"] else None)
    ctx["package"] = out
    v = doc["verified"]
    if ctx["show"]:
        where = str(out) if ctx["keep"] else "a temporary folder"
        console().print(f"package written to {where}; predicted {fmt_s(doc['predicted_latency_s'])} "
                        f"on {board}; checked here: max relative error {v['max_rel']:.1e}")
    return {"board": board, "package": str(out) if ctx["keep"] else None,
            "predicted_latency_s": doc["predicted_latency_s"],
            "lowered": sum(1 for r in doc["placement"] if r["target"]),
            "nodes": len(doc["placement"]), "used_targets": doc["used_targets"],
            "placement": doc["placement"], "verified": v}


def step_run(ctx: dict) -> dict:
    from edgeops.cli.run import print_report
    from edgeops.run import run_package
    doc = run_package(ctx["package"], runs=3)
    if ctx["show"]:
        console().print("\n[bold]6. edgeops run[/bold]: the package in ONNX Runtime with edgeops' "
                        "kernels, against ONNX Runtime on the original model")
        print_report(doc)
    if not ctx["keep"]:
        doc["package"] = None
    return doc


def step_deploy(ctx: dict) -> dict:
    """Install the package on a local board (a folder standing for the board's disk): staged
    upload, checksums on the board, atomic switch, smoke test against the package's reference
    outputs; then run it there and bring the outputs back."""
    from edgeops import deploy
    to = f"local:{Path(ctx['dir']) / 'local-board'}"
    if ctx["show"]:
        console().print(f"\n[bold]7. edgeops deploy[/bold] to {to}, then run on the board")
    d = deploy.deploy(ctx["package"], to, progress=False)
    doc, outs = deploy.run_remote(to, pkg=ctx["package"])
    smoke = d["smoke"]
    if ctx["show"]:
        console().print(f"installed as {d['installed_as']}; smoke test on the board: max relative "
                        f"error {smoke['max_rel']:.1e} (tolerance {smoke['tolerance']:g}) "
                        f"{'ok' if smoke['ok'] else 'FAILED'}; outputs brought back: "
                        f"{', '.join(f'{k} {tuple(v.shape)}' for k, v in outs.items())}")
    return {"to": to if ctx["keep"] else None, "installed_as": d["installed_as"],
            "smoke": smoke, "outputs": {k: list(v.shape) for k, v in outs.items()}}


# (key in the result, step)
STEPS: list[tuple[str, Callable[[dict], Any]]] = [
    ("model", step_model),
    ("inspect", step_inspect),
    ("boards", step_boards),
    ("support_matrix", step_support_matrix),
    ("compile", step_compile),
    ("run", step_run),
    ("deploy", step_deploy),
]


def run_demo(out: str | Path | None = None, *, show: bool = False, as_json: bool = False) -> dict:
    """Run every step; returns {step key: its result}. ``show`` prints the human report,
    ``as_json`` prints the result as one JSON document."""
    from edgeops.errors import EdgeOpsError
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise EdgeOpsError(f"--out {out} is a file; give a folder (it is created if missing)")
    with tempfile.TemporaryDirectory(prefix="edgeops-demo-") as tmp:
        ctx = {"dir": Path(out) if out is not None else Path(tmp), "keep": out is not None,
               "show": show}
        result = {key: step(ctx) for key, step in STEPS}
    if as_json:
        print_json(result)
    return result
