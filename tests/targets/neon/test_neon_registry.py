"""Every neon kernel is registered with dtypes/predicates, and its registry adapter (the calling
convention the runtime uses) agrees with the op's reference."""
from dataclasses import dataclass, field

import numpy as np
import pytest

import edgeops.targets.neon  # noqa: F401  (registers the kernels)
from edgeops.ops import get_op
from edgeops.pipeline.targets import load_targets
from edgeops.registry import kernel_by_name, kernels

load_targets()

EXPECTED = {
    "Gemm", "MatMul", "Conv", "ai.edgeops::ConvBnAct", "ai.edgeops::SwiGLU", "LayerNormalization",
    "ai.edgeops::LayerNormGelu", "GroupNormalization", "ai.edgeops::GroupNormAct", "Softmax",
    "MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "Sigmoid", "Tanh", "HardSwish",
    "LeakyRelu", "HardSigmoid", "Gelu", "Clip", "Add", "Sub", "Mul", "Div", "QLinearConv",
    "QLinearMatMul",
}


@dataclass
class FakeNode:
    op_type: str
    domain: str = ""
    attrs: dict = field(default_factory=dict)
    input_dtypes: list = field(default_factory=list)
    input_shapes: list = field(default_factory=list)


def test_every_op_is_registered_for_neon():
    ops = {k.op for k in kernels(target="neon")}
    assert EXPECTED <= ops, EXPECTED - ops


def _conv_node(x, w, **attrs):
    full = get_op("Conv").parse_attrs(attrs)
    return FakeNode("Conv", attrs=full, input_dtypes=["fp32"] * 2, input_shapes=[x, w])


def test_conv_predicates_pick_the_decomposition():
    by = {k.name: k for k in kernels("Conv", "neon")}
    dw = _conv_node((1, 32, 56, 56), (32, 1, 3, 3), group=32, pads=(1, 1, 1, 1))
    assert by["neon.conv_depthwise"].applies(dw)[0]
    s2 = _conv_node((1, 16, 20, 20), (32, 16, 3, 3), strides=(2, 2))
    ok, why = by["neon.conv_winograd"].applies(s2)
    assert not ok and "stride 1" in why
    assert by["neon.conv_im2col"].applies(s2)[0]
    five = _conv_node((1, 16, 20, 20), (32, 16, 5, 5))
    assert "3x3" in by["neon.conv_winograd"].applies(five)[1]
    dyn = _conv_node(("N", 16, 20, 20), (32, 16, 3, 3))
    assert "static" in by["neon.conv_im2col"].applies(dyn)[1]
    assert not by["neon.conv_im2col"].applies(FakeNode("Conv", input_dtypes=["fp16"]))[0]


def _run(name, op, inputs, attrs=None, domain=""):
    od = get_op(op, domain)
    parsed = od.parse_attrs(attrs or {})
    got = kernel_by_name(name).fn(inputs, parsed)
    ref = od.reference(*[None if t is None else t.astype(np.float64) for t in inputs], **parsed)
    return got[0], ref


CASES = [
    ("neon.gemm_packed", "Gemm", [(7, 5), (7, 9), (9,)], {"transA": 1, "alpha": 0.5}, ""),
    ("neon.matmul_packed", "MatMul", [(2, 5, 6), (6, 3)], {}, ""),
    ("neon.conv_im2col", "Conv", [(1, 4, 9, 9), (6, 2, 3, 3), (6,)],
     {"group": 2, "pads": (1, 1, 1, 1), "strides": (2, 2)}, ""),
    ("neon.conv_winograd", "Conv", [(2, 3, 8, 7), (4, 3, 3, 3)], {"pads": (1, 1, 1, 1)}, ""),
    ("neon.conv_bn_act_depthwise", "ConvBnAct", [(1, 4, 8, 8), (4, 1, 3, 3), (4,)],
     {"group": 4, "activation": "relu6", "pads": (1, 1, 1, 1)}, "ai.edgeops"),
    ("neon.conv_bn_act_im2col", "ConvBnAct", [(1, 3, 7, 7), (5, 3, 3, 3), (5,)],
     {"activation": "clip", "clip_min": -0.25, "clip_max": 0.5}, "ai.edgeops"),
    ("neon.swiglu_fused", "SwiGLU", [(2, 3, 8), (8, 10), (8, 10), (10,), (10,)], {}, "ai.edgeops"),
    ("neon.layernorm_gelu", "LayerNormGelu", [(3, 16), (16,), (16,)], {"approximate": "tanh"},
     "ai.edgeops"),
    ("neon.groupnorm_act", "GroupNormAct", [(2, 6, 3, 3), (6,), (6,)],
     {"num_groups": 3, "activation": "silu"}, "ai.edgeops"),
    ("neon.softmax", "Softmax", [(3, 9)], {"axis": 0}, ""),
    ("neon.maxpool", "MaxPool", [(1, 2, 7, 7)], {"kernel_shape": (3, 3), "strides": (2, 2)}, ""),
    ("neon.avgpool", "AveragePool", [(1, 2, 7, 7)], {"kernel_shape": (2, 2)}, ""),
    ("neon.global_avgpool", "GlobalAveragePool", [(2, 3, 4, 5)], {}, ""),
    ("neon.leakyrelu", "LeakyRelu", [(4, 9)], {"alpha": 0.2}, ""),
    ("neon.hardsigmoid", "HardSigmoid", [(4, 9)], {}, ""),
    ("neon.gelu", "Gelu", [(4, 9)], {}, ""),
    ("neon.add", "Add", [(2, 3, 4), (3, 1)], {}, ""),
    ("neon.div", "Div", [(2, 3, 4), (4,)], {}, ""),
]


@pytest.mark.parametrize("name,op,shapes,attrs,domain", CASES, ids=[c[0] for c in CASES])
def test_adapters_match_references(rng, name, op, shapes, attrs, domain):
    inputs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    if op == "Div":
        inputs[1] = np.abs(inputs[1]) + 0.5
    got, ref = _run(name, op, inputs, attrs, domain)
    np.testing.assert_allclose(got, ref, rtol=3e-5, atol=3e-5)


def test_clip_adapter(rng):
    x = rng.standard_normal((3, 5), dtype=np.float32)
    fn = kernel_by_name("neon.clip").fn
    np.testing.assert_array_equal(fn([x, np.float32(-0.5), None], {})[0], np.maximum(x, -0.5))
    np.testing.assert_array_equal(fn([x, np.float32(1), np.float32(0)], {})[0],
                                  np.zeros_like(x))   # min > max: all become max


def _ort_one_node(op, feeds, **attrs):
    """ONNX Runtime and onnx.reference on one node; every input but the first is a constant
    (ONNX Runtime's exact int8 path for x86 hosts without VNNI needs constant weights, see
    edgeops.ort.EXACT_INT8)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    from edgeops.ort import exact_int8
    (first, x), *consts = feeds.items()
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    g = helper.make_graph([node], "q", [helper.make_tensor_value_info(
        first, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(m.SerializeToString(), exact_int8(ort.SessionOptions()),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {first: x})[0], ReferenceEvaluator(m).run(None, {first: x})[0]


def test_qlinear_adapters_match_onnxruntime(rng):
    """QLinearConv / QLinearMatMul through the registry are bit-exact with ONNX Runtime's own
    int8 kernels (same float32 multiplier, round half to even, saturate), full-range int8 weights
    included, and within one level of onnx.reference (which rounds its own multiplier)."""
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    x = rng.integers(0, 256, (2, 4, 7, 9), dtype=np.uint8)
    w = rng.integers(-127, 128, (6, 4, 3, 3), dtype=np.int8)
    feeds = {"x": x, "xs": f32(0.03), "xz": np.array(120, np.uint8), "w": w,
             "ws": rng.uniform(0.002, 0.01, 6).astype(np.float32), "wz": np.zeros(6, np.int8),
             "ys": f32(0.2), "yz": np.array(110, np.uint8),
             "b": rng.integers(-3000, 3000, 6, dtype=np.int32)}
    want, exact = _ort_one_node("QLinearConv", feeds, pads=[1, 0, 1, 2], strides=[1, 2])
    got = kernel_by_name("neon.qlinearconv").fn(list(feeds.values()),
                                                {"pads": (1, 0, 1, 2), "strides": (1, 2)})[0]
    np.testing.assert_array_equal(got, want)
    assert np.abs(got.astype(int) - exact).max() <= 1   # its multiplier is not float32's
    a = rng.integers(0, 256, (3, 17, 40), dtype=np.uint8)
    b = rng.integers(-127, 128, (40, 23), dtype=np.int8)
    feeds = {"a": a, "as": f32(0.05), "az": np.array(7, np.uint8), "b": b, "bs": f32(0.01),
             "bz": np.array(0, np.int8), "ys": f32(0.3), "yz": np.array(128, np.uint8)}
    want, exact = _ort_one_node("QLinearMatMul", feeds)
    got = kernel_by_name("neon.qlinearmatmul").fn(list(feeds.values()), {})[0]
    np.testing.assert_array_equal(got, want)
    assert np.abs(got.astype(int) - exact).max() <= 1   # its multiplier is not float32's
