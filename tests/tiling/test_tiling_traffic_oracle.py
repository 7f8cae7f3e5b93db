"""The closed-form traffic equals a literal execution of the loop nest, byte for byte, per path.

``nest_oracle.run`` walks every loop of a tiling and issues the loads the semantics in
``edgeops.simulator.nest`` describe; it shares no traffic code with the simulator.
"""
import numpy as np
import pytest

import nest_oracle
from edgeops.tiling.api import problem_for
from edgeops.tiling.candidates import granules
from edgeops.tiling.enumerate import Config, defaults, expand
from edgeops.tiling.alltilings import all_values
from edgeops.tiling.batch import batch_from_tilings, nest_plans, tiling_from_batch
from edgeops.tiling.model import evaluate

CASES = [
    ("mini", "gemm:M=50,N=40,K=36,dtype=fp16", "gemm"),
    ("mini", "gemm:M=50,N=40,K=36,dtype=int8", "gemm"),
    ("flat", "gemm:M=23,N=17,K=30", "gemm"),
    ("mini", "matmul:B=3,M=20,N=36,K=40,dtype=fp16,bshared=1", "gemm"),
    ("mini", "conv2d:N=2,C=20,H=9,W=7,K=24,R=3,S=3,pad=1,stride=2,dtype=fp16", "implicit_gemm"),
    ("mini", "conv2d:N=1,C=8,H=9,W=7,K=8,R=3,S=3,pad=1,groups=4,dtype=fp16", "implicit_gemm"),
    ("mini", "conv2d:N=1,C=5,H=9,W=7,K=6,R=3,S=3,pad=1,dtype=fp16", "direct"),
    ("flat", "conv2d:N=1,C=4,H=9,W=8,K=5,R=3,S=2,pad=1,dilation=2", "implicit_gemm"),
    ("mini", "softmax:M=10,D=100,dtype=fp16", "stream"),
    ("mini", "layernorm:M=6,D=80,dtype=fp16", "stream"),
    ("mini", "pool:N=1,C=4,H=9,W=9,R=3,S=3,stride=2,pad=1,dtype=fp16", "stream"),
    ("flat", "eltwise:numel=1000,inputs=2,ops=1", "stream"),
]


def _space(p):
    L = len(nest_plans(p))
    vals = {j: {d: all_values(p.nest.size[d], g) for d, g in granules(p, j).items()} for j in range(L)}
    vv = None
    if p.view is not None:
        g = p.hw.cube_granules(p.dtype)
        vv = {x: np.arange(1, 5) * g[x] for x in "mnk"}
    return expand(p, [Config((), (), ())], 0, L - 1, defaults(p), vals, view=p.view is not None,
                  view_values=vv)


@pytest.mark.parametrize("board,spec,dec", CASES)
def test_closed_form_equals_literal_execution(board, spec, dec, mini_npu, two_level, rng):
    p = problem_for(spec, mini_npu if board == "mini" else two_level, dec)
    space = _space(p)
    view = p.plans[-1].name if p.view is not None else None
    for i in rng.choice(space.n, size=min(25, space.n), replace=False):
        t = tiling_from_batch(p, space, int(i))
        s = evaluate(p, batch_from_tilings(p, [t]))
        closed = {}
        for mv in s.ev.moves:
            closed[mv.key] = closed.get(mv.key, 0) + int(np.reshape(mv.bytes, -1)[0])
        closed = {k: v for k, v in closed.items() if v}
        nest = [lv for lv in t.levels if lv.name != view]
        got = nest_oracle.run(p.nest, p.levels, [dict(lv.tile) for lv in nest], [lv.order for lv in nest],
                              dict(t.split), p.hw.offchip.name, p.view,
                              dict(t.levels[-1].tile) if view else None,
                              t.levels[-1].order if view else None)
        assert got == closed, t.describe()
