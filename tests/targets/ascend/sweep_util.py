"""Sweeps shared by the cross-check tests: emulate random legal tilings of an op, next to the
analytic model's prediction for each (cached per process: several tests read one sweep)."""
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from edgeops import tiling as T
from edgeops.targets.ascend import machine
from edgeops.targets.ascend.emulate import execute
from edgeops.targets.ascend.reference import inputs_and_reference
from edgeops.targets.ascend.sweep import random_tilings


@dataclass(frozen=True)
class Point:
    tiling: object
    emulated: dict          # path -> bytes (non-zero)
    predicted: dict
    replay_s: float         # event-driven replay, launch included
    analytic_s: float
    max_rel_error: float


@lru_cache(maxsize=None)
def sweep(spec: str, board: str, n: int, seed: int = 0, buffers: int | None = None,
          fixed: tuple = ()) -> tuple:
    sp = T.parse_spec(spec)
    decomp = "implicit_gemm" if sp.kind == "conv2d" else None
    out = []
    for i, til in enumerate(random_tilings(spec, board, n, seed=seed, buffers=buffers,
                                           decomposition=decomp, fixed=dict(fixed))):
        gm, ref = inputs_and_reference(sp, np.random.default_rng(seed * 1000 + i))
        res = execute(sp, til, board, gm)
        pred = T.predict(sp, board, til).prediction
        y = np.asarray(res.output, np.float64).reshape(ref.shape)
        err = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))
        out.append(Point(til, {k: v for k, v in res.bytes.items() if v},
                         {k: v for k, v in pred.bytes.items() if v},
                         res.replay.total_s, pred.latency_s, err))
    return tuple(out)


def mape(points, launch_s: float = 0.0) -> tuple[float, float, object]:
    """(mean, worst) |analytic - replay| / replay, and the worst point (launch removed if given)."""
    errs = [abs((p.analytic_s - launch_s) - (p.replay_s - launch_s)) / (p.replay_s - launch_s)
            for p in points]
    i = int(np.argmax(errs))
    return float(np.mean(errs)), errs[i], points[i]


def spearman(a, b) -> float:
    rank = lambda v: np.argsort(np.argsort(v, kind="stable"), kind="stable")
    return float(np.corrcoef(rank(np.asarray(a)), rank(np.asarray(b)))[0, 1])


def launch_s(board: str) -> float:
    return machine(board).launch_s
