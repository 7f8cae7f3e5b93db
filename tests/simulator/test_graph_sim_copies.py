"""The ai.edgeops ops run through ONNX Runtime's Python bridge, which copies. Jetson's CUDA
kernels get host arrays, so each node copies its inputs host->device and its outputs
device->host ((input + output bytes) / [gpu] host_device_bandwidth); a CPU kernel gets its
activation inputs as numpy copies and copies its outputs back (held constants do not cross)."""
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


def test_no_copies_on_an_npu(fused):
    d = simulate_graph(fused, "ascend-910b", {}, peer=False).to_dict()
    assert d["copy_s"] == 0.0 and all(r["copy_s"] == 0.0 for r in d["nodes"])


@pytest.mark.parametrize("board,target", [("jetson-orin-nano", "neon"), ("rk3588", None)])
def test_cpu_kernels_pay_their_bridge_copies(fused, board, target):
    """On a CPU target every kernel node pays its activations' copies through the bridge (views
    none), on a track of its own, and the totals carry them."""
    from edgeops import boards
    from edgeops.simulator.graph import BRIDGE_TRACK, bridge_copies
    b = boards.load(board)
    d = simulate_graph(fused, board, {}, target=target, peer=False).to_dict()
    without = simulate_graph(fused, board, {}, target=target, peer=False, copies=False).to_dict()
    for r in d["nodes"]:
        want = bridge_copies(fused.node(r["node"]), b, "neon")
        if r["model"] == "view":
            assert r["copy_s"] == 0.0
        else:
            assert want[1] > 0 and (r["copy_s"], r["copy_bytes"]) == pytest.approx(want)
    assert d["copy_s"] > 0 and without["copy_s"] == 0.0
    assert d["total_latency_s"] - without["total_latency_s"] == pytest.approx(d["copy_s"])


def _innermost_copy_bw(doc, working_set):
    """The TOML's cache path out of the smallest on-chip level that holds ``working_set``."""
    mems = sorted((m for m in doc["memory"] if not m["offchip"]), key=lambda m: m["size_bytes"])
    paths = {p["src"]: p["bandwidth_bytes_per_s"] for p in doc["path"] if p["engine"] == "cache"}
    for m in mems:
        if m["size_bytes"] >= working_set and m["name"] in paths:
            return paths[m["name"]]
    return paths[next(m["name"] for m in doc["memory"] if m["offchip"])]


@pytest.mark.parametrize("board", ["rpi5", "rk3588", "jetson-orin-nano"])
@pytest.mark.parametrize("rows", [5, 700, 9000])
def test_cpu_bridge_copies_activations_not_held_constants(board, rows):
    """A neon kernel called through the bridge copies each activation input into Python and each
    output back (constants are held in the process and do not cross); each copy reads and writes
    its bytes at the cache path of the level holding both."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from edgeops import boards
    from edgeops.simulator.graph import bridge_copies
    cols = 37
    w = numpy_helper.from_array(np.ones((rows, cols), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"], name="add_const"),
         helper.make_node("Add", ["s", "x"], ["y"], name="add_acts")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])], [w])
    m = graph.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]))
    doc, b = toml(board), boards.load(board)
    nb = rows * cols * 4
    one = 2 * nb / _innermost_copy_bw(doc, 2 * nb)
    s, n = bridge_copies(m.node("add_const"), b, "neon")
    assert n == 2 * nb and s == pytest.approx(2 * one)       # x in, s out; w held
    s, n = bridge_copies(m.node("add_acts"), b, "neon")
    assert n == 3 * nb and s == pytest.approx(3 * one)
    assert bridge_copies(m.node("add_acts"), boards.load("ascend-910b"), "ascend") == (0.0, 0)


def test_lowering_charges_the_bridge_copies_to_the_kernel():
    """rpi5 (predicted, uncalibrated): a lowered node's latency is its kernel's tuned prediction
    plus its bridge copies."""
    from edgeops import boards
    from edgeops.lower import lower
    from edgeops.simulator.graph import bridge_copies
    from edgeops.tiling import space_from_node, tune
    m = build_sample_model()
    fused = graph.load(run_passes(m)[0], check=False)
    b = boards.load("rpi5")
    checked = 0
    for p in lower(m, "rpi5", mode="all").lowered:
        n = fused.node(p.node)
        c, _ = bridge_copies(n, b, p.target)
        entry, _ = tune(space_from_node(n), b, target=p.target)
        assert c > 0 and p.latency_s == pytest.approx(entry["prediction"]["latency_s"] + c)
        checked += 1
    assert checked
