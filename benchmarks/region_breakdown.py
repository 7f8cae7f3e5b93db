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

``--nodes``: the same split for one node (or one region) per kernel family (identity: a copy,
about the crossing alone; add, mul, relu, sigmoid from 16K elements; add+relu;
layernorm; softmax; matmul and gemm on the encoder block's shapes; 3x3 and depthwise conv), each
compiled ``--lower all`` for ``host`` and timed in rotation with two ONNX Runtime sessions of
the original node (ORT_ENABLE_ALL, same threads; the second is the A/A column). A run splits
into ``ort+bridge`` (ONNX Runtime, the bridge's crossing and its output copy: everything outside
Python), ``glue`` (Python around the node calls: the op or region function, resolving the
dispatch string), ``handoff`` (capping and restoring the kernels' thread count), ``prep`` (the
kernel's inputs: placeholders, held constants, the kernel choice), ``kernel`` and ``out`` (the
output handed back contiguous). Beside it, a second package session with native programs on
(the default: edgeops.ort.native), in the same rotation: its time, the share of its calls that
ran natively, and whether its outputs are bit-identical to the Python path's.

    python benchmarks/region_breakdown.py [--threads 1] [--runs 200] [--models ...] [--json]
        [--quick]
    python benchmarks/region_breakdown.py --nodes [--families ...] [--threads 1 2] [--runs 200]
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
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgeops.lower.measure import settle  # noqa: E402
from edgeops.ort import regions  # noqa: E402
from edgeops.targets.neon import norms  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_vs_ort import build, ort_session  # noqa: E402

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


# ---- any node or region (--nodes) --------------------------------------------------------------

def _one(op: str, shape, *, inputs: int = 1, weights=(), attrs=None, seed: int = 0,
         out_shape=None, domain: str = "") -> onnx.ModelProto:
    """A one-node model: ``inputs`` activations of ``shape``, then ``weights`` (shapes) as
    initializers, output ``out_shape`` (default ``shape``)."""
    rng = np.random.default_rng(seed)
    names = [f"x{i}" for i in range(inputs)]
    inits = [numpy_helper.from_array((rng.standard_normal(w) / np.sqrt(w[0])).astype(np.float32),
                                     f"w{i}") for i, w in enumerate(weights)]
    node = helper.make_node(op, names + [t.name for t in inits], ["y"], domain=domain,
                            **(attrs or {}))
    g = helper.make_graph([node], op.lower(),
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         out_shape or shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _add_relu(shape):
    x0, x1 = (helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x0", "x1"))
    g = helper.make_graph([helper.make_node("Add", ["x0", "x1"], ["s"], name="add"),
                           helper.make_node("Relu", ["s"], ["y"], name="relu")], "add_relu",
                          [x0, x1], [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


# family -> (builder, kernel targets): one node (or one region) per kernel family, at the sizes
# the per-node targets name; identity runs the reference target's kernel (pure crossing)
E16, E200 = (1, 64, 16, 16), (1, 64, 56, 56)
NODES = {
    "identity": (lambda: _one("Identity", (1, 128, 768)), None),
    "add-16k": (lambda: _one("Add", E16, inputs=2), None),
    "add-200k": (lambda: _one("Add", E200, inputs=2), None),
    "mul-16k": (lambda: _one("Mul", E16, inputs=2), None),
    "relu-16k": (lambda: _one("Relu", E16), None),
    "relu-200k": (lambda: _one("Relu", E200), None),
    "sigmoid-16k": (lambda: _one("Sigmoid", E16), None),
    "add+relu-200k": (lambda: _add_relu(E200), None),
    "layernorm": (lambda: _one("LayerNormalization", (1, 128, 768), weights=[(768,), (768,)],
                               attrs={"axis": -1}), None),
    "softmax": (lambda: _one("Softmax", (1, 12, 128, 128)), None),
    "matmul": (lambda: _one("MatMul", (1, 128, 768), weights=[(768, 768)]), None),
    "gemm": (lambda: _one("Gemm", (128, 768), weights=[(768, 3072), (3072,)],
                          out_shape=(128, 3072)), None),
    "conv3x3": (lambda: _one("Conv", (1, 64, 56, 56), weights=[(64, 64, 3, 3), (64,)],
                             attrs={"pads": [1, 1, 1, 1]}), None),
    "depthwise": (lambda: _one("Conv", (1, 128, 28, 28), weights=[(128, 1, 3, 3), (128,)],
                               attrs={"pads": [1, 1, 1, 1], "group": 128}), None),
}
PHASES = ("ort+bridge", "glue", "handoff", "prep", "kernel", "out")


class _Probe:
    """Timestamps where a package run enters and leaves Python (an op or region function; a
    region's inner nodes are inside its time) and, for each node call, where dispatch caps the
    threads, prepares the inputs, runs the kernel and hands the output back (a region's fused
    chain pass bypasses node calls: it counts as glue). Diagnosis only: it wraps edgeops' own
    functions for this process."""

    def __init__(self):
        from edgeops.ort import dispatch
        self.py = self.calls = self.entered = 0.0
        self.depth = 0
        self.acc = dict.fromkeys(("handoff", "prep", "kernel", "out"), 0.0)
        probe, D = self, dispatch._Dispatch
        call, inner, run = D.call, D._call, D._run

        def d_call(self_, inputs):
            t = time.perf_counter()
            probe._stack = [t]
            try:
                return call(self_, inputs)
            finally:
                e = time.perf_counter()
                s, i0, r0, r1, i1 = probe._stack
                probe.acc["handoff"] += (i0 - s) + (e - i1)
                probe.acc["prep"] += r0 - i0
                probe.acc["kernel"] += r1 - r0
                probe.acc["out"] += i1 - r1
                probe.calls += e - s

        def d_inner(self_, inputs):
            probe._stack.append(time.perf_counter())
            try:
                return inner(self_, inputs)
            finally:
                probe._stack.append(time.perf_counter())

        def d_run(self_, k, xs):
            probe._stack.append(time.perf_counter())
            try:
                return run(self_, k, xs)
            finally:
                probe._stack.append(time.perf_counter())
        D.call, D._call, D._run = d_call, d_inner, d_run
        # the time in Python: from the function's resolve to its return to the bridge
        self._wrap_functions()

    def _wrap_functions(self):
        from edgeops.ort import calls
        probe = self

        def in_python(make):
            """``make``'s functions, each also counting the time the run spends in Python: from
            entering the outermost one (an op function, or a region's) to leaving it."""
            def made(arg):
                fn = make(arg)

                def run(*inputs, **attrs):
                    if probe.depth == 0:
                        probe.entered = time.perf_counter()
                    probe.depth += 1
                    try:
                        return fn(*inputs, **attrs)
                    finally:
                        probe.depth -= 1
                        if probe.depth == 0:
                            probe.py += time.perf_counter() - probe.entered
                run.__name__ = fn.__name__
                return run
            return made
        calls._op_function = in_python(calls._op_function)
        regions.region_function = in_python(regions.region_function)

    def reset(self):
        self.py = self.calls = 0.0
        for k in self.acc:
            self.acc[k] = 0.0

    def split(self, total: float) -> dict:
        return {"total": total, "ort+bridge": total - self.py, "glue": self.py - self.calls,
                **self.acc}


def node_breakdown(family: str, threads: int, runs: int, probe: _Probe) -> dict:
    from edgeops import package
    from edgeops.ort import native
    from edgeops.pipeline.compile import compile_model
    build_fn, targets = NODES[family]
    m = build_fn()
    with tempfile.TemporaryDirectory() as tmp:
        doc = compile_model(m, "host", f"{tmp}/pkg", mode="all", threads=threads, verify=False,
                            targets=targets)
        pkg = package.load(f"{tmp}/pkg")
        sess = pkg.session(threads=threads)           # plans off: the Python path, split
        os.environ["EDGEOPS_NATIVE_PLANS"] = "1"
        try:
            nat = pkg.session(threads=threads)        # the default: native programs
        finally:
            os.environ["EDGEOPS_NATIVE_PLANS"] = "0"
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    peer, peer2 = ort_session(m, threads), ort_session(m, threads)
    want, got = peer.run(None, feeds)[0], sess.run(None, feeds)[0]
    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    for _ in range(3):
        sess.run(None, feeds)
        nat.run(None, feeds)
    same = bool(np.array_equal(sess.run(None, feeds)[0], nat.run(None, feeds)[0]))
    parts = {p: [] for p in ("total", *PHASES)}
    times: list = [[], [], []]      # native session, ORT, ORT again (A/A)
    per = max(1, runs // BLOCKS)
    c0 = native.counters()
    for b in range(BLOCKS):     # blocks of back-to-back runs, the four sessions in rotation
        for who in ((0, 1, 2, 3), (1, 2, 3, 0), (2, 3, 0, 1), (3, 0, 1, 2))[b % 4]:
            settle()
            s = (sess, nat, peer, peer2)[who]
            s.run(None, feeds)
            for _ in range(per):
                probe.reset()
                t0 = time.perf_counter()
                s.run(None, feeds)
                t = time.perf_counter() - t0
                if who == 0:
                    for p, v in probe.split(t).items():
                        parts[p].append(v)
                else:
                    times[who - 1].append(t)
    c1 = native.counters()
    calls = per * BLOCKS + BLOCKS    # the native session's runs: timed, and one warm-up a block
    med = {p: statistics.median(v) for p, v in parts.items()}
    n_s, o, o2 = (statistics.median(v) for v in times)
    lowered = [r["kernel"] for r in doc["placement"] if r["target"]]
    return {"family": family, "threads": threads, "runs": per * BLOCKS, "kernels": lowered,
            "ort_s": o, "ratio": o / med["total"], "native_s": n_s, "ratio_native": o / n_s,
            "native_share": min(1.0, (c1["native_calls"] - c0["native_calls"]) / max(calls, 1)),
            "bit_identical": same, "aa": o / o2, "max_rel_err": err, **med}


def nodes_main(a) -> int:
    families = list(NODES) if not a.families else a.families
    if a.quick:
        families, a.runs = ["identity", "add-16k"], 16
    probe = _Probe()
    rows = [node_breakdown(f, t, a.runs, probe) for f in families for t in a.threads]
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"one node (or region) in a package session, --lower all on host; median us of "
          f"{rows[0]['runs']} runs a side; ratio = ORT / edgeops; 'python': native programs off "
          f"(split in phases), 'native': the default (share: calls run natively; same: outputs "
          f"bit-identical to the Python path)")
    print(f"{'family':14} {'thr':>3} {'ORT':>8} {'native':>8} {'ratio':>6} {'share':>5} "
          f"{'same':>4} {'python':>8} {'ratio':>6} {'A/A':>5} "
          + " ".join(f"{p:>10}" for p in PHASES))
    for r in rows:
        print(f"{r['family']:14} {r['threads']:>3} {1e6 * r['ort_s']:8.1f} "
              f"{1e6 * r['native_s']:8.1f} {r['ratio_native']:6.2f} {r['native_share']:5.2f} "
              f"{'yes' if r['bit_identical'] else 'NO':>4} {1e6 * r['total']:8.1f} "
              f"{r['ratio']:6.2f} {r['aa']:5.2f} "
              + " ".join(f"{1e6 * r[p]:10.1f}" for p in PHASES))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", action="store_true",
                    help="split one node (or region) per kernel family instead of the chains")
    ap.add_argument("--families", nargs="+", choices=list(NODES), help="with --nodes: these only")
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=200, help="runs a side, over 8 blocks")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="chain_ln_gelu, 16 runs a side (smoke)")
    a = ap.parse_args(argv)
    if a.nodes:
        return nodes_main(a)
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
