"""``edgeops inspect MODEL [--shapes NAME:1x3x224x224;...] [--json]``: op histogram, inputs and
outputs, tensors, parameters, per-node output shapes/MACs/params, total MACs and FLOPs, and which
target of each board runs each op (or that it stays in ONNX Runtime).

``MODEL`` is a path, or the word ``sample`` for the bundled sample model (write ``./sample`` for
a file of that name). :func:`inspect_model` gives the same document as ``--json``.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from edgeops.cli.common import console, print_json

SAMPLE = "sample"


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


# ---- the document --------------------------------------------------------------------------

def load_graph(path_or_model, shapes=None):
    """A Graph from a path, ``"sample"``, bytes, a ModelProto or a Graph."""
    from edgeops import graph
    if isinstance(path_or_model, graph.Graph):
        return path_or_model
    if isinstance(path_or_model, str) and path_or_model == SAMPLE:
        from edgeops.sample import SAMPLE_MODEL_NAME, build_sample_model
        g = graph.load(build_sample_model(), shapes)
        g.source = f"{SAMPLE} ({SAMPLE_MODEL_NAME})"
        return g
    return graph.load(path_or_model, shapes)


def inspect_model(path_or_model, shapes=None) -> dict[str, Any]:
    """The ``edgeops inspect --json`` document of a model (path, "sample", bytes, ModelProto)."""
    g = load_graph(path_or_model, shapes)
    board_names, placements = _placements(g)
    kinds = Counter(("constant" if t.is_const and t.kind != "initializer" else t.kind)
                    for t in g.tensors.values())
    nodes = []
    for n in g.nodes:
        nodes.append({
            "name": n.name, "op": _op(n), "inputs": n.inputs, "outputs": n.outputs,
            "output_shapes": [_shape(s) for s in n.output_shapes],
            "macs": n.cost[0] if n.cost else None, "flops": n.cost[1] if n.cost else None,
            "params": n.param_count, "param_bytes": n.param_bytes,
            "targets": {b: sel[0] for b, sel in placements[n.name].items()},
        })
    uncosted: dict[str, dict] = {}
    for n in g.nodes:
        if n.cost is None:
            u = uncosted.setdefault(_op(n), {"nodes": 0, "why": n.cost_error})
            u["nodes"] += 1
    m = g.model
    return {
        "model": g.source,
        "producer": " ".join(x for x in (m.producer_name, m.producer_version) if x),
        "ir_version": int(m.ir_version), "opsets": g.opsets,
        "inputs": [_tensor(t) for t in g.inputs], "outputs": [_tensor(t) for t in g.outputs],
        "tensors": {"total": len(g.tensors), **{k: kinds.get(k, 0) for k in
                    ("input", "initializer", "constant", "activation", "output")}},
        "params": {"count": g.param_count, "bytes": g.param_bytes},
        "nodes_count": len(g.nodes),
        "op_histogram": g.op_histogram(),
        "macs": g.total_macs, "flops": g.total_flops,
        "macs_by_op": _by_op(g),
        "uncosted": uncosted,
        "boards": board_names,
        "coverage": _coverage(g, placements),
        "nodes": nodes,
    }


def _op(n) -> str:
    return f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type


def _shape(s):
    return None if s is None else [d if isinstance(d, (int, str)) else None for d in s]


def _tensor(t) -> dict:
    return {"name": t.name, "shape": _shape(t.shape), "dtype": t.dtype}


def _by_op(g) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in g.nodes:
        if n.macs:
            out[_op(n)] = out.get(_op(n), 0) + n.macs
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _placements(g) -> tuple[list[str], dict[str, dict[str, tuple[str, str]]]]:
    """Board names, and {node: {board: (target, reason)}} from the kernel registry."""
    from edgeops import boards
    from edgeops.errors import EdgeOpsError
    from edgeops.registry import select
    bs = [boards.load(name) for name in boards.names()]
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for n in g.nodes:
        row = out[n.name] = {}
        for b in bs:
            try:
                sel = select(n, b)
                row[b.name] = (sel.target, sel.reason)
            except EdgeOpsError as e:   # e.g. an attribute the op definition rejects
                row[b.name] = ("onnxruntime", f"stays in ONNX Runtime: {e}")
    return [b.name for b in bs], out


def _coverage(g, placements) -> dict[str, dict[str, dict]]:
    """{op: {board: {"target": most nodes' target, "nodes": {target: count}, "reason": ...}}}."""
    out: dict[str, dict[str, dict]] = {}
    for n in g.nodes:
        for b, (target, reason) in placements[n.name].items():
            cell = out.setdefault(_op(n), {}).setdefault(b, {"nodes": {}, "reasons": {}})
            cell["nodes"][target] = cell["nodes"].get(target, 0) + 1
            cell["reasons"].setdefault(target, reason)
    for row in out.values():
        for b, cell in row.items():
            target = max(cell["nodes"], key=lambda t: (cell["nodes"][t], t != "onnxruntime"))
            row[b] = {"target": target, "nodes": cell["nodes"], "reason": cell["reasons"][target]}
    return dict(sorted(out.items()))


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
