"""neon pooling kernels vs ONNX Runtime's MaxPool / AveragePool, one node, same thread count.

The kernel is called directly (targets/neon/pool.py through ``pool_from_attrs``, the package
dispatch's entry: geometry lookup, output allocation and kernel), ONNX Runtime runs a one-node
session (ORT_ENABLE_ALL, ``intra_op_num_threads`` = the kernel's threads); both outputs are
checked equal first. Medians of alternating blocks, each block after the other side's threads
have parked (edgeops.lower.measure.settle). The ratio is edgeops / ONNX Runtime time: below 1
is faster. No target: the lowering measures pooling nodes and keeps ONNX Runtime's where edgeops'
is not faster; this tracks the kernel.

    python benchmarks/neon_pool.py [--threads 1 2] [--repeats 60] [--json] [--quick]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from edgeops.ort import configure_openmp

configure_openmp()     # as a package's process: before anything starts OpenMP

import numba  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from edgeops.lower.measure import settle  # noqa: E402
from edgeops.targets.neon import pool  # noqa: E402

# (name, kind, NCHW, attributes): squeezenet's, a ResNet stem's and a GoogLeNet-style pools
CASES = [("max_256x27x27_3x3s2", "max", (1, 256, 27, 27), {"kernel_shape": [3, 3], "strides": [2, 2]}),
         ("max_96x109x109_3x3s2", "max", (1, 96, 109, 109), {"kernel_shape": [3, 3], "strides": [2, 2]}),
         ("max_64x112x112_3x3s2p1", "max", (1, 64, 112, 112),
          {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
         ("max_64x56x56_3x3s1p1", "max", (1, 64, 56, 56),
          {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
         ("avg_128x28x28_3x3s1p1", "avg", (1, 128, 28, 28),
          {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]})]


def _ort(kind, shape, attrs, threads):
    node = helper.make_node("MaxPool" if kind == "max" else "AveragePool", ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _medians(fns, repeats, blocks=6):
    times = [[] for _ in fns]
    for f in fns:
        f()
    per = max(1, repeats // blocks)
    for _ in range(blocks):
        for f, ts in zip(fns, times):
            settle()
            f()
            for _ in range(per):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


def run(threads: int, repeats: int) -> list[dict]:
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    rows = []
    for name, kind, shape, attrs in CASES:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        s = _ort(kind, shape, attrs, threads)
        want = s.run(None, {"x": x})[0]
        got = pool.pool_from_attrs(x, kind, dict(attrs))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)    # a fast wrong answer is no figure
        ours, theirs = _medians([lambda: pool.pool_from_attrs(x, kind, dict(attrs)),
                                 lambda: s.run(None, {"x": x})], repeats)
        rows.append({"case": name, "threads": threads, "edgeops_ms": round(ours * 1e3, 4),
                     "ort_ms": round(theirs * 1e3, 4), "ratio": round(ours / theirs, 2)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="two cases, 1 thread, 6 runs (smoke test)")
    a = ap.parse_args(argv)
    if a.quick:
        del CASES[2:]
    threads, repeats = ([1], 6) if a.quick else (a.threads, a.repeats)
    rows = [r for t in threads for r in run(t, repeats)]
    if a.json:
        json.dump({"onnxruntime": ort.__version__, "rows": rows}, sys.stdout, indent=1)
        print()
        return 0
    print(f"neon pooling vs ONNX Runtime {ort.__version__}, median ms (ratio = edgeops / ORT)")
    for r in rows:
        print(f"  {r['case']:<26} t={r['threads']}  edgeops {r['edgeops_ms']:7.3f}  "
              f"ORT {r['ort_ms']:7.3f}  ratio {r['ratio']:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
