"""What a model or a kernel is, as documents: ``edgeops inspect`` (:func:`inspect_model`: ops,
tensors, parameters, MACs, and which target of each board would run each node) and
``edgeops inspect-kernel`` (:func:`inspect_kernel`: a registered kernel, its Jetson PTX or its
aarch64 assembly)."""
from __future__ import annotations

from collections import Counter
from typing import Any

from edgeops.errors import EdgeOpsError


def inspect_model(path_or_model, shapes=None) -> dict[str, Any]:
    """The ``edgeops inspect --json`` document of a model (path, "sample", bytes, ModelProto)."""
    from edgeops.pipeline.models import load_graph
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
    from edgeops.pipeline.targets import load_targets
    from edgeops.registry import select
    load_targets()
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


def inspect_kernel(name: str, target: str | None = None, ptx: bool = False,
                   variant: str | None = None, asm: bool = False) -> dict:
    from edgeops.pipeline.targets import load_targets
    from edgeops.registry import kernel_by_name
    load_targets()
    k = kernel_by_name(name)
    if target is not None and k.target != target:
        raise EdgeOpsError(f"kernel {name!r} is a {k.target} kernel, not {target}; list the "
                           f"{target} kernels with `edgeops ops`")
    doc = {"name": k.name, "op": k.op, "target": k.target, "dtypes": list(k.dtypes),
           "priority": k.priority, "doc": k.doc}
    if ptx:
        if k.target != "cuda":
            raise EdgeOpsError(f"--ptx is for cuda kernels; {name!r} is a {k.target} kernel")
        from edgeops.targets.cuda import ptx as P
        why = P.toolchain_problem()
        if why:
            raise EdgeOpsError(why)
        doc["ptx"] = [{"variant": p.variant, "target": p.target, "version": p.version,
                       "text": p.text} for p in P.compile_kernel(name, variant)]
    if asm:
        if k.target != "neon":
            raise EdgeOpsError(f"--asm is for neon kernels; {name!r} is a {k.target} kernel")
        from edgeops.targets.neon.asm import neon_report
        rep = neon_report(name)
        doc["asm"] = {"triple": "aarch64-unknown-linux-gnu", "cpu": "cortex-a76",
                      "counts": rep.counts, "text": rep.asm}
    return doc
