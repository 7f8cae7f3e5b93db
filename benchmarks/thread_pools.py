"""Which pool a cut-able native step should run on: its Numba team or ONNX Runtime's own.

For elementwise nodes a package's native runtime can cut into chunks (Add, Mul, Relu, Sigmoid,
Add+Relu from 16K elements), each compiled ``--lower all`` for ``host`` and run in a package
session (edgeops.package) at 2 threads, three ways:

* ``numba``: the step as prepared, on the kernel's Numba team (OpenMP) or the calling thread;
* ``ort``: cut into one chunk per thread on ONNX Runtime's intra-op pool
  (``KernelContext_ParallelFor``), every chunk on a one-thread team;
* ``decided``: what a session picks by default: this machine's record (edgeops.threads), else
  timed both ways while the session is made (native.c's trial) and then kept;

timed in rotation with two ONNX Runtime sessions of the original node (ORT_ENABLE_ALL, same
threads; the second is the A/A column), blocks of back-to-back runs, medians. Ratio = ORT time /
edgeops time.

    python benchmarks/thread_pools.py [--threads 2] [--runs 200] [--families ...] [--json]
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

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_vs_ort import ort_session  # noqa: E402
from region_breakdown import _add_relu, _one  # noqa: E402

from edgeops.lower.measure import settle  # noqa: E402

BLOCKS = 8
E16, E200, E1M = (1, 64, 16, 16), (1, 64, 56, 56), (1, 256, 64, 64)
FAMILIES = {
    "add-16k": lambda: _one("Add", E16, inputs=2),
    "add-200k": lambda: _one("Add", E200, inputs=2),
    "add-1m": lambda: _one("Add", E1M, inputs=2),
    "mul-200k": lambda: _one("Mul", E200, inputs=2),
    "relu-200k": lambda: _one("Relu", E200),
    "relu-1m": lambda: _one("Relu", E1M),
    "sigmoid-16k": lambda: _one("Sigmoid", E16),
    "sigmoid-200k": lambda: _one("Sigmoid", E200),
    "add+relu-200k": lambda: _add_relu(E200),
}
WAYS = ("numba", "ort", "decided")


def _sessions(model, threads: int):
    from edgeops import package
    from edgeops.pipeline.compile import compile_model
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        compile_model(model, "host", f"{tmp}/pkg", mode="all", threads=threads, verify=False)
        pkg = package.load(f"{tmp}/pkg")
        before = os.environ.get("EDGEOPS_THREAD_DECISIONS")
        try:
            for way in WAYS:     # the choice is read when a session prepares its steps
                if way == "decided":
                    os.environ.pop("EDGEOPS_THREAD_DECISIONS", None)
                else:
                    os.environ["EDGEOPS_THREAD_DECISIONS"] = way
                out[way] = pkg.session(threads=threads)
        finally:
            if before is None:
                os.environ.pop("EDGEOPS_THREAD_DECISIONS", None)
            else:
                os.environ["EDGEOPS_THREAD_DECISIONS"] = before
    return out


def row(family: str, threads: int, runs: int) -> dict:
    m = FAMILIES[family]()
    sess = _sessions(m, threads)
    peer, peer2 = ort_session(m, threads), ort_session(m, threads)
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32)
             for i in peer.get_inputs()}
    want = peer.run(None, feeds)[0]
    err = {w: float(np.max(np.abs(s.run(None, feeds)[0] - want))) for w, s in sess.items()}
    same = bool(np.array_equal(sess["numba"].run(None, feeds)[0],
                               sess["ort"].run(None, feeds)[0]))
    everyone = [*sess.items(), ("ORT", peer), ("ORT2", peer2)]
    times = {k: [] for k, _ in everyone}
    per = max(1, runs // BLOCKS)
    for b in range(BLOCKS):
        order = everyone[b % len(everyone):] + everyone[:b % len(everyone)]
        for k, s in order:
            settle()
            s.run(None, feeds)
            for _ in range(per):
                t0 = time.perf_counter()
                s.run(None, feeds)
                times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    o = med["ORT"]
    return {"family": family, "threads": threads, "runs": per * BLOCKS, "ort_s": o,
            **{f"{w}_s" if w != "ort" else "ort_way_s": med[w] for w in WAYS}, **{f"ratio_{w}": o / med[w] for w in WAYS},
            "aa": o / med["ORT2"], "bit_identical": same, "max_abs_err": max(err.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--runs", type=int, default=200, help="runs a side, over 8 blocks")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = [row(f, t, a.runs) for t in a.threads for f in a.families]
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"one node in a package session, --lower all on host; median us of {rows[0]['runs']} "
          f"runs a side; ratio = ORT / edgeops; same: numba and ort ways bit-identical")
    print(f"{'family':14} {'thr':>3} {'ORT':>8} {'numba':>8} {'ratio':>6} {'ort':>8} "
          f"{'ratio':>6} {'decided':>8} {'ratio':>6} {'A/A':>5} {'same':>4}")
    for r in rows:
        print(f"{r['family']:14} {r['threads']:>3} {1e6 * r['ort_s']:8.1f} "
              f"{1e6 * r['numba_s']:8.1f} {r['ratio_numba']:6.2f} "
              f"{1e6 * r['ort_way_s']:8.1f} {r['ratio_ort']:6.2f} "
              f"{1e6 * r['decided_s']:8.1f} {r['ratio_decided']:6.2f} "
              f"{r['aa']:5.2f} {'yes' if r['bit_identical'] else 'NO':>4}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
