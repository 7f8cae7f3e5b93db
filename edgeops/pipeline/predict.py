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
