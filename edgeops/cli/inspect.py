"""``edgeops inspect MODEL [--shapes NAME:1x3x224x224;...] [--json]``: op histogram, inputs and
outputs, tensors, parameters, per-node output shapes/MACs/params, total MACs and FLOPs, and which
target of each board runs each op (or that it stays in ONNX Runtime).

``MODEL`` is a path, or the word ``sample`` for the bundled sample model (write ``./sample`` for
a file of that name). :func:`edgeops.pipeline.inspect.inspect_model` gives the same document as ``--json``.
"""
from __future__ import annotations

from edgeops.cli.common import console, print_json
from edgeops.pipeline.inspect import inspect_model



def add(sub):
    p = sub.add_parser("inspect", help="ops, tensors, params, MACs and board coverage of a model")
    p.add_argument("model", help="path to an .onnx model, or 'sample' for the bundled one")
    p.add_argument("--shapes", action="append", metavar="NAME:1x3x224x224[;...]",
                   help="concrete sizes for inputs with symbolic dims (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    doc = inspect_model(args.model, shapes=";".join(args.shapes) if args.shapes else None)
    if args.json:
        print_json(doc)
    else:
        print_report(doc)
    return 0


# ---- human output ----------------------------------------------------------------------------

def wide_console():
    return console()


def _num(x) -> str:
    if x is None:
        return "?"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f} {unit}"
    return str(x)


def _fmt_shape(s) -> str:
    from rich.markup import escape
    return "?" if s is None else escape("x".join("?" if d is None else str(d) for d in s) or "scalar")


def print_report(doc: dict, nodes: bool = True) -> None:
    from rich.markup import escape as e
    from rich.table import Table
    c = wide_console()
    c.print(f"[bold]{e(doc['model'])}[/bold]  ir {doc['ir_version']}, opsets "
            + ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in doc["opsets"].items())
            + (f", from {e(doc['producer'])}" if doc["producer"] else ""))
    for kind in ("inputs", "outputs"):
        c.print(f"{kind}: " + ", ".join(f"{e(t['name'])} {_fmt_shape(t['shape'])} {t['dtype']}"
                                       for t in doc[kind]))
    tz = doc["tensors"]
    c.print(f"tensors: {tz['total']} ({tz['initializer']} initializers, {tz['constant']} constants, "
            f"{tz['activation'] + tz['output']} activations)   params: {doc['params']['count']:,} "
            f"({_num(doc['params']['bytes'])}B)   nodes: {doc['nodes_count']}")
    c.print(f"total: {_num(doc['macs'])}MACs, {_num(doc['flops'])}FLOPs")
    if doc["uncosted"]:
        c.print("[dim]no cost for: " + "; ".join(e(f"{op} x{u['nodes']} ({u['why']})")
                                                 for op, u in doc["uncosted"].items()) + "[/dim]")
    boards = doc["boards"]
    t = Table(title="ops and where they run (target per board; onnxruntime = stays in ONNX Runtime)")
    for col in ("op", "count", "MACs", *boards):
        t.add_column(e(col), justify="right" if col in ("count", "MACs") else "left",
                     overflow="fold")
    for op, count in doc["op_histogram"].items():
        cov = doc["coverage"].get(op, {})
        cells = []
        for b in boards:
            cell = cov.get(b)
            cells.append("-" if cell is None else cell["target"]
                         + (" (mixed)" if len(cell["nodes"]) > 1 else ""))
        t.add_row(e(op), str(count), _num(doc["macs_by_op"].get(op, 0)), *cells)
    c.print(t)
    if not nodes:
        return
    t = Table(title="nodes (topological order)")
    for col in ("#", "name", "op", "output shape", "MACs", "params"):
        t.add_column(col, justify="right" if col in ("#", "MACs", "params") else "left",
                     overflow="fold")
    for i, n in enumerate(doc["nodes"]):
        shapes = n["output_shapes"]
        t.add_row(str(i), e(n["name"]), e(n["op"]), _fmt_shape(shapes[0] if shapes else None)
                  + (f" (+{len(shapes) - 1})" if len(shapes) > 1 else ""),
                  _num(n["macs"]), f"{n['params']:,}" if n["params"] else "")
    c.print(t)
