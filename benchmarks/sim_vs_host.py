"""Simulator vs reality on the ``host`` board: predicted vs measured per-node latency.

Prediction: the peer model's per-node latency for ONNX Runtime's own execution on ``host``
(:func:`edgeops.simulator.peer.peer_latency`, the figure lowering compares edgeops' kernels
with), at the same thread count ONNX Runtime is given. Measurement: ONNX Runtime's profiler
(``SessionOptions.enable_profiling``; node events ``<name>_kernel_time``, ``dur`` in us), the
median of each node over ``--repeats`` runs after warm-up.

Test models: the bundled sample model and light ONNX model-zoo models (``light_*.onnx`` from the
onnx package) with random weights (their ConstantOfShape-held weights become random initializers,
as tests/cli/test_inspect.py does). Unnamed nodes are given names before either side sees them.

ONNX Runtime optimisation (``--ort-opt``):

* ``all`` (default, ORT_ENABLE_ALL as deployed): ORT fuses and renames nodes (Conv+BN+Relu ->
  one FusedConv carrying the activation's name, ``_nchwc`` layout copies, inlined functions
  such as GroupNormalization). A measured node matches the original node of the same name (the
  ``_nchwc`` suffix stripped; ORT's NCHWc pass names a node after its output tensor, so a name
  that is an output tensor's maps to that tensor's producer); an original node ORT removed is folded into the nearest surviving
  node along its single-consumer chain (else its producer) when that node now runs another op
  (``stem.relu`` runs as Conv: it absorbed the Conv and BatchNorm), so a fused kernel is compared
  with the sum of the predictions of the nodes it replaced; other removed nodes (fused into a
  renamed node, or an inlined function) are left out. Measured nodes ORT inserted (layout
  reorders, inlined function bodies) have no prediction and are left out; the table says how many
  matched.
* ``disable``: ORT_DISABLE_ALL, every node runs as its own kernel with its own name (the peer
  model's premise), so nearly every node matches one to one.

Reports Spearman rank correlation (average ranks for ties, numpy only) and MAPE
(mean |pred - meas| / meas) per model and over all matched nodes pooled; target Spearman >= 0.8.

    python benchmarks/sim_vs_host.py [--models sample squeezenet shufflenet inception_v1]
        [--repeats 20] [--threads 1] [--ort-opt all|disable] [--json] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from edgeops.zoo import randomise_weights

TARGET_SPEARMAN = 0.8
DEFAULT_MODELS = ["sample", "squeezenet", "shufflenet", "inception_v1"]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ort.set_default_logger_severity(3)
OPT = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
       "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
       "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}


# ---- test models ---------------------------------------------------------------------------

def randomised(model: onnx.ModelProto, rng) -> onnx.ModelProto:
    return randomise_weights(model, rng)


def named(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every unnamed node a unique name (ORT's profiler and edgeops key nodes by name)."""
    seen = set()
    for i, n in enumerate(model.graph.node):
        if not n.name or n.name in seen:
            n.name = f"{n.op_type.lower()}_{i}"
        seen.add(n.name)
    return model


def test_model(name: str, seed: int = 0) -> onnx.ModelProto:
    if name == "sample":
        from edgeops.sample import build_sample_model
        return named(build_sample_model())
    path = LIGHT / f"light_{name}.onnx"
    if not path.exists():
        sys.exit(f"no such light model: {path}")
    return named(randomised(onnx.load(str(path)), np.random.default_rng(seed)))


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict:
    from edgeops.package import random_inputs
    return random_inputs(model, seed)


# ---- prediction and measurement ------------------------------------------------------------

def predicted(model: onnx.ModelProto, threads: int) -> dict[str, float]:
    """{node name: seconds} from the peer model (ONNX Runtime on host)."""
    from edgeops import graph
    from edgeops.simulator.peer import peer_latency
    g = graph.load(model)
    return dict(peer_latency(g, "host", threads=threads).per_node_s)


def measured(model: onnx.ModelProto, feeds: dict, *, threads: int, repeats: int, warmup: int,
             opt: str) -> tuple[dict[str, float], dict[str, str]]:
    """({ORT node name: median seconds per run}, {name: op}) from ORT's profiler."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = OPT[opt]
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="edgeops_prof_"), "p")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(warmup):
        sess.run(None, feeds)
    for _ in range(repeats):
        sess.run(None, feeds)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    per_run: dict[str, list[float]] = {}
    ops: dict[str, str] = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        nm = e["name"][: -len("_kernel_time")]
        per_run.setdefault(nm, []).append(e["dur"] * 1e-6)
        ops[nm] = e.get("args", {}).get("op_name", "?")
    # the session ran warmup + repeats times; keep the last `repeats` events of each node
    out = {nm: statistics.median(v[-repeats:]) for nm, v in per_run.items()}
    return out, ops


def _base(ort_name: str) -> str:
    return re.sub(r"(_nchwc)+$", "", ort_name)


def match(model: onnx.ModelProto, pred: dict[str, float], meas: dict[str, float],
          meas_ops: dict[str, str]) -> list[dict]:
    """Rows {node, op, ort_op, pred_s, meas_s, folded} for nodes present in both."""
    nodes = {n.name: n for n in model.graph.node}
    present: dict[str, str] = {}         # original name -> ORT name
    by_output = {o: n.name for n in model.graph.node for o in n.output}
    for m in meas:
        b = _base(m)
        if b not in nodes:      # ORT's layout pass names a node after its output tensor
            b = by_output.get(b, b)
        if b in nodes and b not in present:
            present[b] = m
    consumers: dict[str, list[str]] = {}
    producer: dict[str, str] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.name)
        for o in n.output:
            producer[o] = n.name

    def fused(name: str) -> bool:
        """ORT runs a different op under this name: it absorbed its neighbours."""
        return meas_ops[present[name]] != nodes[name].op_type

    def host_of(name: str) -> str | None:
        """The surviving fused node a removed node's prediction is folded into (None: ORT
        replaced it with nodes of other names, e.g. an inlined function; left out)."""
        cur, hops = name, 0
        while cur not in present and hops < 8:      # down a single-consumer chain
            outs = [c for o in nodes[cur].output for c in consumers.get(o, [])]
            if len(outs) != 1:
                break
            cur, hops = outs[0], hops + 1
        if cur in present and fused(cur):
            return cur
        cur, hops = name, 0
        while cur not in present and hops < 8:      # else up its first input
            ins = [producer[i] for i in nodes[cur].input if i in producer]
            if not ins:
                return None
            cur, hops = ins[0], hops + 1
        return cur if cur in present and fused(cur) else None

    acc = {k: [pred.get(k, 0.0), []] for k in present}
    for nm in nodes:
        if nm in present or nm not in pred:
            continue
        h = host_of(nm)
        if h is not None:
            acc[h][0] += pred[nm]
            acc[h][1].append(nm)
    rows = []
    for k, (p, folded) in acc.items():
        if k not in pred:
            continue
        rows.append({"node": k, "op": nodes[k].op_type, "ort_op": meas_ops[present[k]],
                     "pred_s": p, "meas_s": meas[present[k]], "folded": folded})
    return rows


# ---- statistics ----------------------------------------------------------------------------

def ranks(a) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    a = np.asarray(a, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    r = np.empty(len(a))
    r[order] = np.arange(1, len(a) + 1)
    s = a[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        if j > i:
            r[order[i:j + 1]] = (i + j + 2) / 2.0
        i = j + 1
    return r


def spearman(x, y) -> float:
    if len(x) < 2:
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    d = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / d) if d > 0 else float("nan")


def mape(pred, meas) -> float:
    p, m = np.asarray(pred, np.float64), np.asarray(meas, np.float64)
    ok = m > 0
    return float(np.mean(np.abs(p[ok] - m[ok]) / m[ok])) if ok.any() else float("nan")


# ---- main ----------------------------------------------------------------------------------

def run_model(name: str, *, threads: int, repeats: int, warmup: int, opt: str) -> dict:
    model = test_model(name)
    feeds = feeds_for(model)
    pred = predicted(model, threads)
    meas, ops = measured(model, feeds, threads=threads, repeats=repeats, warmup=warmup, opt=opt)
    rows = match(model, pred, meas, ops)
    p = [r["pred_s"] for r in rows]
    m = [r["meas_s"] for r in rows]
    return {"model": name, "threads": threads, "ort_opt": opt,
            "nodes_model": len(model.graph.node), "nodes_ort": len(meas),
            "matched": len(rows), "folded": sum(len(r["folded"]) for r in rows),
            "spearman": spearman(p, m), "mape": mape(p, m),
            "pred_total_s": float(sum(p)), "meas_total_s": float(sum(m)),
            "meas_all_nodes_s": float(sum(meas.values())), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ort-opt", choices=sorted(OPT), default="all")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", action="store_true", help="print every matched node")
    ap.add_argument("--quick", action="store_true", help="sample model only, 3 repeats (smoke test)")
    a = ap.parse_args(argv)
    models = a.models or (["sample"] if a.quick else DEFAULT_MODELS)
    repeats, warmup = (3, 1) if a.quick else (a.repeats, a.warmup)
    results = [run_model(m, threads=a.threads, repeats=repeats, warmup=warmup, opt=a.ort_opt)
               for m in models]
    allp = [r["pred_s"] for res in results for r in res["rows"]]
    allm = [r["meas_s"] for res in results for r in res["rows"]]
    overall = {"matched": len(allp), "spearman": spearman(allp, allm), "mape": mape(allp, allm),
               "target_spearman": TARGET_SPEARMAN}
    overall["meets_target"] = bool(overall["spearman"] >= TARGET_SPEARMAN)
    doc = {"board": "host", "threads": a.threads, "ort_opt": a.ort_opt, "repeats": repeats,
           "onnxruntime": ort.__version__, "models": results, "overall": overall}
    if a.json:
        if not a.rows:
            for res in results:
                res.pop("rows")
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    print(f"simulator (peer model) vs ONNX Runtime {ort.__version__} profiler on host, "
          f"{a.threads} thread(s), ORT optimisation {a.ort_opt}, median of {repeats} runs")
    hdr = f"{'model':<14}{'nodes':>6}{'ORT':>6}{'match':>7}{'fold':>6}{'spearman':>10}" \
          f"{'MAPE':>9}{'pred ms':>10}{'meas ms':>10}"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        print(f"{r['model']:<14}{r['nodes_model']:>6}{r['nodes_ort']:>6}{r['matched']:>7}"
              f"{r['folded']:>6}{r['spearman']:>10.3f}{r['mape'] * 100:>8.1f}%"
              f"{r['pred_total_s'] * 1e3:>10.3f}{r['meas_total_s'] * 1e3:>10.3f}")
        if a.rows:
            for row in sorted(r["rows"], key=lambda x: -x["meas_s"]):
                print(f"    {row['node']:<32}{row['op']:<20}{row['ort_op']:<20}"
                      f"{row['pred_s'] * 1e6:>10.1f}{row['meas_s'] * 1e6:>10.1f} us"
                      + (f"  (+{', '.join(row['folded'])})" if row["folded"] else ""))
    print("-" * len(hdr))
    print(f"{'overall':<14}{'':>6}{'':>6}{overall['matched']:>7}{'':>6}"
          f"{overall['spearman']:>10.3f}{overall['mape'] * 100:>8.1f}%")
    print(f"target Spearman >= {TARGET_SPEARMAN}: "
          f"{'met' if overall['meets_target'] else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
