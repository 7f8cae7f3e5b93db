"""One predictor: what ``edgeops compile`` would build, simulated (``edgeops simulate MODEL``).

The model goes through compile's own passes and lowering (no measurement, no package), and the
lowered graph is simulated with the costs the placement was decided on: each edgeops node its
tiling's prediction plus its bridge copies, each node kept in ONNX Runtime ONNX Runtime's
predicted latency. So the simulation's total is compile's predicted latency, and its timeline,
memory plan and traffic belong to the graph that would run. The tiling study of the unfused
graph (``--unfused``) stays :func:`edgeops.tiling.graphsim.simulate_model`.
"""
from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace


def simulate_compiled(model, board, *, mode: str = "auto", shapes=None, targets=None,
                      budget: int | None = None, cache=True):
    """A :class:`~edgeops.simulator.graph.GraphSim` of ``model`` (path, "sample", bytes,
    ModelProto) as compiled for ``board`` with ``--lower mode``; ``extra`` carries the view,
    compile's predicted total and the nodes compile leaves unmodelled."""
    from edgeops import boards, graph
    from edgeops.lower import lower
    from edgeops.pipeline.models import resolve
    from edgeops.simulator.graph import (bridge_copies, simulate_graph, tiled_cost, untiled_cost,
                                         with_copies)
    from edgeops.tiling.api import hardware
    from edgeops.tiling.graphsim import board_cast
    t0 = time.perf_counter()
    b = boards.load(board)
    src, name = resolve(model)
    kw = {} if budget is None else {"budget": budget}
    lw = lower(src, b, mode=mode, targets=targets, shapes=shapes, measure=False, cache=cache, **kw)
    g = graph.load(lw.model, check=False)
    g.source = name
    target = (lw.to_dict()["used_targets"] or [None])[0]
    hw, cast = hardware(b, target), board_cast(b, target)
    rows = {p.node: p for p in lw.placements}
    costs = {}
    for n in g.nodes:
        p = rows.get(n.name)
        if p is None:
            continue
        base = untiled_cost(n, hw, cast)
        if p.target is None:
            lat = base.latency_s if p.latency_s is None else p.latency_s
            costs[n.name] = replace(base, model="onnxruntime", latency_s=lat, busy_s={},
                                    note=(f"ONNX Runtime: {p.calibration}" if p.calibration else
                                          "ONNX Runtime: its predicted latency (simulator.peer)")
                                    if p.latency_s is not None else base.note)
            continue
        pred = getattr(p, "prediction", None)
        if pred is None:
            costs[n.name] = replace(base, note=f"{p.kernel}: not modelled by the lowering "
                                               f"({base.note})")
            continue
        t = p.planned
        c = tiled_cost(pred, decomposition=t.decomposition, tiling=t.to_dict(),
                       tiling_desc=t.describe(), signature=p.signature, dtype=p.precision)
        cs, nb = bridge_copies(n, b, p.target)
        c = with_copies(c, nb, cs) if nb else c
        if p.calibration and p.latency_s is not None and c.latency_s > 0:
            # the placement's calibrated time (edgeops.simulator.calibration); busy tracks
            # keep the tiling's shares
            f = p.latency_s / c.latency_s
            c = replace(c, latency_s=p.latency_s, busy_s={k: v * f for k, v in c.busy_s.items()},
                        note=f"calibrated: {p.calibration}")
        costs[n.name] = c
    sim = simulate_graph(g, b, costs, target=target, cast=cast, peer=False, copies=False,
                         title=name)
    for r in sim.rows:
        p = rows.get(r["node"])
        if p is not None:
            r.update(where=p.where, kernel=p.kernel, peer_latency_s=p.peer_latency_s,
                     reason=p.reason)
    sim.extra = {"view": "compiled", "mode": mode, "tiling": "auto",
                 "compile_predicted_latency_s": lw.predicted_latency_s,
                 "unmodelled": lw.unmodelled, "seconds": time.perf_counter() - t0}
    return sim


def calibrate_tuned(doc: dict, g, board, threads: int | None = None) -> dict:
    """Add to ``edgeops tune MODEL``'s document (:func:`edgeops.tiling.graphsim.tune_model`) what
    the board's calibration (edgeops.simulator.calibration) predicts for each tuned node of
    ``g``: through the kernel the registry would pick and on ONNX Runtime, each with its band.
    A tiling's latency is the ideal-tiling floor the search ranks by; these are what the node is
    expected to take (docs/notes/calibration.md). Returns ``doc``, updated in place."""
    from edgeops import boards
    from edgeops.lower.policy import _blocker, _select, calibration_for
    from edgeops.pipeline.targets import import_target, load_targets
    b = boards.load(board)
    cal = calibration_for(b)
    doc["calibration"] = cal.describe()
    if not cal.available:
        return doc
    load_targets()
    for t in b.targets:
        import_target(t)
    ctx = SimpleNamespace(board=b, targets=tuple(b.targets), opset=g.opsets.get("", 0))
    nodes = {n.name: n for n in g.nodes}
    tot = {"edgeops": 0.0, "ort": 0.0}
    for row in doc["nodes"]:
        n = nodes.get(row["node"])
        if n is None or "best" not in row:
            continue
        k = _select(n, ctx)[0] if _blocker(n, ctx) is None else None
        ests = {"ort": cal.estimate(n, "ort", threads)}
        if k is not None:
            ests["edgeops"] = cal.estimate(n, "edgeops", threads, k.name)
        got = {"kernel": k.name if k is not None else None}
        for side, e in ests.items():
            if e is not None:
                got |= {f"{side}_s": e.seconds, f"{side}_band": e.band, f"{side}_source": e.source}
                tot[side] += e.seconds
        row["calibrated"] = got
    doc["totals"]["calibrated_edgeops_s"] = tot["edgeops"]
    doc["totals"]["calibrated_ort_s"] = tot["ort"]
    return doc
