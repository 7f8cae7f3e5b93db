"""Per-shape breakdown of the neon im2col conv against ONNX Runtime's one-node Conv, 1 thread.

    python benchmarks/neon_conv_breakdown.py [--runs 50]

For each ResNet-18 shape: im2col alone, the GEMM alone (direct gemm_flat on the prepared
columns), the whole conv2d_im2col call, and ORT's Conv session; interleaved rounds, medians.
The A/A column is ORT timed twice per round (ratio of the two medians: the noise floor).
GFLOP/s = 2*M*N*K / GEMM time; the large-shape figure is a 1024^3 gemm timed the same way.
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
import numba
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from edgeops.targets.neon import conv as nc
from edgeops.targets.neon import epilogue as ep
from edgeops.targets.neon.blocking import from_tiling
from edgeops.targets.neon.gemm import gemm_flat

# name: (C, H, K, R, stride, pad)
SHAPES = {
    "stem 3->64 7x7 s2 224": (3, 224, 64, 7, 2, 3),
    "layer2.0.conv1 64->128 3x3 s2 56": (64, 56, 128, 3, 2, 1),
    "layer3.0.conv1 128->256 3x3 s2 28": (128, 28, 256, 3, 2, 1),
    "layer4 512->512 3x3 7x7": (512, 7, 512, 3, 1, 1),
    "layer4 512->512 3x3 1x1 out": (512, 1, 512, 3, 1, 1),
}


def ort_session(C, H, K, R, st, pd):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, [K, C, R, R],
                           rng.standard_normal(K * C * R * R).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [K], np.zeros(K, np.float32))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[R, R],
                            strides=[st, st], pads=[pd] * 4)
    m = helper.make_model(helper.make_graph([node], "c", [x], [y], [w, b]),
                          opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def tm(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    numba.set_num_threads(1)
    blk = from_tiling(None)
    rng = np.random.default_rng(0)
    # large-shape reference: 1024^3 via gemm_flat
    n = 1024
    A = rng.standard_normal(n * n).astype(np.float32)
    B = rng.standard_normal(n * n).astype(np.float32)
    Cc = np.empty(n * n, np.float32)
    z = np.zeros(1, np.int64)
    big = lambda: gemm_flat(n, n, n, A, z, n, 1, B, z, n, 1, Cc, z, n, blocking=blk)
    big()
    tb = np.median([tm(big, 1) for _ in range(5)])
    gf_big = 2 * n ** 3 / tb / 1e9
    print(f"large-shape gemm 1024^3: {gf_big:.1f} GFLOP/s")
    print("| shape | M x N x K | im2col us | GEMM us | GEMM GFLOP/s (% of large) | "
          "edgeops conv us | ORT us | ORT/edgeops | A/A |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (C, H, K, R, st, pd) in SHAPES.items():
        x = rng.standard_normal((1, C, H, H)).astype(np.float32)
        w = rng.standard_normal((K, C, R, R)).astype(np.float32)
        b = np.zeros(K, np.float32)
        g = nc.geom_from_attrs(x.shape, w.shape, {"kernel_shape": [R, R], "strides": [st, st],
                                                  "pads": [pd] * 4})
        P, KK = g.oh * g.ow, g.cg * g.r * g.s
        cols = np.empty(KK * P, np.float32)
        xf, wf = x.reshape(-1), w.reshape(-1)
        y = np.empty(K * P, np.float32)
        im = lambda: nc._im2col(xf, 0, 1, g.c, g.h, g.w, 1, g.cg, g.r, g.s, g.oh, g.ow, g.sh,  # noqa
                                g.sw, g.dh, g.dw, g.ph, g.pw, cols, 0)  # noqa: B023
        gm = lambda: gemm_flat(K, P, KK, wf, z, KK, 1, cols, z, P, 1, y, z, P, bias=b,  # noqa
                               bias_offs=z, bias_mode=ep.BIAS_ROW, blocking=blk)
        full = lambda: nc.conv2d_im2col(x, w, b, g, blocking=blk)  # noqa
        sess = ort_session(C, H, K, R, st, pd)
        feed = {"x": x}
        o1 = lambda: sess.run(None, feed)  # noqa
        for f in (im, gm, full, o1):
            f()
        # one round: each timer over enough calls to last ~2 ms
        reps = {f: max(1, int(2e-3 / max(tm(f, 3), 1e-7))) for f in (im, gm, full, o1)}
        ts = {k: [] for k in ("im", "gm", "full", "o1", "o2")}
        for _ in range(args.runs):
            ts["im"].append(tm(im, reps[im]))
            ts["gm"].append(tm(gm, reps[gm]))
            ts["o1"].append(tm(o1, reps[o1]))
            ts["full"].append(tm(full, reps[full]))
            ts["o2"].append(tm(o1, reps[o1]))
        md = {k: float(np.median(v)) for k, v in ts.items()}
        gf = 2 * K * P * KK / md["gm"] / 1e9
        print(f"| {name} | {K}x{P}x{KK} | {md['im']*1e6:.0f} | {md['gm']*1e6:.0f} | "
              f"{gf:.1f} ({100*gf/gf_big:.0f}%) | {md['full']*1e6:.0f} | {md['o1']*1e6:.0f} | "
              f"{md['o1']/md['full']:.2f} | {md['o1']/md['o2']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
