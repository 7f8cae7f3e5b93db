"""Jetson: the ai.edgeops ops run CUDA kernels through the ONNX Runtime Python bridge, which
hands host arrays, so each node copies its inputs host->device and its outputs device->host; the
graph prediction adds (input + output bytes) / [gpu] host_device_bandwidth to every kernel node."""
import tomllib
from pathlib import Path

import pytest

from edgeops import graph
from edgeops.passes import run_passes
from edgeops.sample import build_sample_model
from edgeops.simulator.graph import simulate_graph

BOARDS_DIR = Path(__file__).parents[2] / "boards"


def toml(name):
    return tomllib.loads((BOARDS_DIR / f"{name}.toml").read_text())


@pytest.fixture(scope="module")
def fused():
    m, _ = run_passes(build_sample_model())
    return graph.load(m)


def test_jetson_node_pays_its_copies(fused):
    bw = toml("jetson-orin-nano")["gpu"]["host_device_bandwidth_bytes_per_s"]
    with_c = simulate_graph(fused, "jetson-orin-nano", {}, target="cuda", peer=False).to_dict()
    without = simulate_graph(fused, "jetson-orin-nano", {}, target="cuda", peer=False,
                             copies=False).to_dict()
    a = {r["node"]: r for r in with_c["nodes"]}
    b = {r["node"]: r for r in without["nodes"]}
    node = fused.node("mlp.gate")     # ai.edgeops SwiGLU: x 1x64x48, two 48x128 weights, fp32
    assert (node.domain, node.op_type) == ("ai.edgeops", "SwiGLU")
    assert [t.dtype for t in node.input_tensors + node.output_tensors] == ["fp32"] * 4
    nbytes = 4 * (64 * 48 + 2 * 48 * 128) + 4 * 64 * 128   # x and both weights in, out back
    assert a["mlp.gate"]["copy_bytes"] == nbytes
    assert a["mlp.gate"]["latency_s"] - b["mlp.gate"]["latency_s"] == pytest.approx(nbytes / bw)
    assert a["mlp.gate"]["copy_s"] == pytest.approx(nbytes / bw)
    assert b["mlp.gate"]["copy_s"] == 0.0
    # views copy nothing; totals carry the copies and include them in the latency
    for r in a.values():
        if r["model"] == "view":
            assert r["copy_s"] == 0.0 and r["latency_s"] == 0.0
        else:
            assert r["copy_s"] > 0
    assert with_c["copy_s"] == pytest.approx(sum(r["copy_s"] for r in a.values()))
    assert with_c["copy_bytes"] == sum(r["copy_bytes"] for r in a.values())
    assert with_c["total_latency_s"] - without["total_latency_s"] == pytest.approx(with_c["copy_s"])
    assert without["copy_s"] == 0.0


@pytest.mark.parametrize("board,target", [("jetson-orin-nano", "neon"), ("rk3588", None),
                                          ("ascend-910b", None)])
def test_no_copies_off_the_cuda_target(fused, board, target):
    d = simulate_graph(fused, board, {}, target=target, peer=False).to_dict()
    assert d["copy_s"] == 0.0 and all(r["copy_s"] == 0.0 for r in d["nodes"])
