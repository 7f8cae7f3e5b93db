"""Where a package run of a fused norm chain spends its time, and what keeping intermediates costs.

For the e2e benchmark's memory-bound chains (``chain_ln_gelu``: LayerNormalization + Gelu x4 on
1x128x768; ``chain_gn_silu``: GroupNormalization + SiLU x4 on 1x64x56x56), compiled for ``host``
with ``--lower all`` (one ai.edgeops region, its four nodes one fused chain pass), each run of a
package session (:meth:`edgeops.package.Package.session`) is split by timestamps taken where
ONNX Runtime's bridge enters and leaves the region's Python function:

* ``before``: from ``session.run`` to the region: ONNX Runtime and the bridge (onnxruntime-
  extensions copies the input there; edgeops' native bridge, which package sessions use where it
  is built, hands ONNX Runtime's own);
* ``region``: the region's Python and the chain's kernel (``kernel``: the chain call alone);
* ``after``: from the region back out of ``session.run``: the bridge's copy of the output.

Native plans are turned off (``EDGEOPS_NATIVE_PLANS=0``): a chain region planned by the native
bridge runs without entering Python, so there would be nothing to split; this shows the path
those calls leave (e2e_vs_ort.py measures packages as they run by default).

``keep``: ``needed`` is what regions do (an intermediate stage's output that only the next stage
reads stays in the kernel's scratch rows), ``all`` writes every stage's output as before
(``Chain(x, None)``). Rows alternate between the two in blocks of back-to-back runs (after the
other side's threads park, edgeops.lower.measure.settle); medians over every run. No target:
this explains e2e_vs_ort.py's chain rows.

Before timing, the package's output with every intermediate kept must equal its output with
only the needed ones (exit 1 otherwise).

    python benchmarks/region_breakdown.py [--threads 1] [--runs 200] [--models ...] [--json]
        [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from edgeops.ort import configure_openmp

configure_openmp()     # as a package's process: before anything starts OpenMP
# The split is taken where calls enter the region's Python function; a chain region that runs
# from a native plan (edgeops.ort.native, the default) never does, so plans stay off here:
# this explains the Python path, e2e_vs_ort.py measures the default one.
os.environ["EDGEOPS_NATIVE_PLANS"] = "0"

import numpy as np  # noqa: E402

from edgeops.lower.measure import settle  # noqa: E402
from edgeops.ort import regions  # noqa: E402
from edgeops.targets.neon import norms  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_vs_ort import build  # noqa: E402

MODELS = ["chain_ln_gelu", "chain_gn_silu"]
BLOCKS = 8


class _Stamps:
    """Wraps the region call and the chain call with timestamps for the run in progress."""

    def __init__(self):
        self.enter = self.leave = self.kernel = 0.0
        self.keep_all = False
        region_call, chain_call = regions._Region.__call__, norms.Chain.__call__
        stamps = self

        def region(self_, inputs):
            stamps.enter = time.perf_counter()
            try:
                return region_call(self_, inputs)
            finally:
                stamps.leave = time.perf_counter()

        def chain(self_, x, keep=None):
            t = time.perf_counter()
            try:
                return chain_call(self_, x, None if stamps.keep_all else keep)
            finally:
                stamps.kernel = time.perf_counter() - t
        regions._Region.__call__, norms.Chain.__call__ = region, chain


def breakdown(name: str, threads: int, runs: int, stamps: _Stamps) -> dict:
    from edgeops import package
    from edgeops.pipeline.compile import compile_model
    m = build(name)
    with tempfile.TemporaryDirectory() as tmp:
        compile_model(m, "host", f"{tmp}/pkg", mode="all", threads=threads, verify=False)
        sess = package.load(f"{tmp}/pkg").session(threads=threads)
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
    feeds = {inp.name: x}
    parts = {k: {p: [] for p in ("total", "before", "region", "kernel", "after")}
             for k in ("needed", "all")}
    for _ in range(10):
        sess.run(None, feeds)
    outs = []
    for keep_all in (False, True):
        stamps.keep_all = keep_all
        outs.append(sess.run(None, feeds)[0])
    if not np.array_equal(*outs):
        raise SystemExit(f"{name}: keeping every intermediate changed the output "
                         f"(max abs diff {np.abs(outs[0] - outs[1]).max():.3g})")
    per = max(1, runs // BLOCKS)
    for b in range(BLOCKS):
        for keep in (("needed", "all") if b % 2 == 0 else ("all", "needed")):
            stamps.keep_all = keep == "all"
            settle()
            sess.run(None, feeds)
            for _ in range(per):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                t1 = time.perf_counter()
                p = parts[keep]
                p["total"].append(t1 - t0)
                p["before"].append(stamps.enter - t0)
                p["region"].append(stamps.leave - stamps.enter)
                p["kernel"].append(stamps.kernel)
                p["after"].append(t1 - stamps.leave)
    stamps.keep_all = False
    return {"model": name, "threads": threads, "runs": per * BLOCKS,
            **{k: {p: statistics.median(v) for p, v in d.items()} for k, d in parts.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=200, help="runs a side, over 8 blocks")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="chain_ln_gelu, 16 runs a side (smoke)")
    a = ap.parse_args(argv)
    if a.quick:
        a.models, a.runs = ["chain_ln_gelu"], 16
    stamps = _Stamps()
    rows = [breakdown(m, t, a.runs, stamps) for m in a.models for t in a.threads]
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"package run of a fused chain, split at the region; median ms of {rows[0]['runs']} "
          f"runs a side, alternating blocks")
    print(f"{'model':15} {'thr':>3}  {'keep':7} {'total':>7} {'before':>7} {'region':>7} "
          f"{'kernel':>7} {'after':>7}")
    for r in rows:
        for k in ("needed", "all"):
            d = r[k]
            print(f"{r['model']:15} {r['threads']:>3}  {k:7} " + " ".join(
                f"{1e3 * d[p]:7.3f}" for p in ("total", "before", "region", "kernel", "after")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
