"""Elementwise and row-wise ops vs ONNX Runtime (fp32) and onnx.reference (fp64)."""
import numpy as np
import pytest

from _ops_harness import check, erf64, rand
from edgeops.ops import get_op

BROADCASTS = [((7, 13), (7, 13)), ((2, 7, 13), (13,)), ((7, 1, 5), (3, 1)), ((1, 13), (7, 1)),
              ((5,), (2, 3, 5)), ((), (7, 5)), ((2, 1, 3, 1), (1, 5, 1, 4))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_binary_broadcast(rng, op, sa, sb):
    # divisors kept away from zero: the quotient stays well conditioned
    check(op, [rand(rng, *sa), rand(rng, *sb, lo=0.5)])


UNARY = [
    ("Relu", {}), ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.37}), ("Sigmoid", {}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}),
    ("Tanh", {}), ("Gelu", {"approximate": "tanh"}), ("Identity", {}), ("Dropout", {}),
]


@pytest.mark.parametrize("op,attrs", UNARY)
def test_unary(rng, op, attrs):
    # scaled so the saturating ops see both their flat and their curved parts
    x = rand(rng, 7, 13, 5) * 4
    check(op, [x], attrs)


def test_erf(rng):
    check("Erf", [rand(rng, 7, 13, 5) * 2], fp64=lambda x: [erf64(x)])


@pytest.mark.parametrize("attrs", [{}, {"approximate": "none"}])
def test_gelu_erf(rng, attrs):
    check("Gelu", [rand(rng, 7, 13, 5) * 4], attrs,
          fp64=lambda x: [0.5 * x * (1 + erf64(x / np.sqrt(2)))])


def test_gelu_tanh_float64_in_ort(rng):
    check("Gelu", [rand(rng, 7, 13, 5) * 4], {"approximate": "tanh"}, fp32="ref", fp64="ort")


def test_sigmoid_extremes(rng):
    x = np.concatenate([rand(rng, 13) * 60, [-89.0, 89.0, -750.0, -120.0, 120.0, 750.0]])
    check("Sigmoid", [x], fp64="ort")
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no overflow on the way
        y = get_op("Sigmoid").reference(x.astype(np.float32))
    assert y[-4:].tolist() == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.7), (None, 0.3), (-0.2, None), (None, None),
                                   (0.4, -0.4)])  # min > max: everything becomes max
def test_clip(rng, lo, hi):
    x = rand(rng, 7, 13)
    bound = [None if v is None else np.array(v) for v in (lo, hi)]
    check("Clip", [x, *bound])


@pytest.mark.parametrize("axis", [-1, 0, 1, -2, 2])
def test_softmax(rng, axis):
    check("Softmax", [rand(rng, 3, 7, 13) * 3], {"axis": axis})


def test_softmax_large_logits(rng):
    check("Softmax", [rand(rng, 5, 13) * 400])


def test_dropout_inference_with_ratio(rng):
    check("Dropout", [rand(rng, 7, 5), np.array(0.3)], fp32="ort", fp64="ref")
