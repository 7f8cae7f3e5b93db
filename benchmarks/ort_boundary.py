"""Cost of the ONNX Runtime <-> Python custom-op boundary on a 1M-element fp32 tensor.

Measured in one run, same session options and thread count on both sides (ONNX Runtime with
its default graph optimisations):

* ``identity``: an ai.edgeops op whose kernel returns its input, vs ONNX Runtime's Identity
  (target <= 2.5x: the bridge copies the tensor once in and once out);
* ``eltwise``: an ai.edgeops elementwise op (ReLU, a Numba kernel writing into the input copy
  the bridge hands it; ``--alloc``: into a new array) vs ONNX Runtime's Relu (target <= 4x);
* ``identity_stock``: the identity op through onnxruntime-extensions' stock ``.tolist()``
  return path, the figure the fast hook exists to avoid.

Both ai.edgeops ops are benchmark-only: defined here (op definition + reference-target kernel)
and run through the real edgeops.ort dispatch (prepare, per-node attribute, kernel lookup).

    python benchmarks/ort_boundary.py [--repeats 200] [--threads 1 2] [--alloc] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numba
import numpy as np
import onnxruntime as ort
from numba import njit, prange
from onnx import TensorProto, helper

import edgeops.ort as eort
from edgeops.ops.base import EDGEOPS_DOMAIN, OpDef, define_op
from edgeops.registry import REFERENCE, register_kernel

N = 1 << 20
TARGETS = {"identity": 2.5, "eltwise": 4.0}


@define_op
class BenchIdentity(OpDef):
    """Benchmark-only: Y = X, to time the boundary alone."""
    name = "BenchIdentity"
    domain = EDGEOPS_DOMAIN

    @classmethod
    def reference(cls, x):
        return x


@define_op
class BenchRelu(OpDef):
    """Benchmark-only elementwise op: Y = max(X, 0)."""
    name = "BenchRelu"
    domain = EDGEOPS_DOMAIN

    @classmethod
    def reference(cls, x):
        return np.maximum(x, 0)


# priority 1: above the reference kernel edgeops registers for every op (OpDef.run, which
# re-validates attributes on each call), so the figures are the boundary's, not validation's
@register_kernel(f"{EDGEOPS_DOMAIN}::BenchIdentity", REFERENCE, name="bench.identity", priority=1)
def _identity(inputs, attrs):
    return [inputs[0]]


@register_kernel(f"{EDGEOPS_DOMAIN}::BenchRelu", REFERENCE, name="bench.relu", priority=1)
def _relu(inputs, attrs):
    # in place: the bridge hands each call a fresh copy of the input that nothing else holds,
    # so an elementwise kernel can write into it instead of allocating (and faulting in) a
    # second 4 MB array; ~0.03-0.1 ms of the ~0.35 ms here (--alloc measures the other way)
    x = inputs[0]
    y = np.empty_like(x) if ALLOC else x
    _relu_kernel(x.reshape(-1), y.reshape(-1))
    return [y]


ALLOC = False


@njit(parallel=True, cache=True)
def _relu_kernel(x, y):
    # a Numba loop as edgeops' CPU kernels are written (np.maximum is ~4x slower here: it is
    # not vectorised for NaN-propagating float32); "not v < 0" keeps NaN, as ONNX Relu does
    for i in prange(x.shape[0]):
        v = x[i]
        y[i] = v if not v < 0 else np.float32(0)


def _model(op: str, domain: str = ""):
    node = helper.make_node(op, ["x"], ["y"], domain=domain, name=op.lower())
    g = helper.make_graph([node], "boundary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])])
    return helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                              helper.make_opsetid(EDGEOPS_DOMAIN, 1)])


def _paired_ms(a, b, x, repeats: int, blocks: int = 10) -> tuple[float, float]:
    """Median ms of a.run and of b.run. Timed in alternating blocks: within a block each side
    runs back to back (warm, as in a real loop), and the alternation spreads the drift of a
    shared machine over both sides."""
    ta, tb = [], []
    per = max(1, repeats // blocks)
    for _ in range(blocks):
        for sess, ts in ((a, ta), (b, tb)):
            sess.run(None, {"x": x})      # warm-up after the other side ran
            for _ in range(per):
                t = time.perf_counter()
                sess.run(None, {"x": x})
                ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ta), 1e3 * statistics.median(tb)


def measure(threads: int, repeats: int) -> dict:
    so = eort.register(ort.SessionOptions(), threads=threads)   # same options on both sides
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))

    def session(model):
        return ort.InferenceSession(eort.prepare(model).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])

    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    sessions = {"edgeops_identity": session(_model("BenchIdentity", EDGEOPS_DOMAIN)),
                "ort_identity": session(_model("Identity")),
                "edgeops_relu": session(_model("BenchRelu", EDGEOPS_DOMAIN)),
                "ort_relu": session(_model("Relu"))}
    for name, s in sessions.items():   # a fast wrong answer is no figure
        want = x if "identity" in name else np.maximum(x, 0)
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], want)
    ms = {}
    ms["edgeops_identity"], ms["ort_identity"] = _paired_ms(
        sessions["edgeops_identity"], sessions["ort_identity"], x, repeats)
    ms["edgeops_relu"], ms["ort_relu"] = _paired_ms(sessions["edgeops_relu"], sessions["ort_relu"],
                                                    x, repeats)
    try:
        eort.install_fast_hook(False)
        ms["edgeops_identity_stock"], _ = _paired_ms(
            sessions["edgeops_identity"], sessions["ort_identity"], x, 4, blocks=2)
    finally:
        eort.install_fast_hook(True)
    eort.raise_errors()
    ratios = {"identity": ms["edgeops_identity"] / ms["ort_identity"],
              "eltwise": ms["edgeops_relu"] / ms["ort_relu"],
              "identity_stock": ms["edgeops_identity_stock"] / ms["ort_identity"]}
    return {"threads": threads, "ms": {k: round(v, 4) for k, v in ms.items()},
            "ratios": {k: round(v, 2) for k, v in ratios.items()},
            "within_target": {k: ratios[k] <= t for k, t in TARGETS.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--threads", type=int, nargs="+",
                    help="ONNX Runtime intra-op threads to measure (default: 1 and all cores)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--alloc", action="store_true",
                    help="elementwise kernel allocates its output instead of reusing the input copy")
    args = ap.parse_args(argv)
    global ALLOC
    ALLOC = args.alloc
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = args.threads or sorted({1, cores})
    rows = [measure(t, args.repeats) for t in threads]
    doc = {"benchmark": "ort_boundary", "elements": N, "dtype": "fp32", "repeats": args.repeats,
           "eltwise_output": "new array" if ALLOC else "in place (the bridge's input copy)",
           "onnxruntime": ort.__version__, "targets": TARGETS, "results": rows}
    if args.json:
        json.dump(doc, sys.stdout)
        print()
        return 0
    print(f"custom-op boundary, {N} fp32 elements, median of {args.repeats} runs, "
          f"onnxruntime {ort.__version__}")
    for r in rows:
        m, q = r["ms"], r["ratios"]
        print(f"threads={r['threads']}")
        print(f"  identity  edgeops {m['edgeops_identity']:8.3f} ms  ORT Identity {m['ort_identity']:8.3f} ms"
              f"  ratio {q['identity']:6.2f}x (target <= {TARGETS['identity']}x)")
        print(f"  eltwise   edgeops {m['edgeops_relu']:8.3f} ms  ORT Relu     {m['ort_relu']:8.3f} ms"
              f"  ratio {q['eltwise']:6.2f}x (target <= {TARGETS['eltwise']}x)")
        print(f"  stock .tolist() bridge, identity {m['edgeops_identity_stock']:8.3f} ms"
              f"  ratio {q['identity_stock']:6.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
