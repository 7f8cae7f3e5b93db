"""The board a package was lowered for reaches the kernels: lowering writes a ``board``
attribute on each lowered node, ``edgeops.ort.prepare`` carries it into the dispatch JSON, and
dispatch passes ``board=`` to any kernel whose signature takes it (and to no other)."""
import json

import numpy as np
import pytest
from onnx import TensorProto, helper

import edgeops.ort as eort
from edgeops.pipeline.compile import compile_model
from edgeops.run import run_package
from edgeops.ort.dispatch import DISPATCH_ATTR
from edgeops.registry import register_kernel, unregister_kernel


def _pool_relu_model():
    g = helper.make_graph(
        [helper.make_node("AveragePool", ["x"], ["p"], name="pool", kernel_shape=[3, 3],
                          pads=[0, 0, 1, 1]),
         helper.make_node("Relu", ["p"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def test_a_310b_package_runs_the_310b_emulator(tmp_path, monkeypatch):
    import edgeops.targets.ascend.kernels as K
    from edgeops import boards
    pkg = tmp_path / "pkg"
    compile_model(_pool_relu_model(), "ascend-310b", pkg, mode="all", verify=False, plan=False)
    import onnx
    nodes = [n for n in onnx.load(str(pkg / "model.onnx")).graph.node if n.domain]
    assert nodes and all({a.name: a.s.decode() for a in n.attribute if a.name == "board"}
                         == {"board": "ascend-310b"} for n in nodes)
    assert K.BOARD == "ascend-910b"                # the module default is not what runs
    used = []
    real = K.machine
    monkeypatch.setattr(K, "machine", lambda b: used.append(boards.load(b).name) or real(b))
    res = run_package(pkg, runs=1)
    assert res["ok"], res["outputs"]
    assert used and set(used) == {"ascend-310b"}


@pytest.fixture
def two_relus():
    seen = {}

    @register_kernel("Relu", "cuda", name="test.relu_board", priority=99)
    def with_board(inputs, attrs, board=None):
        seen["with"] = board
        return [np.maximum(inputs[0], 0)]

    @register_kernel("Relu", "cuda", name="test.relu_plain", priority=98)
    def plain(inputs, attrs):
        seen["plain"] = True
        return [np.maximum(inputs[0], 0)]
    yield seen
    unregister_kernel("test.relu_board")
    unregister_kernel("test.relu_plain")


@pytest.mark.parametrize("kernel", ["test.relu_board", "test.relu_plain", ""])
def test_board_goes_to_kernels_that_take_it(two_relus, kernel):
    attrs = {"board": "jetson-orin-nano"} | ({"kernel": kernel} if kernel else {})
    node = helper.make_node("Relu", ["x"], ["y"], name="relu", domain="ai.edgeops", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    pm = eort.prepare(m, "cuda")
    spec = json.loads({a.name: a.s.decode() for a in pm.graph.node[0].attribute}[DISPATCH_ATTR])
    assert spec["board"] == "jetson-orin-nano" and "board" not in spec["attrs"]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    y = eort.session(m, target="cuda").run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    if kernel == "test.relu_plain":
        assert two_relus == {"plain": True}
    else:
        assert two_relus == {"with": "jetson-orin-nano"}
