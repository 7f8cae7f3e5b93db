"""``edgeops demo [--out DIR] [--json]``: the main job end to end on the bundled sample model.

For now: build the sample model, inspect it, list the boards and the op x target support
matrix. The demo is a list of small steps (each ``step(ctx) -> JSON-able part``) so that compile,
simulate and deploy can be appended as they land. Without ``--out`` the model lives in a
temporary folder that is removed afterwards; with ``--out DIR`` it is written to
``DIR/edgeops-sample.onnx`` and an existing file there is never overwritten.
"""
from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any, Callable

from edgeops.cli.common import print_json
from edgeops.cli.inspect import wide_console as console


def add(sub):
    p = sub.add_parser("demo", help="run edgeops on the bundled sample model (inspect, boards, kernels)")
    p.add_argument("--out", metavar="DIR", help="keep the sample model in DIR (refuses to overwrite)")
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
    from edgeops.cli.inspect import inspect_model, print_report
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
    from edgeops.registry import KNOWN_TARGETS, support_matrix
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


# (key in the result, step); later issues append compile, simulate, deploy here
STEPS: list[tuple[str, Callable[[dict], Any]]] = [
    ("model", step_model),
    ("inspect", step_inspect),
    ("boards", step_boards),
    ("support_matrix", step_support_matrix),
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
