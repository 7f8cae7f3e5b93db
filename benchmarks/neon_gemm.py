"""fp32 GEMM: edgeops' packed NEON-target GEMM vs numpy/OpenBLAS, and INT8 GEMM vs fp32 GEMM.

Each thread count runs in its own subprocess with OPENBLAS_NUM_THREADS / NUMBA_NUM_THREADS set
(OpenBLAS reads its thread count at load time) and OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed
so OpenBLAS picks its own kernel for this CPU. Times are medians of ``--repeats`` runs after a
warm-up call (which also loads the Numba on-disk cache). Targets (issue 5): >= 0.6x OpenBLAS
single-thread at 1024; INT8 >= 1.5x edgeops fp32.

    python benchmarks/neon_gemm.py [--sizes 256 512 1024 2048] [--threads 1 0] [--repeats 7]
                                   [--int8] [--json]
    python benchmarks/neon_gemm.py --ort     # the zoo's MatMul shapes vs ONNX Runtime, 1 thread

``--threads 0`` means all cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGET_1T = 0.6
TARGET_INT8 = 1.5


def _median_time(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)
# (multi-thread medians on a shared 2-core machine are at the mercy of other processes: one
# preempted thread stalls the whole parallel region for a scheduler tick)


def worker(sizes, repeats, int8) -> list[dict]:
    import numba
    import numpy as np

    from edgeops.targets.neon.blocking import blocking_for
    from edgeops.targets.neon.gemm import gemm
    from edgeops.targets.neon.qgemm import qgemm, requant_multiplier

    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        t_blas = _median_time(lambda: a @ b, repeats)
        t_eo = _median_time(lambda: gemm(a, b), repeats)
        row = {"n": n, "threads": numba.get_num_threads(), "openblas_s": t_blas, "edgeops_s": t_eo,
               "openblas_gflops": 2 * n ** 3 / t_blas / 1e9,
               "edgeops_gflops": 2 * n ** 3 / t_eo / 1e9,
               "ratio_vs_openblas": t_blas / t_eo, "blocking": str(blocking_for("host"))}
        if int8:
            qa = rng.integers(0, 256, (n, n), dtype=np.uint8)
            qb = rng.integers(-127, 128, (n, n), dtype=np.int8)
            mult = requant_multiplier(0.02, np.full(n, 0.004, np.float32), 0.1)
            t_i32 = _median_time(lambda: qgemm(qa, qb, a_zero_point=3), repeats)
            t_q = _median_time(lambda: qgemm(qa, qb, a_zero_point=3, multiplier=mult,
                                             y_zero_point=128), repeats)
            row.update({"int8_int32out_s": t_i32, "int8_requant_s": t_q,
                        "int8_gops": 2 * n ** 3 / t_q / 1e9,
                        "int8_speedup_vs_fp32": t_eo / t_q,
                        "int8_int32out_speedup_vs_fp32": t_eo / t_i32})
        rows.append(row)
    return rows


# the benchmark zoo's MatMul/Gemm shapes (edgeops.modelzoo: encoder_block's projections and FFN,
# swiglu_mlp's down projection), M x K x N with a held K x N weight
ZOO_SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (128, 2048, 768)]


def _vs_ort_shape(M: int, K: int, N: int, runs: int, rng) -> dict:
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from edgeops.targets.neon import epilogue as ep
    from edgeops.targets.neon import gemm as G
    w = rng.standard_normal((K, N), dtype=np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [M, K])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [M, N])],
                          [numpy_helper.from_array(w, "W")])
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(helper.make_model(g).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    lay = G.flat_layout(M, N, K, [0], [0], [0], None, None)
    bpk = G.prepack_b(lay, w.reshape(-1), N, 1)
    c = np.empty(M * N, np.float32)
    xf, zb = x.reshape(-1), np.zeros(1, np.float32)

    def eo():
        G.run_flat(lay, xf, K, 1, zb, N, 1, c, N, np.float32(1), False, zb, ep.BIAS_NONE, 0,
                   0.0, 0.0, bpk)

    def ort_run():
        sess.run(None, {"X": x})
    t_o, t_e = [], []
    ort_run()        # warm-up (and the Numba disk cache loads)
    eo()
    for _ in range(runs):
        for f, ts in ((ort_run, t_o), (eo, t_e)):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    mo, me = statistics.median(t_o), statistics.median(t_e)
    return {"shape": f"{M}x{K}x{N}", "ort_us": mo * 1e6, "edgeops_us": me * 1e6,
            "ort_gflops": 2 * M * N * K / mo / 1e9, "edgeops_gflops": 2 * M * N * K / me / 1e9,
            "ratio": mo / me, "blocking": (lay["mc"], lay["nc"], lay["kc"])}


def vs_ort(runs: int) -> list[dict]:
    """One thread: ONNX Runtime's MatMul (weight an initializer, packed once by MLAS) vs the
    kernel a package step runs (B packed once by ``prepack_b``, A read in place), calls
    interleaved; medians. What a session adds around the kernel is region_breakdown's job."""
    import numba
    import numpy as np
    numba.set_num_threads(1)
    rng = np.random.default_rng(0)
    return [_vs_ort_shape(M, K, N, runs, rng) for M, K, N in ZOO_SHAPES]


def run_threads(threads: int, args) -> list[dict]:
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if threads:
        for k in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
            env[k] = str(threads)
    else:
        for k in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
            env.pop(k, None)
    cmd = [sys.executable, __file__, "--worker", "--repeats", str(args.repeats), "--sizes",
           *map(str, args.sizes)] + (["--int8"] if args.int8 else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--int8", action="store_true", help="also INT8 GEMM vs edgeops fp32 GEMM")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ort", action="store_true",
                    help="instead: the zoo's MatMul shapes vs ONNX Runtime, 1 thread")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ort:
        rows = vs_ort(max(args.repeats, 30))
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        print(f"{'M x K x N':>14} {'ORT GF/s':>9} {'edgeops GF/s':>12} {'ratio':>6}  (mc,nc,kc)",
              file=sys.stderr)
        for r in rows:
            print(f"{r['shape']:>14} {r['ort_gflops']:>9.1f} {r['edgeops_gflops']:>12.1f} "
                  f"{r['ratio']:>6.2f}  {r['blocking']}", file=sys.stderr)
        return 0
    if args.worker:
        print(json.dumps(worker(args.sizes, args.repeats, args.int8)))
        return 0
    rows = [r for t in args.threads for r in run_threads(t, args)]
    one = [r for r in rows if r["threads"] == 1 and r["n"] == 1024]
    summary = {"target_ratio_1t_1024": TARGET_1T,
               "ratio_1t_1024": one[0]["ratio_vs_openblas"] if one else None}
    if args.int8 and one:
        summary.update({"target_int8_speedup": TARGET_INT8,
                        "int8_speedup_1t_1024": one[0]["int8_speedup_vs_fp32"]})
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
        return 0
    print(f"{'n':>5} {'thr':>3} {'OpenBLAS GF/s':>13} {'edgeops GF/s':>12} {'ratio':>6}"
          + (f" {'int8 GOP/s':>10} {'int8/fp32':>9} {'(int32 out)':>11}" if args.int8 else ""),
          file=sys.stderr)
    for r in rows:
        line = (f"{r['n']:>5} {r['threads']:>3} {r['openblas_gflops']:>13.1f} "
                f"{r['edgeops_gflops']:>12.1f} {r['ratio_vs_openblas']:>6.2f}")
        if args.int8:
            line += (f" {r['int8_gops']:>10.1f} {r['int8_speedup_vs_fp32']:>9.2f} "
                     f"{r['int8_int32out_speedup_vs_fp32']:>11.2f}")
        print(line, file=sys.stderr)
    print(f"summary: {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
