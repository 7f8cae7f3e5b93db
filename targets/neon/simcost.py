"""The conv chooser's simulator cost: per decomposition, the latency the simulator
(``edgeops.simulator`` with the board's CPU model, through the tiling planner's search) predicts
for the best tiling of that decomposition.

Installed as ``chooser``'s cost hook when ``edgeops.targets.neon`` is imported, so a pick is:
the board's measured override (``overrides.py``) if there is one, else the simulator's cheapest
decomposition, else (a shape the planner cannot express) the chooser's built-in model.

Decomposition names map onto the planner's: ``im2col`` -> ``im2col`` (``implicit_gemm`` for a
1x1 stride-1 conv, which the NEON kernel runs as a GEMM on the image with no column copy),
``depthwise`` -> ``direct``, ``winograd`` -> ``winograd``. Searches are memoised per
(shape, decomposition, board); each costs ~0.1-0.5 s with :data:`BUDGET` candidates.
"""
from __future__ import annotations

import threading

from edgeops.targets.neon.conv import ConvGeom

BUDGET = 20_000  # candidates per decomposition: ~0.15 s; 250k (the planner's default) ~0.5 s
_PLANNER = {"im2col": "im2col", "depthwise": "direct", "winograd": "winograd"}
_MEMO: dict[tuple, float | None] = {}
_LOCK = threading.Lock()


def conv_space(g: ConvGeom):
    """The planner's conv2d space for a geometry, or None when it cannot express it (the spec
    has one stride, dilation and pad pair for both axes)."""
    from edgeops.tiling import make_space
    end_h = (g.oh - 1) * g.sh + (g.r - 1) * g.dh + 1 - g.h - g.ph
    end_w = (g.ow - 1) * g.sw + (g.s - 1) * g.dw + 1 - g.w - g.pw
    if g.sh != g.sw or g.dh != g.dw or g.ph != g.pw or end_h != end_w or min(g.ph, end_h) < 0:
        return None
    try:
        return make_space("conv2d", N=g.n, C=g.c, H=g.h, W=g.w, K=g.k, R=g.r, S=g.s,
                          stride=g.sh, pad=g.ph, pad_end=end_h, dilation=g.dh, groups=g.group,
                          dtype="fp32")
    except Exception:  # noqa: BLE001 - an inexpressible shape is "no opinion", not an error
        return None


def planner_decomposition(g: ConvGeom, decomposition: str) -> str | None:
    if decomposition == "im2col" and g.is_pointwise:
        return "implicit_gemm"
    return _PLANNER.get(decomposition)


def simulator_cost(g: ConvGeom, decomposition: str, board=None) -> float | None:
    """Predicted seconds of ``decomposition`` for ``g`` on ``board`` (a Board, a name, or None
    for the host), or None: no opinion (the chooser then uses its own model)."""
    d = planner_decomposition(g, decomposition)
    sp = conv_space(g) if d else None
    if sp is None:
        return None
    bname = getattr(board, "name", board) or "host"
    key = (sp, d, bname)
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key]
    try:
        from edgeops.tiling import decompositions, search
        if d not in decompositions(sp, board or "host"):
            t = None
        else:
            r = search(sp, board or "host", decomposition=d, top=1, budget=BUDGET)
            t = float(r.best.prediction.latency_s)
    except Exception:  # noqa: BLE001 - a planner failure must not break a conv: no opinion
        t = None
    with _LOCK:
        _MEMO[key] = t
    return t
