"""INT8 package vs float package vs ONNX Runtime on the QDQ model, end to end on this host.

For each model: ``edgeops compile`` (``--lower all``, host board) of the float model, and of the
same model through ``--quantize`` (QDQ, then the int8 QConvBnAct/QMatMul NEON kernels); each
package's session (ONNX Runtime with edgeops' custom ops) is timed, and so is a plain ONNX
Runtime session on the QDQ model (default optimisations: ORT turns the QDQ units into its own
int8 kernels). Medians over ``--reps`` runs, one thread and all threads; ratios > 1 mean the
edgeops int8 package is faster. The QDQ model is also compiled with the board's default
(``--lower auto``) policy, which measures each int8 unit against ONNX Runtime and keeps the
faster: the table reports how many units it lowered and that package's time.

    python benchmarks/int8_package.py [--models sample,convnet] [--reps 30] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "quantize"))
from conftest import small_convnet  # noqa: E402  (the small CNN the quantize tests use)


QOPS = ("ai.edgeops::QConvBnAct", "ai.edgeops::QMatMul")


def _models(names):
    from edgeops.sample import INPUT_SHAPE, build_sample_model
    out = {"sample": (build_sample_model(), "image", INPUT_SHAPE),
           "convnet": (small_convnet(), "x", (1, 3, 19, 17))}
    return [(n, *out[n]) for n in names]


def _time(run, reps):
    for _ in range(3):
        run()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench(name, model, inp, shape, reps, threads):
    from edgeops import package
    from edgeops.pipeline.compile import compile_model
    from edgeops.pipeline.quantize import quantize_for_compile
    rng = np.random.default_rng(0)
    calib = [{inp: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)]
    feed = {inp: rng.standard_normal(shape).astype(np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qdq, _ = quantize_for_compile(model, calib)
    row = {"model": name}
    with tempfile.TemporaryDirectory() as d:
        docs = {}
        for kind, src, mode in (("float", model, "all"), ("int8", qdq, "all"),
                                ("auto", qdq, "auto")):
            docs[kind] = compile_model(src, "host", os.path.join(d, kind), mode=mode, plan=False,
                                       threads=threads)
        row["int8_kernels"] = sum(p["op"] in QOPS for p in docs["int8"]["placement"])
        row["auto_int8_kernels"] = sum(p["op"] in QOPS and p["where"] != "ONNX Runtime"
                                       for p in docs["auto"]["placement"])
        for t in (1, threads):
            so = ort.SessionOptions()
            so.intra_op_num_threads = t
            peer = ort.InferenceSession(qdq.SerializeToString(), so, providers=["CPUExecutionProvider"])
            fs = package.load(os.path.join(d, "float")).session(threads=t)
            qs = package.load(os.path.join(d, "int8")).session(threads=t)
            auto = package.load(os.path.join(d, "auto")).session(threads=t)
            f_s = _time(lambda: fs.run(None, feed), reps)
            q_s = _time(lambda: qs.run(None, feed), reps)
            p_s = _time(lambda: peer.run(None, feed), reps)
            a_s = _time(lambda: auto.run(None, feed), reps)
            row[f"{t} threads"] = {"float_pkg_s": f_s, "int8_pkg_s": q_s, "ort_qdq_s": p_s,
                                   "int8_auto_pkg_s": a_s,
                                   "float_pkg_over_int8_pkg": f_s / q_s,
                                   "ort_qdq_over_int8_pkg": p_s / q_s}
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="sample,convnet")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rows = [bench(n, m, i, s, a.reps, threads) for n, m, i, s in _models(a.models.split(","))]
    if a.json:
        json.dump({"rows": rows, "ort_version": ort.__version__}, sys.stdout, indent=2)
        print()
        return 0
    for r in rows:
        for k, v in r.items():
            if isinstance(v, dict):
                print(f"{r['model']:8s} {k:10s} float pkg {v['float_pkg_s'] * 1e3:7.3f} ms  int8 pkg "
                      f"{v['int8_pkg_s'] * 1e3:7.3f} ms  ORT QDQ {v['ort_qdq_s'] * 1e3:7.3f} ms  | "
                      f"float/int8 x{v['float_pkg_over_int8_pkg']:.2f}  ORT-QDQ/int8 "
                      f"x{v['ort_qdq_over_int8_pkg']:.2f}  ({r['int8_kernels']} int8 kernels) | "
                      f"auto: {r['auto_int8_kernels']} lowered, {v['int8_auto_pkg_s'] * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
