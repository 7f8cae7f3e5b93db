"""Study (c): double buffering. Vector-unit utilisation of a copy-in / compute / copy-out pipeline
with one buffer per tensor versus two.

1. The timing model alone (``edgeops.simulator.queue_pipeline``, the NPU's queue discipline):
   three equal stages of n tile steps. One buffer shared by all three (in-place compute: CopyIn,
   Compute and CopyOut hold it in turn) serialises them -- utilisation 1/3 whatever n. One buffer
   per queue (Ascend C: an input queue CopyIn -> Compute and an output queue Compute -> CopyOut,
   BUFFER_NUM=1) lets CopyOut(i) overlap CopyIn(i+1): period 2T, n / (2n + 1). Double-buffered
   the steady state is the slowest stage plus one step of fill and drain -- n / (n + 2).
2. A real kernel on ascend-910b and ascend-310b: an element-wise op over 4M fp16 elements with
   as many flops per element as make the Vector unit's time equal to MTE2's (GM -> UB) on that
   board (MTE3, UB -> GM, moves as much as MTE2: three equal stages), over UB tile sizes, 1 vs 2
   buffers. The body utilisation excludes the launch overhead; the kernel utilisation includes it.

    python benchmarks/study_double_buffer.py [--json] [--plot DIR]

Writes double_buffer.png into DIR.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from study_common import emit, parser, plot_path, us  # noqa: E402

NUMEL = 4194304
BOARDS = ("ascend-910b", "ascend-310b")
STEPS = (1, 2, 4, 8, 16, 32, 64)


def analytic() -> list[dict]:
    import numpy as np
    from edgeops.simulator import queue_pipeline
    out = []
    for n in STEPS:
        st = {s: (np.float64(1.0), n) for s in ("in", "v", "out")}
        shared = float(queue_pipeline(st, [(("in", "v", "out"), 1)]))
        one = float(queue_pipeline(st, [(("in", "v"), 1), (("v", "out"), 1)]))
        two = float(queue_pipeline(st, [(("in", "v"), 2), (("v", "out"), 2)]))
        out.append({"steps": n, "util_shared_buffer": 1.0 / shared, "util_1_buffer": 1.0 / one,
                    "util_2_buffers": 1.0 / two, "formula_1_buffer": n / (2 * n + 1),
                    "formula_2_buffers": n / (n + 2)})
    return out


def balanced_op(board: str) -> str:
    """The element-wise op whose Vector time equals its MTE2 time on ``board`` (searched tiling)."""
    from edgeops import tiling as T
    probe = f"eltwise:numel={NUMEL},inputs=1,ops=1,dtype=fp16"
    p = T.search(probe, board).best.prediction
    vec_per_op = p.utilisation["vector"] * p.latency_s
    return f"eltwise:numel={NUMEL},inputs=1,ops={max(1, round(p.stage_busy_s['mte2'] / vec_per_op))},dtype=fp16"


def kernel(board: str) -> tuple[str, dict, list[dict]]:
    from edgeops import boards
    from edgeops import tiling as T
    from edgeops.simulator.hardware import from_board
    hw = from_board(boards.load(board))
    OP = balanced_op(board)
    best = T.search(OP, board)
    t = best.best.tiling.to_dict()
    cores = max(1, best.best.tiling.cores)
    per_core = NUMEL // cores
    rows = []
    tile = 16
    while tile <= per_core:
        for bufs in (1, 2):
            d = copy.deepcopy(t)
            d["levels"][0]["tile"]["e"] = tile
            d["levels"][0]["buffers"] = {k: bufs for k in d["levels"][0]["buffers"]}
            try:
                p = T.predict(OP, board, d).prediction
            except Exception as e:                      # over the UB: the largest tiles
                rows.append({"tile": tile, "buffers": bufs, "illegal": str(e)})
                continue
            busy = p.utilisation["vector"] * p.latency_s
            body = p.latency_s - hw.launch_s
            rows.append({"tile": tile, "buffers": bufs, "tiles_per_core": -(-per_core // tile),
                         "latency_s": p.latency_s, "vector_busy_s": busy,
                         "stage_busy_s": p.stage_busy_s, "body_utilisation": busy / body,
                         "kernel_utilisation": p.utilisation["vector"]})
        tile *= 2
    pick = {"tiling": best.best.tiling.describe(), "latency_s": best.best.prediction.latency_s,
            "kernel_utilisation": best.best.prediction.utilisation["vector"]}
    return OP, pick, rows


def main(argv=None) -> int:
    args = parser(__doc__).parse_args(argv)
    an = analytic()
    tables = [("timing model, three equal stages of n steps (vector utilisation)",
               ["steps n", "1 shared buffer", "1 buffer per queue", "n/(2n+1)", "2 buffers", "n/(n+2)"],
               [[r["steps"], f"{r['util_shared_buffer']:.3f}", f"{r['util_1_buffer']:.3f}",
                 f"{r['formula_1_buffer']:.3f}", f"{r['util_2_buffers']:.3f}",
                 f"{r['formula_2_buffers']:.3f}"] for r in an])]
    doc = {"analytic": an, "boards": {}, "figures": []}
    for board in BOARDS:
        OP, pick, rows = kernel(board)
        doc["boards"][board] = {"op": OP, "searched": pick, "rows": rows}
        by = {}
        for r in rows:
            if "illegal" not in r:
                by.setdefault(r["tile"], {})[r["buffers"]] = r
        tab = []
        for tile, b in sorted(by.items()):
            if 1 in b and 2 in b:
                tab.append([tile, b[1]["tiles_per_core"], us(b[1]["latency_s"]), us(b[2]["latency_s"]),
                            f"{b[1]['body_utilisation']:.3f}", f"{b[2]['body_utilisation']:.3f}",
                            f"{b[1]['kernel_utilisation']:.3f}", f"{b[2]['kernel_utilisation']:.3f}"])
        tables.append((f"{OP} on {board} (searched: {pick['tiling']}, {us(pick['latency_s'])}, "
                       f"vector {pick['kernel_utilisation']:.3f})",
                       ["UB tile", "tiles/core", "lat 1 buf", "lat 2 buf", "body util 1", "body util 2",
                        "kernel util 1", "kernel util 2"], tab))
    f = plot_path(args, "double_buffer.png")
    if f:
        from edgeops.simulator.plot import lines
        series = {"model: 1 shared buffer": ([r["steps"] for r in an], [r["util_shared_buffer"] for r in an]),
                  "model: 1 buffer per queue": ([r["steps"] for r in an], [r["util_1_buffer"] for r in an]),
                  "model: 2 buffers": ([r["steps"] for r in an], [r["util_2_buffers"] for r in an])}
        for board in BOARDS:
            for bufs in (1, 2):
                rs = sorted((r for r in doc["boards"][board]["rows"]
                             if r["buffers"] == bufs and "illegal" not in r),
                            key=lambda r: r["tiles_per_core"])
                series[f"{board}: {bufs} buffer{'s' if bufs > 1 else ''} (body)"] = (
                    [r["tiles_per_core"] for r in rs], [r["body_utilisation"] for r in rs])
        lines(series, f, xlabel="tile steps per core", ylabel="vector utilisation", logx=True,
              title="copy-in / compute / copy-out: vector utilisation, 1 vs 2 buffers")
        doc["figures"].append(f)
    emit(args, doc, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
