"""Conv decomposition chooser: how often its pick (im2col / depthwise / Winograd) is the measured
fastest, on a set of ResNet/MobileNet-style conv shapes.

Every candidate decomposition of each shape is timed (minimum of ``--repeats``: the chooser is
judged on what the kernels can do, not on background load), the chooser's pick (the simulator's
cost, with the board's override table set aside) is compared with the fastest, and the loss when
it is wrong is reported; ``model`` is the chooser's built-in fallback model, for comparison.
``--write`` stores the measured winners as the board's override table in
``targets/neon/overrides.py`` (the chooser consults it first).

    python benchmarks/neon_conv_chooser.py [--threads 1] [--repeats 10] [--board host]
                                           [--write] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import pprint
import sys
import time
from pathlib import Path

SHAPES = [  # (name, N, C, H, K, R, stride, pad, group)
    ("r18_3x3_64", 1, 64, 56, 64, 3, 1, 1, 1),
    ("r18_3x3_128", 1, 128, 28, 128, 3, 1, 1, 1),
    ("r18_3x3_256", 1, 256, 14, 256, 3, 1, 1, 1),
    ("r18_3x3_512", 1, 512, 7, 512, 3, 1, 1, 1),
    ("stem_3x3_3to32", 1, 3, 112, 32, 3, 1, 1, 1),
    ("small_3x3_16", 1, 16, 56, 16, 3, 1, 1, 1),
    ("batch4_3x3_32", 4, 32, 28, 32, 3, 1, 1, 1),
    ("unet_3x3_320", 1, 320, 16, 320, 3, 1, 1, 1),
    ("mbv2_dw_32", 1, 32, 112, 32, 3, 1, 1, 32),
    ("mbv2_dw_96_s2", 1, 96, 56, 96, 3, 2, 1, 96),
    ("mbv2_dw_384", 1, 384, 14, 384, 3, 1, 1, 384),
    ("r18_3x3_s2_64to128", 1, 64, 56, 128, 3, 2, 1, 1),
]


def _best(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def run(repeats: int, board: str) -> list[dict]:
    import numba
    import numpy as np

    from edgeops.targets.neon import chooser, epilogue as ep
    from edgeops.targets.neon.conv import geom_from_attrs

    rng = np.random.default_rng(0)
    rows = []
    saved = chooser.OVERRIDES.pop(board, None)  # judge the cost model, not a previous table
    try:
        for name, n, c, h, k, r, st, pad, grp in SHAPES:
            x = rng.standard_normal((n, c, h, h), dtype=np.float32)
            w = rng.standard_normal((k, c // grp, r, r), dtype=np.float32)
            b = rng.standard_normal(k, dtype=np.float32)
            g = geom_from_attrs(x.shape, w.shape, {"strides": (st, st), "pads": (pad,) * 4,
                                                   "group": grp})
            act = ep.activation("relu")
            times = {m: _best(lambda m=m: chooser.conv2d(x, w, b, g, act, method=m), repeats)
                     for m in chooser.candidates(g)}
            pick, why = chooser.choose(g, board, numba.get_num_threads())
            hook = chooser.cost_hook()
            chooser.set_cost_hook(None)
            try:
                model = chooser.choose(g, board, numba.get_num_threads())[0]
            finally:
                chooser.set_cost_hook(hook)
            fastest = min(times, key=times.get)
            rows.append({"shape": name, "signature": chooser.signature(g),
                         "times_s": times, "pick": pick, "fastest": fastest,
                         "hit": pick == fastest, "loss": times[pick] / times[fastest],
                         "why": why, "model_pick": model, "model_hit": model == fastest})
    finally:
        if saved is not None:
            chooser.OVERRIDES[board] = saved
    return rows


def write_overrides(rows, board: str) -> Path:
    from edgeops.targets.neon import overrides
    table = {k: dict(v) for k, v in overrides.OVERRIDES.items()}
    table[board] = {r["signature"]: r["fastest"] for r in rows if len(r["times_s"]) > 1}
    path = Path(overrides.__file__)
    head = path.read_text().split("OVERRIDES = ")[0]
    path.write_text(head + "OVERRIDES = " + pprint.pformat(table, width=96, sort_dicts=True) + "\n")
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--board", default="host")
    ap.add_argument("--write", action="store_true", help="store the winners as overrides")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    import numba
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    rows = run(args.repeats, args.board)
    multi = [r for r in rows if len(r["times_s"]) > 1]
    summary = {"shapes": len(rows), "with_a_choice": len(multi),
               "hits": sum(r["hit"] for r in multi),
               "hit_rate": sum(r["hit"] for r in multi) / max(1, len(multi)),
               "model_hit_rate": sum(r["model_hit"] for r in multi) / max(1, len(multi)),
               "mean_loss_when_wrong": (sum(r["loss"] for r in multi if not r["hit"])
                                        / max(1, sum(not r["hit"] for r in multi)))}
    if args.write:
        summary["written"] = str(write_overrides(rows, args.board))
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
        return 0
    print(f"{'shape':<20} {'im2col ms':>9} {'dw ms':>7} {'wino ms':>8} {'pick':>9} {'fastest':>9}"
          f" {'loss':>5} {'model':>9}", file=sys.stderr)
    for r in rows:
        t = r["times_s"]
        f = lambda m: f"{t[m] * 1e3:.3f}" if m in t else "-"  # noqa: E731
        print(f"{r['shape']:<20} {f('im2col'):>9} {f('depthwise'):>7} {f('winograd'):>8} "
              f"{r['pick']:>9} {r['fastest']:>9} {r['loss']:>5.2f} {r['model_pick']:>9}",
              file=sys.stderr)
    print(f"summary: {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
