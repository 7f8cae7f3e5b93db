"""Iteration spaces built from graph nodes (attributes, shapes, dtypes), or the reason there is none."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from edgeops import graph  # noqa: E402
from edgeops.tiling import Space, space_from_node  # noqa: E402


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in outputs],
                          [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel()) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return graph.load(m)


def _spaces(g):
    return {n.op_type: space_from_node(n) for n in g.nodes}


def test_conv_gemm_matmul_softmax_pool(rng):
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((10, 8 * 7 * 7)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 0, 1, 1], strides=[2, 2]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[1, 1]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
             helper.make_node("Softmax", ["y"], ["s"]),
             helper.make_node("MatMul", ["a", "b"], ["mm"])]
    g = _model(nodes, [("x", [1, 3, 17, 17]), ("a", [4, 5, 6]), ("b", [6, 7])], ["s", "mm"],
               [("w", w), ("fc", fc)])
    sp = _spaces(g)
    conv = sp["Conv"]
    assert isinstance(conv, Space) and conv["pad"] == 0 and conv["pad_end"] == 1 and conv["stride"] == 2
    assert conv.conv_out == (8, 8)
    assert sp["MaxPool"]["R"] == 2 and sp["MaxPool"]["mode"] == "max"
    assert (sp["Gemm"]["M"], sp["Gemm"]["N"], sp["Gemm"]["K"]) == (1, 10, 392)
    assert (sp["Softmax"]["M"], sp["Softmax"]["D"]) == (1, 10)
    mm = sp["MatMul"]
    assert (mm["B"], mm["M"], mm["N"], mm["K"], mm["bshared"]) == (4, 5, 7, 6, 1)
    assert "no iteration space" in sp["Flatten"]


def test_norms_and_elementwise():
    nodes = [helper.make_node("InstanceNormalization", ["x", "sc", "bi"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"]),
             helper.make_node("LayerNormalization", ["y", "g"], ["l"], axis=2)]
    g = _model(nodes, [("x", [2, 4, 3, 5])], ["l"],
               [("sc", np.ones(4, np.float32)), ("bi", np.zeros(4, np.float32)),
                ("g", np.ones((3, 5), np.float32))])
    sp = _spaces(g)
    assert sp["InstanceNormalization"]["groups"] == 4 and sp["InstanceNormalization"]["H"] == 15
    assert sp["Relu"]["numel"] == 120 and sp["Relu"]["inputs"] == 1
    assert sp["Add"]["inputs"] == 2
    assert (sp["LayerNormalization"]["M"], sp["LayerNormalization"]["D"]) == (8, 15)


def test_one_d_conv_has_no_space(rng):
    w = rng.standard_normal((4, 2, 3)).astype(np.float32)
    g = _model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", [1, 2, 10])], ["y"], [("w", w)])
    assert "only 2-D convolutions" in space_from_node(g.nodes[0])
