"""Attribute and input validation: every refusal is an OpDefinitionError that names the values."""
import numpy as np
import pytest

from edgeops.errors import OpDefinitionError
from edgeops.ops import EDGEOPS_DOMAIN, all_ops, get_op

X = np.ones((1, 6, 7, 5), np.float32) * 0.5
W3 = np.ones((4, 3, 3, 3), np.float32)

STANDARD = ["Add", "AveragePool", "BatchNormalization", "Clip", "Concat", "Conv", "Div", "Dropout",
            "Erf", "Flatten", "Gelu", "Gemm", "GlobalAveragePool", "GroupNormalization",
            "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization", "LayerNormalization",
            "LeakyRelu", "MatMul", "MaxPool", "Mul", "Relu", "Reshape", "Resize", "Sigmoid",
            "Softmax", "Split", "Sub", "Tanh", "Transpose"]
FUSED = ["ConvBnAct", "GroupNormAct", "LayerNormGelu", "SwiGLU"]


def test_every_op_is_defined():
    names = {(o.domain, o.name) for o in all_ops()}
    assert {("", n) for n in STANDARD} | {(EDGEOPS_DOMAIN, n) for n in FUSED} <= names
    for n in FUSED:
        assert get_op(n, EDGEOPS_DOMAIN).__doc__.count("Inputs, in order")  # layout is written down


def run(op, inputs, attrs, domain=""):
    return get_op(op, domain).run(inputs, attrs)


@pytest.mark.parametrize("op,inputs,attrs,match", [
    ("Conv", [X, np.ones((4, 4, 3, 3), np.float32)], {"group": 4}, r"group=4 .*C=6"),
    ("Conv", [X, W3], {"group": 3}, r"group=3 does not fit C=6"),
    ("Conv", [X, np.ones((4, 6, 3, 3), np.float32)], {"kernel_shape": [2, 2]},
     r"kernel_shape=\[2, 2\] does not match .*\[3, 3\]"),
    ("Conv", [X, W3], {"group": 2, "strides": [1, 1, 1]},
     r"2 spatial axes but strides=\[1, 1, 1\]"),
    ("Conv", [X, W3], {"group": 2, "strides": [1, 1], "dilations": [1]}, r"disagree"),
    ("Conv", [X, np.ones((4, 6, 9, 3), np.float32)], {}, r"window 9 .* extent 7"),
    ("Conv", [X, W3], {"group": 2, "auto_pad": "SAME_UPPER", "pads": [1, 1, 1, 1]},
     r"auto_pad=SAME_UPPER and explicit pads"),
    ("Conv", [X], {}, r"takes 2\.\.3 inputs, got 1"),
    ("MatMul", [np.ones((7, 13)), np.ones((12, 5))], {}, r"K=13.*K=12"),
    ("Add", [np.ones((7, 13)), np.ones((7, 5))], {}, r"\(7, 13\), \(7, 5\)\] do not broadcast"),
    ("Softmax", [np.ones((7, 13))], {"axis": 2}, r"axis=2 is out of range .* -2\.\.1"),
    ("Flatten", [np.ones((7, 13))], {"axis": -3}, r"axis=-3"),
    ("Reshape", [np.ones((2, 3)), np.array([-1, -1])], {}, r"at most one -1"),
    ("Reshape", [np.ones((2, 3)), np.array([4, 2])], {}, r"6 elements.*\[4, 2\]"),
    ("Reshape", [np.ones((2, 3)), np.array([0, -1])], {"allowzero": 1}, r"both 0 and -1"),
    ("Split", [np.ones((2, 7)), np.array([3, 3])], {"axis": 1}, r"\[3, 3\] do not cut .* 7"),
    ("Split", [np.ones((2, 7)), np.array([3, 4])], {"axis": 1, "num_outputs": 2},
     r"exactly one of"),
    ("Split", [np.ones((2, 5))], {"axis": 1, "num_outputs": 4}, r"\[2, 2, 2, -1\]"),
    ("Concat", [np.ones((2, 3)), np.ones((3, 3))], {"axis": 1}, r"differ outside axis 1"),
    ("Transpose", [np.ones((2, 3, 4))], {"perm": [0, 1]}, r"perm=\[0, 1\] does not fit"),
    ("MaxPool", [X], {"kernel_shape": [3, 3], "pads": [1, 1, 1]}, r"2 entries per spatial axis"),
    ("AveragePool", [X], {"kernel_shape": [3, 3], "auto_pad": "VALID", "pads": [0, 1, 0, 1]},
     r"cannot be used together"),
    ("GroupNormalization", [X, np.ones(6), np.ones(6)], {"num_groups": 4},
     r"num_groups=4 must divide .*C"),
    ("GroupNormalization", [X, np.ones(5), np.ones(5)], {"num_groups": 3},
     r"C=6 entries .* num_groups=3"),
    ("LayerNormalization", [X, np.ones(4)], {}, r"\(4,\) do not broadcast to .*\(5,\)"),
    ("BatchNormalization", [X] + [np.ones(5)] * 4, {}, r"shape \(C,\) = \(6,\)"),
    ("Clip", [X, np.ones(2), None], {}, r"scalars"),
    ("Dropout", [X, np.array(0.5), np.array(True)], {}, r"training_mode=True"),
    ("Resize", [X, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"},
     r"mode='linear'.* supported: mode 'nearest'"),
    ("Resize", [X, None, np.array([1, 1, 2, 2], np.float32)],
     {"coordinate_transformation_mode": "tf_crop_and_resize"}, r"tf_crop_and_resize"),
    ("Resize", [X, None, np.array([1, 1, 2, 2], np.float32), np.array([1, 6, 9, 9])], {},
     r"exactly one of scales and sizes"),
    ("Resize", [X, None, np.array([2, 2], np.float32)], {}, r"one entry per resized axis"),
])
def test_refusals(op, inputs, attrs, match):
    with pytest.raises(OpDefinitionError, match=match):
        run(op, inputs, attrs)


@pytest.mark.parametrize("op,attrs,match", [
    ("Conv", {"auto_pad": "SAME"}, r"'auto_pad'='SAME' is not one of"),
    ("Conv", {"dilation": [1, 1]}, r"unknown attribute\(s\) \['dilation'\]"),
    ("Conv", {"strides": [0, 1]}, r"'strides'=\(0, 1\) is invalid \(every entry must be >= 1\)"),
    ("Conv", {"group": 1.5}, r"'group' must be int"),
    ("MaxPool", {}, r"required attribute 'kernel_shape' is missing"),
    ("Concat", {}, r"required attribute 'axis'"),
    ("GroupNormalization", {"num_groups": 0}, r"num_groups >= 1"),
    ("Gelu", {"approximate": "fast"}, r"'approximate'='fast' is not one of \['none', 'tanh'\]"),
    ("Transpose", {"perm": [0, 2, 2]}, r"perm=\[0, 2, 2\] is not a permutation"),
    ("BatchNormalization", {"training_mode": 1}, r"training_mode=1 is not supported"),
    ("Resize", {"mode": "bicubic"}, r"'mode'='bicubic' is not one of"),
])
def test_attribute_errors(op, attrs, match):
    with pytest.raises(OpDefinitionError, match=match):
        get_op(op).parse_attrs(attrs, where="node_7")
    with pytest.raises(OpDefinitionError, match="node_7"):  # the node is named
        get_op(op).parse_attrs(attrs, where="node_7")


@pytest.mark.parametrize("op,inputs,attrs,match", [
    ("ConvBnAct", [X, W3], {"group": 2, "activation": "clip", "clip_min": 2.0, "clip_max": 1.0},
     r"clip_min=2.0 exceeds clip_max=1.0"),
    ("ConvBnAct", [X, W3], {"activation": "gelu"}, r"'activation'='gelu' is not one of"),
    ("ConvBnAct", [X, W3], {}, r"group=1 does not fit C=6"),
    ("SwiGLU", [np.ones((7, 13)), np.ones((13, 5)), np.ones((13, 6))], {},
     r"W1 \(13, 5\), W2 \(13, 6\)"),
    ("SwiGLU", [np.ones((7, 13)), np.ones((12, 5)), np.ones((12, 5))], {}, r"X \(7, 13\)"),
    ("SwiGLU", [np.ones((7, 13)), np.ones((13, 5)), np.ones((13, 5)), np.ones(4)], {},
     r"biases \[\(4,\)\]"),
    ("GroupNormAct", [X, np.ones(3), np.ones(3)], {"num_groups": 3},
     r"Scale, Bias of shape \(C,\)"),
    ("GroupNormAct", [X, np.ones(6), np.ones(6)], {"num_groups": 4}, r"num_groups=4"),
    ("LayerNormGelu", [X, np.ones(5)], {"approximate": "erf"}, r"'approximate'='erf'"),
])
def test_fused_refusals(op, inputs, attrs, match):
    with pytest.raises(OpDefinitionError, match=match):
        run(op, inputs, attrs, EDGEOPS_DOMAIN)


@pytest.mark.parametrize("op,shapes,name", [("Reshape", [(2, 3), (2,)], "shape"),
                                            ("Resize", [(1, 3, 4, 4), None, (4,)], "scales"),
                                            ("Split", [(2, 6), (2,)], "split")])
def test_value_dependent_shapes_need_values(op, shapes, name):
    od = get_op(op)
    with pytest.raises(OpDefinitionError, match=f"depends? on the value of input '{name}'"):
        od.shape(od.parse_attrs({}), shapes)


def test_value_dependent_shapes_with_values():
    assert get_op("Reshape").shape({"allowzero": 0}, [(2, 3, 4), (2,)],
                                   values=[None, np.array([0, -1])]) == [(2, 12)]
    assert get_op("Split").shape({"axis": 1, "num_outputs": None}, [(2, 6), (2,)],
                                 values=[None, np.array([2, 4])]) == [(2, 2), (2, 4)]
