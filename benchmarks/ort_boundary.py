"""Cost of the ONNX Runtime <-> Python custom-op boundary on a 1M-element fp32 tensor.

Measured in one run, same session options and thread count on both sides (ONNX Runtime with
its default graph optimisations):

* ``identity``: an ai.edgeops op whose kernel returns its input, vs ONNX Runtime's Identity
  (target <= 2.5x: the bridge copies the tensor once in and once out);
* ``eltwise``: an ai.edgeops elementwise op (ReLU, a Numba kernel writing into the input copy
  the bridge hands it; ``--alloc``: into a new array) vs ONNX Runtime's Relu (target <= 4x);
* ``identity_native``, ``eltwise_native``: the same two ops through edgeops' native bridge
  (edgeops/ort/native.py, what package sessions use where it is built: ONNX Runtime's input
  handed over read-only without a copy, so the elementwise kernel writes a new array there);
* ``swiglu``: a GEMM-bound node with small activations, where the weights' copy was the cost:
  the SwiGLU subgraph (MatMul, MatMul, Sigmoid, Mul, Mul; M=16, D=768, F=2048) lowered for
  ``rpi5`` with ``--lower all`` (one ai.edgeops::SwiGLU node on neon.swiglu_fused, the
  package's model) vs ONNX Runtime on the unfused subgraph; ``before``: the node's weights
  cross the bridge on every call (``prepare(hold_constants=False)``), ``after``: held
  constants (edgeops/ort/consts.py).

Both ai.edgeops ops are benchmark-only: defined here (op definition + reference-target kernel)
and run through the real edgeops.ort dispatch (prepare, per-node attribute, kernel lookup).

    python benchmarks/ort_boundary.py [--repeats 200] [--threads 1 2] [--alloc] [--no-swiglu] [--json]
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
from edgeops.ort import native
from edgeops.ops.base import EDGEOPS_DOMAIN, OpDef, define_op
from edgeops.registry import REFERENCE, register_kernel
from edgeops.threads import alone_or_pool

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
    # the native bridge hands ONNX Runtime's own input, read-only: a new array there
    y = np.empty_like(x) if ALLOC or not x.flags.writeable else x
    # the thread rule edgeops' elementwise kernels follow (targets/neon/_threads.py): the pool
    # only where timing this call's first runs found it faster
    with alone_or_pool(("bench.relu", x.size), x.size):
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


SW_M, SW_D, SW_F = 16, 768, 2048


def _swiglu_unfused():
    from onnx import numpy_helper
    rng = np.random.default_rng(1)
    w = {k: (rng.standard_normal((SW_D, SW_F)) / np.sqrt(SW_D)).astype(np.float32) for k in ("w1", "w2")}
    N = helper.make_node
    nodes = [N("MatMul", ["x", "w1"], ["g"], name="gate"), N("Sigmoid", ["g"], ["s"], name="sig"),
             N("Mul", ["g", "s"], ["a"], name="silu"), N("MatMul", ["x", "w2"], ["u"], name="up"),
             N("Mul", ["a", "u"], ["y"], name="gate_up")]
    g = helper.make_graph(nodes, "swiglu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SW_M, SW_D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SW_M, SW_F])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(g, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])


def measure_swiglu(so, repeats: int) -> dict:
    from edgeops.lower import lower
    src = _swiglu_unfused()
    lowered = lower(src, "rpi5", mode="all").model
    kinds = [(n.op_type, n.domain) for n in lowered.graph.node]
    assert kinds == [("SwiGLU", EDGEOPS_DOMAIN)], kinds
    mk = lambda m: ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess = {"before": mk(eort.prepare(lowered, hold_constants=False)),
            "after": mk(eort.prepare(lowered)), "ort": mk(src)}
    x = np.random.default_rng(2).standard_normal((SW_M, SW_D)).astype(np.float32)
    want = sess["ort"].run(None, {"x": x})[0]
    for k in ("before", "after"):
        np.testing.assert_allclose(sess[k].run(None, {"x": x})[0], want, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(want).max()))
    ms = {}
    ms["swiglu_before"], ms["swiglu_ort"] = _paired_ms(sess["before"], sess["ort"], x, repeats)
    ms["swiglu_after"], ort2 = _paired_ms(sess["after"], sess["ort"], x, repeats)
    ms["swiglu_ort"] = statistics.median([ms["swiglu_ort"], ort2])
    eort.raise_errors()
    return ms


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


def measure(threads: int, repeats: int, swiglu: bool = True) -> dict:
    so = eort.register(ort.SessionOptions(), threads=threads)   # same options on both sides
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))

    def session(model):
        return ort.InferenceSession(eort.prepare(model).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])

    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    def native_session(model):
        m = eort.prepare(model)
        if not native.adopt(m):
            return None
        native.register(so)
        return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])

    sessions = {"edgeops_identity": session(_model("BenchIdentity", EDGEOPS_DOMAIN)),
                "ort_identity": session(_model("Identity")),
                "edgeops_relu": session(_model("BenchRelu", EDGEOPS_DOMAIN)),
                "ort_relu": session(_model("Relu")),
                "native_identity": native_session(_model("BenchIdentity", EDGEOPS_DOMAIN)),
                "native_relu": native_session(_model("BenchRelu", EDGEOPS_DOMAIN))}
    sessions = {k: v for k, v in sessions.items() if v is not None}
    for name, s in sessions.items():   # a fast wrong answer is no figure
        want = x if "identity" in name else np.maximum(x, 0)
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], want)
    ms = {}
    ms["edgeops_identity"], ms["ort_identity"] = _paired_ms(
        sessions["edgeops_identity"], sessions["ort_identity"], x, repeats)
    ms["edgeops_relu"], ms["ort_relu"] = _paired_ms(sessions["edgeops_relu"], sessions["ort_relu"],
                                                    x, repeats)
    native_ratios = {}
    if "native_identity" in sessions:
        ms["native_identity"], ms["ort_identity_n"] = _paired_ms(
            sessions["native_identity"], sessions["ort_identity"], x, repeats)
        ms["native_relu"], ms["ort_relu_n"] = _paired_ms(
            sessions["native_relu"], sessions["ort_relu"], x, repeats)
        native_ratios = {"identity_native": ms["native_identity"] / ms["ort_identity_n"],
                         "eltwise_native": ms["native_relu"] / ms["ort_relu_n"]}
    eort.raise_errors()
    ratios = {"identity": ms["edgeops_identity"] / ms["ort_identity"],
              "eltwise": ms["edgeops_relu"] / ms["ort_relu"],
              **native_ratios}
    if swiglu:
        ms.update(measure_swiglu(so, repeats))
        ratios["swiglu_before"] = ms["swiglu_before"] / ms["swiglu_ort"]
        ratios["swiglu_after"] = ms["swiglu_after"] / ms["swiglu_ort"]
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
    ap.add_argument("--no-swiglu", action="store_true", help="skip the SwiGLU M=16 case")
    args = ap.parse_args(argv)
    global ALLOC
    ALLOC = args.alloc
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = args.threads or sorted({1, cores})
    rows = [measure(t, args.repeats, not args.no_swiglu) for t in threads]
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
        if "native_identity" in m:
            print(f"  native bridge (package sessions): identity {m['native_identity']:8.3f} ms vs "
                  f"{m['ort_identity_n']:8.3f} ms ({q['identity_native']:.2f}x), eltwise "
                  f"{m['native_relu']:8.3f} ms vs {m['ort_relu_n']:8.3f} ms "
                  f"({q['eltwise_native']:.2f}x)")
        if "swiglu_after" in m:
            print(f"  swiglu M={SW_M} D={SW_D} F={SW_F}, ORT unfused {m['swiglu_ort']:8.3f} ms; edgeops "
                  f"weights copied per call {m['swiglu_before']:8.3f} ms ({q['swiglu_before']:.2f}x), "
                  f"held {m['swiglu_after']:8.3f} ms ({q['swiglu_after']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
