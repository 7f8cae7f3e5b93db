"""``edgeops calibrate``: measure a shape grid on this machine and fit the calibrated cost model
(:mod:`edgeops.simulator.calibration`; rules and figures: docs/notes/calibration.md).

The grid is the benchmark zoo's networks (edgeops.modelzoo) at reduced sizes: every node of the
fused graph is timed as one-node sessions, as the host's measured kernel table times it
(:mod:`edgeops.lower.measure`): the edgeops kernel through the bridge, its dispatch entry alone,
and ONNX Runtime on the original node(s); nodes no kernel takes only on ONNX Runtime. What a
``session.run`` costs by itself (a one-node Identity session, timed alongside) is recorded, for
predictions to take off a node that runs inside a model; and each grid network is also timed
whole (ONNX Runtime's session, the package with every node lowered), for the factor a node
costs inside a model over its one-node figure (``in_model``).

The file goes to ``<edgeops cache>/calibration/<board>.json`` (never into the repository), with
its provenance; it is stale, and ignored with a message, once the kernels or the runtime bridge
change (``kernels_key``) or, for ``host``, on another machine (``machine_key``).
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from types import SimpleNamespace

from edgeops.errors import EdgeOpsError

# (zoo network, size) per grid; sizes below the benchmark's defaults so that those stay unseen
GRIDS = {
    "tiny": [("swiglu_mlp", 8), ("unet_block", 8)],
    "small": [("resnet18", 32), ("mobilenetv2", 32), ("yolo_neck", 8), ("unet_block", 16),
              ("encoder_block", 16), ("swiglu_mlp", 16)],
    "full": [("resnet18", 32), ("resnet18", 64), ("mobilenetv2", 32), ("mobilenetv2", 96),
             ("yolo_neck", 16), ("yolo_neck", 32), ("unet_block", 16), ("unet_block", 32),
             ("encoder_block", 16), ("encoder_block", 64), ("swiglu_mlp", 16),
             ("swiglu_mlp", 64)],
}
DEFAULT_GRID = "full"
METHOD = ("one-node sessions per fused node of the grid's networks (edgeops.lower.measure: "
          "interleaved blocks, medians); fitted per (side, family, dtype, threads) by "
          "non-negative least squares on relative error; a one-node Identity session's run "
          "(session_overhead_s) is what predictions take off for a node inside a model, and "
          "in_model the factor each side's nodes cost inside a whole model (median over the "
          "grid's whole models: ONNX Runtime's session, the --lower all package)")


def current_keys() -> tuple[str, str]:
    """(kernels key, machine key) of this process (edgeops.lower.policy)."""
    from edgeops.lower.policy import kernels_key, machine_key
    return kernels_key(), machine_key()


def load_for(board):
    """The :class:`~edgeops.simulator.calibration.Calibration` ``board`` predicts with here."""
    from edgeops.lower.policy import calibration_for
    return calibration_for(board)


def grid_items(grid: str) -> list[tuple[str, int]]:
    if grid not in GRIDS:
        raise EdgeOpsError(f"unknown grid {grid!r}; use one of {', '.join(GRIDS)}")
    return list(GRIDS[grid])


def _session_overhead(threads: int) -> float:
    """Median seconds of ``run`` on a one-node Identity session: what every one-node figure
    pays that a node inside a model does not."""
    import numpy as np
    from onnx import TensorProto, helper
    from edgeops.lower.measure import _medians, _ort_session
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "empty",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    s = _ort_session(m, threads)
    return _medians([s], {"x": np.zeros(1, np.float32)})[0]


def _ort_only(node, originals, threads):
    """ONNX Runtime's seconds for a node no kernel takes (its original nodes if fused)."""
    from edgeops.lower.measure import _medians, _mini, _ort_session, _proto
    try:
        protos = [_proto(o) for o in originals] if originals else [_proto(node)]
        g = originals[0].graph if originals else node.graph
        m, feeds = _mini(protos, g, node.outputs[0])
        s = _ort_session(m, threads)
        s.run(None, feeds)
        return _medians([s], feeds)[0]
    except Exception:  # noqa: BLE001  (cannot be cut out, or ORT refuses it: no row)
        return None


def plan(model, board):
    """[(fused node, kernel or None, original nodes)] of ``model`` as lowering sees it."""
    from edgeops import graph
    from edgeops.lower.policy import _blocker, _select
    from edgeops.lower.surgery import named, provenance
    from edgeops.passes import run_passes
    from edgeops.pipeline.targets import import_target, load_targets
    load_targets()
    for t in board.targets:
        import_target(t)
    src = graph.load(named(model))
    fused_model, report = run_passes(src.model)
    fused = graph.load(fused_model, check=False)
    origin = provenance(report)
    src_nodes = {n.name: n for n in src.nodes}
    ctx = SimpleNamespace(board=board, targets=tuple(board.targets), opset=src.opsets.get("", 0))
    out = []
    for n in fused.nodes:
        if n.op_type in graph.CONSTANT_OPS:
            continue
        originals = [src_nodes[s] for s in origin.get(n.name, ())] if n.domain else []
        k = None
        if _blocker(n, ctx) is None:
            k = _select(n, ctx)[0]
        out.append((n, k, originals))
    return out


def measure_rows(model, board, threads: int, tag: str = "", advance=lambda: None,
                 fixed: dict | None = None) -> list[dict]:
    """Calibration rows (:func:`edgeops.simulator.calibration.fit`) of every node of ``model``:
    one-node session seconds as measured (the session's own run included); features at the
    board's rates, or ``fixed`` ones (a calibration's, :func:`fitted_rates`)."""
    from edgeops.lower.measure import measure
    from edgeops.simulator import calibration as cal
    rows = []
    from edgeops.lower.policy import _signature
    for n, k, originals in plan(model, board):
        base = {"model": tag, "node": n.name, "op": n.op_type, "dtype": cal.node_dtype(n),
                "threads": threads, "signature": _signature(n), "reuse": cal.reuse(n)}
        t = measure(n, k, originals, threads) if k is not None else None
        fam = {"ort": cal.ort_family(n)}
        if t is not None and all(v is not None and v != float("inf") for v in t):
            for side, s in zip(("edgeops", "ort", "kernel"), t):
                rows.append({**base, "side": side, "kernel": k.name, "seconds": s,
                             "family": fam.get(side, k.name),
                             "x": cal.features(n, side, board, threads, fixed).tolist()})
        else:
            o = _ort_only(n, originals, threads)
            if o is not None:
                rows.append({**base, "side": "ort", "kernel": None, "seconds": o,
                             "family": fam["ort"],
                             "x": cal.features(n, "ort", board, threads, fixed).tolist()})
        advance()
    return rows


def add_reuse(rows: list[dict], board) -> list[dict]:
    """Give rows measured before they carried it their ``reuse`` (what the in-model cold term
    needs, :func:`edgeops.simulator.calibration.reuse`), from the zoo network their ``model``
    tag names ("name:size", "name:default"); rows of other models are left as they are."""
    from edgeops import modelzoo
    from edgeops.simulator import calibration as cal
    nodes: dict = {}
    for r in rows:
        if r.get("reuse") is not None:
            continue
        tag = r.get("model") or ""
        if tag not in nodes:
            name, _, size = tag.partition(":")
            try:
                m = modelzoo.build(name, size=None if size in ("", "default") else int(size))
                nodes[tag] = {n.name: n for n, _k, _o in plan(m, board)}
            except (EdgeOpsError, ValueError):
                nodes[tag] = {}
        n = nodes[tag].get(r["node"])
        if n is not None:
            r["reuse"] = cal.reuse(n)
    return rows


def measure_whole(model, board, threads: int, tag: str) -> dict:
    """The whole model as ONNX Runtime runs it and as a package with every node lowered that
    can be (edgeops.lower.measure.measure_model), for the in-model factors."""
    from edgeops.lower import lower
    from edgeops.lower.measure import measure_model
    lw = lower(model, board, mode="all", threads=threads)
    t = measure_model(lw.source, lw.model, threads)
    return {"model": tag, "threads": threads, "lowered": sorted(p.node for p in lw.lowered),
            "package_s": None if t is None else t[0], "ort_s": None if t is None else t[1]}


def provenance(board, grid: str, threads, seconds: float, overhead: dict) -> dict:
    import numba
    import onnxruntime
    from edgeops import __version__
    from edgeops.lower.measure import machine
    from edgeops.simulator.calibration import descriptor
    k, m = current_keys()
    return {"board": descriptor(board), "machine": machine(), "platform": platform.platform(),
            "versions": {"edgeops": __version__, "onnxruntime": onnxruntime.__version__,
                         "numba": numba.__version__, "python": platform.python_version()},
            "kernels_key": k, "machine_key": m,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "method": METHOD,
            "grid": grid, "grid_models": [f"{n}:{s}" for n, s in grid_items(grid)],
            "threads": list(threads), "session_overhead_s": overhead, "wall_s": seconds,
            "rates": fitted_rates(board, threads)}


def fitted_rates(board, threads) -> dict:
    """{"<dtype>|t<N>": [gemm, stream, bandwidth]}: the board's rates the rows' features were
    computed with, which predictions on this board keep using (host's are measured figures,
    cached apart, and measured again with a new cache or machine state)."""
    from edgeops.simulator.calibration import rates
    out = {}
    for dt in ("fp32", "fp16", "int8"):
        for t in threads:
            try:
                out[f"{dt}|t{t}"] = [float(v) for v in rates(board, dt, t)[:3]]
            except EdgeOpsError:
                pass
    return out


def calibrate(board: str = "host", *, grid: str = DEFAULT_GRID, threads=(1, 2), out=None,
              force: bool = False, here: bool = False, progress=None) -> dict:
    """Measure ``grid`` on this machine at each of ``threads``, fit, and write the calibration of
    ``board`` (default: ``<cache>/calibration/<board>.json``; ``out``: a file of the user's, not
    overwritten without ``force``). Only ``host`` is this machine, unless ``here`` (run on the
    board itself by ``calibrate --to``). ``progress(total)`` returns ``advance()``. Returns the
    document written."""
    from edgeops import boards, modelzoo
    from edgeops.simulator import calibration as cal
    b = boards.load(board)
    if b.name != "host" and not here:
        raise EdgeOpsError(f"board {b.name!r} is not this machine: calibrate 'host' here, or "
                           f"run the grid on the board with --to TRANSPORT")
    if b.peer is None:
        raise EdgeOpsError(f"board {b.name!r} ({b.kind}) has no ONNX Runtime peer to calibrate "
                           f"against; its predictions use the default band")
    threads = sorted({int(t) for t in threads})
    if not threads or threads[0] < 1:
        raise EdgeOpsError(f"threads {threads}: give positive thread counts")
    items = grid_items(grid)
    target = Path(out) if out else cal.path_for(b.name)
    if out and target.exists() and not force:
        raise EdgeOpsError(f"{target} already exists; edgeops will not overwrite it (use --force)")
    if out and not target.parent.is_dir():
        raise EdgeOpsError(f"directory {target.parent} does not exist; create it first")
    t0 = time.perf_counter()
    models = [(f"{n}:{s}", modelzoo.build(n, size=s)) for n, s in items]
    total = sum(len(plan(m, b)) for _, m in models) * len(threads)
    advance = progress(total) if progress else (lambda: None)
    rows, overhead, wholes = [], {}, []
    for t in threads:
        overhead[str(t)] = _session_overhead(t)
        for tag, m in models:
            rows += measure_rows(m, b, t, tag, advance)
            wholes.append(measure_whole(m, b, t, tag))
    entries = cal.fit(rows)
    doc = {"format": cal.FORMAT, "board": b.name,
           "provenance": provenance(b, grid, threads, time.perf_counter() - t0, overhead),
           "entries": entries, "rows": rows, "wholes": wholes,
           "in_model": cal.in_model_factors(rows, wholes, entries, overhead, b)}
    if not out:
        target.parent.mkdir(parents=True, exist_ok=True)    # the cache's own directory
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tmp.replace(target)
    doc["path"] = str(target)
    return doc
