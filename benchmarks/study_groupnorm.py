"""Study (b): GroupNorm(32 groups) + SiLU on an NPU without fusion (several small kernels, each
with its launch and its off-chip round trip) versus fused (one ai.edgeops::GroupNormAct kernel)
versus the board's CPU (edgeops' fused kernel and ONNX Runtime's own kernels).

Three forms of the same computation, as ONNX graphs simulated end to end:

* decomposed -- what PyTorch exports below opset 18: Reshape, InstanceNormalization, Reshape,
  Mul (gamma), Add (beta), Sigmoid, Mul: five kernels;
* unfused -- GroupNormalization-21, Sigmoid, Mul: three kernels;
* fused -- the unfused graph after ``edgeops.passes.run_passes``: one GroupNormAct kernel.

    python benchmarks/study_groupnorm.py [--json] [--plot DIR]

Writes groupnorm_latency.png into DIR.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from study_common import emit, mb, parser, plot_path, us  # noqa: E402

SHAPES = {"1x64x56x56": (1, 64, 56, 56), "1x320x64x64": (1, 320, 64, 64)}
GROUPS = 32
NPUS = ("ascend-310b", "ascend-910b")
CPUS = ("rk3588", "rpi5")


def build(shape, form: str):
    from onnx import TensorProto, helper, numpy_helper
    n, c, h, w = shape
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), "gamma"),
            numpy_helper.from_array(rng.normal(0, 0.1, c).astype(np.float32), "beta")]
    if form == "decomposed":
        init += [numpy_helper.from_array(np.array([n, GROUPS, -1], np.int64), "gshape"),
                 numpy_helper.from_array(np.array(shape, np.int64), "xshape"),
                 numpy_helper.from_array(np.ones(GROUPS, np.float32), "ones"),
                 numpy_helper.from_array(np.zeros(GROUPS, np.float32), "zeros"),
                 numpy_helper.from_array(rng.uniform(0.5, 1.5, (c, 1, 1)).astype(np.float32), "gamma3"),
                 numpy_helper.from_array(rng.normal(0, 0.1, (c, 1, 1)).astype(np.float32), "beta3")]
        nodes = [helper.make_node("Reshape", ["x", "gshape"], ["xg"], name="reshape_in"),
                 helper.make_node("InstanceNormalization", ["xg", "ones", "zeros"], ["ng"], name="instnorm",
                                  epsilon=1e-5),
                 helper.make_node("Reshape", ["ng", "xshape"], ["nx"], name="reshape_out"),
                 helper.make_node("Mul", ["nx", "gamma3"], ["sx"], name="scale"),
                 helper.make_node("Add", ["sx", "beta3"], ["gn"], name="shift")]
    else:
        nodes = [helper.make_node("GroupNormalization", ["x", "gamma", "beta"], ["gn"], name="gn",
                                  num_groups=GROUPS, epsilon=1e-5)]
    nodes += [helper.make_node("Sigmoid", ["gn"], ["sig"], name="sigmoid"),
              helper.make_node("Mul", ["gn", "sig"], ["y"], name="silu")]
    g = helper.make_graph(nodes, f"groupnorm_silu_{form}",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    if form == "fused":
        from edgeops.passes import run_passes
        m, _ = run_passes(m)
    return m


def main(argv=None) -> int:
    args = parser(__doc__).parse_args(argv)
    from edgeops.tiling.graphsim import simulate_model
    rows, doc_rows = [], []
    for label, shape in SHAPES.items():
        models = {f: build(shape, f) for f in ("decomposed", "unfused", "fused")}
        assert [n.op_type for n in models["fused"].graph.node] == ["GroupNormAct"]
        for board in NPUS + CPUS:
            for form, m in models.items():
                d = simulate_model(m, board).to_dict()
                r = {"shape": label, "board": board, "form": form,
                     "kernels": d["launches"], "latency_s": d["total_latency_s"],
                     "launch_s": d["launch_s"], "offchip_bytes": d["offchip_bytes"],
                     "peak_memory_bytes": d["peak_memory_bytes"], "dtype": d["cast"].get("fp32", "fp32"),
                     "nodes": [{k: x[k] for k in ("node", "op", "model", "latency_s", "offchip_bytes",
                                                  "bound", "launches")} for x in d["nodes"]]}
                if d["peer"]:
                    r["onnxruntime_latency_s"] = d["peer"]["latency_s"]
                    r["onnxruntime_kernels"] = d["peer"]["kernels"]
                doc_rows.append(r)
                rows.append([label, board, form, r["dtype"], r["kernels"], mb(r["offchip_bytes"]),
                             us(r["latency_s"]), us(r["launch_s"]),
                             us(r.get("onnxruntime_latency_s")) if form == "unfused" else ""])
    doc = {"groups": GROUPS, "activation": "silu", "rows": doc_rows, "figures": []}
    f = plot_path(args, "groupnorm_latency.png")
    if f:
        from edgeops.simulator.plot import bars
        groups = {}
        for r in doc_rows:
            key = f"{r['board']}\n{r['shape']}"
            groups.setdefault(key, {})[f"edgeops {r['form']}"] = r["latency_s"] * 1e6
            if r["form"] == "unfused" and "onnxruntime_latency_s" in r:
                groups[key]["ONNX Runtime (CPU)"] = r["onnxruntime_latency_s"] * 1e6
        bars(groups, f, ylabel="predicted latency (us, log)", log=True,
             title=f"GroupNorm({GROUPS}) + SiLU: decomposed / unfused / fused, NPU vs CPU")
        doc["figures"].append(f)
    emit(args, doc, [(f"GroupNorm({GROUPS}) + SiLU, whole graph on each board",
                      ["shape", "board", "form", "dtype", "kernels", "off-chip", "latency", "of it launch",
                       "ORT peer"], rows)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
