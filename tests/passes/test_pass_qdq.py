"""fuse_qdq: QDQ units (edgeops' export, with and without output Q/DQ, and ONNX Runtime's
quantize_static output) become QConvBnAct / QMatMul; ORT on the QDQ model before vs ORT +
edgeops.ort after (reference and neon kernels), and the node count drops."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import edgeops.ort as eort
from edgeops.passes import run_passes
from edgeops.quantize import quantize_model
from edgeops.quantize.peer import ort_quantize
from edgeops.quantize.qdq import prepare


def small_net(seed=3):
    """Conv-Relu-Conv(stride 2, odd channels)-SiLU-Conv-Flatten-MatMul-Gemm, ragged sizes."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                                       .astype(np.float32), name)
    inits = [w("w1", 7, 3, 3, 3), w("b1", 7), w("w2", 11, 7, 3, 3), w("w3", 5, 11, 1, 1),
             w("m", 5 * 5 * 3, 13), w("g", 9, 13), w("gb", 9)]
    N = helper.make_node
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"]),
             N("Conv", ["r1", "w2"], ["c2"], pads=[1, 0, 1, 0], strides=[2, 2]),
             N("Sigmoid", ["c2"], ["s2"]), N("Mul", ["c2", "s2"], ["a2"]),
             N("Conv", ["a2", "w3"], ["c3"]), N("Flatten", ["c3"], ["f"]),
             N("MatMul", ["f", "m"], ["mm"]), N("Gemm", ["mm", "g", "gb"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "qnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 9])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _calib(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 9, 7)).astype(np.float32)} for _ in range(n)]


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.fixture(scope="module")
def net():
    return prepare(small_net())


@pytest.mark.parametrize("source", ["edgeops", "edgeops+outputs", "onnxruntime"])
@pytest.mark.parametrize("act", ["int8", "uint8"])
def test_fused_equals_qdq_in_ort(net, source, act):
    calib = _calib()
    if source == "onnxruntime":
        q = ort_quantize(net, calib, "minmax", activation_type=act)
    else:
        q, _ = quantize_model(net, calib, activation_type=act,
                              quantize_outputs=source.endswith("outputs"))
    fused, rep = run_passes(q, ["fuse_qdq"])
    made = [f.result for f in rep.fusions]
    assert made.count("ai.edgeops::QConvBnAct") == 3 and made.count("ai.edgeops::QMatMul") == 2
    assert rep.nodes_after < rep.nodes_before
    assert not any(n.op_type in ("Conv", "MatMul", "Gemm") for n in fused.graph.node)
    feeds = _calib(3, seed=11)        # held-out inputs: ranges are exceeded and saturate
    for target in ("reference", "neon"):
        s = eort.session(fused, target=target)
        for f in feeds:
            want, got = _ort(q, f), s.run(None, f)[0]
            # the output Gemm's Q/DQ (when quantized) has step y_scale; float outputs agree to
            # fp32 summation order: ORT sums float products, the kernel exact integers
            scales = [t for t in q.graph.initializer if t.name.startswith(("y_scale", "y_"))]
            step = max((float(onnx.numpy_helper.to_array(t)) for t in scales
                        if onnx.numpy_helper.to_array(t).size == 1), default=0.0)
            tol = max(step, 1e-5 * float(np.abs(want).max()))
            np.testing.assert_allclose(got, want, rtol=0, atol=tol * 1.001)


def test_requantised_unit_is_within_one_step_of_ort(net):
    """The first Conv unit with output Q/DQ (and the Relu after it): every element within one
    output step of ORT's QDQ run, and most equal (the kernel rounds float32(acc) * multiplier
    once where ORT rounds the float conv and then its division by the scale)."""
    from edgeops.quantize.qdq import with_outputs
    q, _ = quantize_model(net, _calib(), quantize_outputs=True)
    fused, _ = run_passes(q, ["fuse_qdq"])
    names = ["r1"]
    f = _calib(1, seed=5)[0]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(with_outputs(q, names).SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(names, f)[0]
    got = eort.session(with_outputs(fused, names), target="neon").run(names, f)[0]
    step = float(onnx.numpy_helper.to_array(next(t for t in q.graph.initializer
                                                  if t.name == "c1_scale")))
    diff = np.abs(got - want) / step
    assert diff.max() <= 1.0 + 1e-4 and (diff < 1e-3).mean() > 0.95


def test_unfusable_units_are_left_alone(net):
    """A bias beyond fp32's exact integers, or per-tensor weight zero points != 0, stay QDQ."""
    q, _ = quantize_model(net, _calib())
    m = onnx.ModelProto()
    m.CopyFrom(q)
    for t in m.graph.initializer:
        if t.name.endswith("_quantized") and t.data_type == onnx.TensorProto.INT32:
            a = onnx.numpy_helper.to_array(t).copy()
            a[0] = 1 << 25
            t.CopyFrom(onnx.numpy_helper.from_array(a, t.name))
    fused, rep = run_passes(m, ["fuse_qdq"])
    assert len(rep.fusions) == 5 - sum(1 for t in m.graph.initializer
                                       if t.name.endswith("_quantized") and t.data_type == onnx.TensorProto.INT32)
    want = _ort(m, _calib(1)[0])
    np.testing.assert_allclose(eort.session(fused).run(None, _calib(1)[0])[0], want, rtol=0,
                               atol=1e-5 * np.abs(want).max())
