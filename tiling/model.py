"""The simulator's vectorised evaluation of a :class:`~edgeops.tiling.batch.Batch` of tilings:
``evaluate`` returns the simulator's arrays plus the fixed passes of the decomposition (which add
their bytes and their latency: they are separate kernels, run before/after the tiled one).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeops.simulator.evaluate import Evaluation, Prediction, evaluate_nest
from edgeops.tiling.batch import Batch
from edgeops.tiling.legality import legal_mask


@dataclass
class Scores:
    ev: Evaluation
    latency_s: np.ndarray
    offchip_bytes: np.ndarray
    legal: np.ndarray = field(default=None)

    def objective(self, kind: str) -> np.ndarray:
        """Primary sort key (ties are broken by latency, then traffic, where it matters)."""
        return self.offchip_bytes.astype(float) if kind == "traffic" else self.latency_s


def evaluate(p, batch: Batch) -> Scores:
    ev = evaluate_nest(p.hw, p.levels, p.nest, batch.cand, dtype=p.dtype, view=p.view,
                       view_tiles=batch.view_tiles, view_order=batch.view_order,
                       view_bufs=batch.view_bufs, view_index=batch.view_index, mac_unit=p.mac_unit,
                       mac_granules=dict(p.mac_granules), mac_const=p.mac_const,
                       mac_flops=p.mac_flops, vector_flops=p.vector_flops)
    lat = ev.latency_s + sum(f.latency_s for f in p.fixed)
    off = ev.offchip_bytes + sum(_offchip(p.hw, f.hop_bytes) for f in p.fixed)
    lat = np.broadcast_to(lat, (batch.n,))
    off = np.broadcast_to(off, (batch.n,))
    s = Scores(ev, lat, off)
    s.legal = legal_mask(p, batch, ev)
    return s


def _offchip(hw, hops: dict) -> int:
    off = hw.offchip.name
    return sum(v for k, v in hops.items() if off in k.split("->"))


def prediction(p, scores: Scores, i: int) -> Prediction:
    """The JSON-able prediction of candidate ``i``, fixed passes included."""
    base = scores.ev.prediction(i, p.space.flops)
    if not p.fixed:
        return base
    hops = dict(base.bytes)
    stages = dict(base.stage_busy_s)
    for f in p.fixed:
        for k, v in f.hop_bytes.items():
            hops[k] = hops.get(k, 0) + v
        stages[f"pass: {f.name}"] = f.latency_s
    cycles = dict(base.cycles)
    util = {}
    lat = float(scores.latency_s[i])
    for f in p.fixed:
        for u, busy in f.unit_busy_s.items():
            hz = p.hw.vector_unit.hz
            cycles[u] = cycles.get(u, 0.0) + busy * hz
    for u, c in cycles.items():
        hz = next((x.hz for x in (p.hw.matrix_unit,) + p.hw.matrix_alts if x.name == u),
                  p.hw.vector_unit.hz)
        util[u] = c / hz / lat if lat > 0 else 0.0
    return Prediction(hops, int(scores.offchip_bytes[i]), cycles, lat, util, base.bound,
                      p.space.flops, stages)
