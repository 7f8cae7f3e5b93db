"""Fused NEON-target kernels vs ONNX Runtime running the unfused subgraph.

ONNX Runtime runs with its default graph optimisations (ORT_ENABLE_ALL: it fuses Conv+BN+Relu
itself, prepacks MatMul/Conv weights) and the same intra-op thread count as edgeops' Numba
kernels. Each thread count runs in its own subprocess (OpenBLAS/ORT/Numba pools are sized at
start); times are medians (and minima, "best") of ``--repeats`` after warm-up, measured in
alternating blocks so background load hits both sides alike. Targets (issue 5): memory-bound
GroupNorm+SiLU and LayerNorm+GELU >= 1.3x; GEMM-bound SwiGLU and ConvBnAct >= 0.8x.

Cases (ORT subgraph -> edgeops kernel):
  groupnorm_silu  GroupNormalization(21) -> Sigmoid -> Mul        -> norms.groupnorm(act=silu)
  layernorm_gelu  LayerNormalization(17) -> Gelu(20, erf)         -> norms.layernorm(act=gelu)
  swiglu          MatMul, MatMul (+B) -> Sigmoid -> Mul -> Mul    -> swiglu.swiglu
  convbnact_*     Conv -> BatchNormalization -> Relu              -> chooser.conv2d (BN folded)

    python benchmarks/neon_fused.py [--threads 1 0] [--repeats 20] [--cases ...] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGETS = {"groupnorm_silu": 1.3, "layernorm_gelu": 1.3, "swiglu": 0.8, "convbnact_3x3": 0.8,
           "convbnact_1x1": 0.8, "convbnact_dw3x3_s2": 0.8}


def _rounds(fns, repeats, rounds=5):
    """Per-function median and min times, measured in alternating blocks (A block, B block, A
    block, ...) so a burst of load from other processes hits both sides alike. Blocks, not
    single calls, so ONNX Runtime's spinning pool has gone quiet before Numba's threads run."""
    times = [[] for _ in fns]
    for f in fns:
        f()
        f()
    per = max(1, repeats // rounds)
    for _ in range(rounds):
        for i, f in enumerate(fns):
            time.sleep(0.005)
            for _ in range(per):
                t = time.perf_counter()
                f()
                times[i].append(time.perf_counter() - t)
    return [(statistics.median(ts), min(ts)) for ts in times]


def _cases(rng):
    """name -> (onnx nodes/inits builder args, edgeops callable builder)."""
    import numpy as np
    from onnx import helper, numpy_helper

    from edgeops.targets.neon import chooser, epilogue as ep, norms
    from edgeops.targets.neon.conv import geom_from_attrs
    from edgeops.targets.neon.swiglu import swiglu

    f32 = lambda *s: rng.standard_normal(s, dtype=np.float32)  # noqa: E731
    out = {}

    x = f32(1, 64, 56, 56)
    sc, bi = f32(64), f32(64)
    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=32),
             helper.make_node("Sigmoid", ["g"], ["sg"]),
             helper.make_node("Mul", ["g", "sg"], ["y"])]
    out["groupnorm_silu"] = (nodes, {"s": sc, "b": bi}, {"x": x}, 21,
                             lambda: norms.groupnorm(x, sc, bi, 32, 1e-5, "silu"))

    x2 = f32(1, 128, 768)
    sc2, bi2 = f32(768), f32(768)
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["n"], axis=-1),
             helper.make_node("Gelu", ["n"], ["y"])]
    out["layernorm_gelu"] = (nodes, {"s": sc2, "b": bi2}, {"x": x2}, 20,
                             lambda: norms.layernorm(x2, sc2, bi2, -1, 1e-5, "gelu"))

    m, d, f = 128, 768, 2048
    x3 = f32(m, d)
    w1, w2 = f32(d, f) * np.float32(d ** -0.5), f32(d, f) * np.float32(d ** -0.5)
    b1, b2 = f32(f), f32(f)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["g0"]),
             helper.make_node("Add", ["g0", "b1"], ["g"]),
             helper.make_node("MatMul", ["x", "w2"], ["u0"]),
             helper.make_node("Add", ["u0", "b2"], ["u"]),
             helper.make_node("Sigmoid", ["g"], ["sg"]),
             helper.make_node("Mul", ["g", "sg"], ["sl"]),
             helper.make_node("Mul", ["sl", "u"], ["y"])]
    out["swiglu"] = (nodes, {"w1": w1, "w2": w2, "b1": b1, "b2": b2}, {"x": x3}, 17,
                     lambda: swiglu(x3, w1, w2, b1, b2))

    for name, (n, c, h, k, r, s, group, stride, pad) in {
            "convbnact_3x3": (1, 64, 56, 64, 3, 3, 1, 1, 1),
            "convbnact_1x1": (1, 256, 28, 128, 1, 1, 1, 1, 0),
            "convbnact_dw3x3_s2": (1, 96, 56, 96, 3, 3, 96, 2, 1)}.items():
        xc = f32(n, c, h, h)
        wc = f32(k, c // group, r, s) * np.float32((c // group * r * s) ** -0.5)
        bc = f32(k)
        gamma, beta = rng.uniform(0.5, 1.5, k).astype(np.float32), f32(k)
        mean, var = f32(k) * np.float32(0.1), rng.uniform(0.5, 2, k).astype(np.float32)
        attrs = {"strides": [stride] * 2, "pads": [pad] * 4, "group": group}
        nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["c"], **attrs),
                 helper.make_node("BatchNormalization", ["c", "ga", "be", "mu", "va"], ["bn"]),
                 helper.make_node("Relu", ["bn"], ["y"])]
        # edgeops runs ConvBnAct: BN folded into W and B (what edgeops.passes does)
        inv = gamma / np.sqrt(var + 1e-5)
        wf = (wc * inv[:, None, None, None]).astype(np.float32)
        bf = ((bc - mean) * inv + beta).astype(np.float32)
        g = geom_from_attrs(xc.shape, wf.shape, {"strides": (stride,) * 2, "pads": (pad,) * 4,
                                                 "group": group})
        pick = chooser.choose(g, "host")[0]
        out[name] = (nodes, {"w": wc, "cb": bc, "ga": gamma, "be": beta, "mu": mean, "va": var},
                     {"x": xc}, 17,
                     lambda xc=xc, wf=wf, bf=bf, g=g: chooser.conv2d(xc, wf, bf, g,
                                                                      ep.activation("relu")))
        out[name] = out[name] + (pick,)
    return out


def worker(threads, repeats, names) -> list[dict]:
    import numba
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    cases = _cases(rng)
    rows = []
    for name in names:
        nodes, inits, feeds, opset, eo_fn, *pick = cases[name]
        g = helper.make_graph(
            nodes, name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape)
             for k, v in feeds.items()],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(v, k) for k, v in inits.items()])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        so = ort.SessionOptions()
        so.intra_op_num_threads = numba.get_num_threads()
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)[0]
        y = eo_fn()
        err = float(np.max(np.abs(y - ref)) / max(1.0, float(np.max(np.abs(ref)))))
        (t_ort, b_ort), (t_eo, b_eo) = _rounds([lambda: sess.run(None, feeds), eo_fn], repeats)
        del sess
        rows.append({"case": name, "threads": numba.get_num_threads(), "ort_s": t_ort,
                     "edgeops_s": t_eo, "speedup": t_ort / t_eo, "ort_best_s": b_ort,
                     "edgeops_best_s": b_eo, "speedup_best": b_ort / b_eo,
                     "target": TARGETS[name], "max_rel_err_vs_ort": err,
                     **({"decomposition": pick[0]} if pick else {})})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 0], help="0 = all cores")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--cases", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(None, args.repeats, args.cases)))
        return 0
    rows = []
    for t in args.threads:
        env = dict(os.environ)
        for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
            env.pop(k, None)
        if t:
            env["NUMBA_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(t)
        cmd = [sys.executable, __file__, "--worker", "--repeats", str(args.repeats), "--cases",
               *args.cases]
        rows += json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True,
                                          check=True).stdout)
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0
    print(f"{'case':<20} {'thr':>3} {'ORT ms':>8} {'edgeops ms':>10} {'speedup':>8} "
          f"{'(best)':>7} {'target':>7}  note", file=sys.stderr)
    for r in rows:
        ok = "ok" if r["speedup"] >= r["target"] else "BELOW"
        print(f"{r['case']:<20} {r['threads']:>3} {r['ort_s'] * 1e3:>8.3f} "
              f"{r['edgeops_s'] * 1e3:>10.3f} {r['speedup']:>8.2f} {r['speedup_best']:>7.2f} "
              f"{r['target']:>7.1f}  {ok}"
              + (f" ({r['decomposition']})" if "decomposition" in r else "")
              + f" err {r['max_rel_err_vs_ort']:.1e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
