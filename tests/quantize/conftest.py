"""Shared fixtures: the sample model and a small conv net, with calibration batches."""
from __future__ import annotations

import numpy as np
import pytest


def small_convnet(seed: int = 1):
    """Conv-Relu-Conv(stride 2)-Relu-Conv-GlobalAveragePool-Flatten-Gemm, odd channel counts."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)

    def init(name, shape, scale=None):
        a = rng.standard_normal(shape) * (scale if scale is not None else np.sqrt(2.0 / np.prod(shape[1:])))
        return numpy_helper.from_array(a.astype(np.float32), name)

    inits = [init("c1.w", (12, 3, 3, 3)), init("c1.b", (12,), 0.1), init("c2.w", (20, 12, 3, 3)),
             init("c2.b", (20,), 0.1), init("c3.w", (24, 20, 1, 1)), init("fc.w", (7, 24)),
             init("fc.b", (7,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
        helper.make_node("Conv", ["r1", "c2.w", "c2.b"], ["c2"], name="c2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="r2"),
        helper.make_node("Conv", ["r2", "c3.w"], ["c3"], name="c3"),
        helper.make_node("GlobalAveragePool", ["c3"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "small_convnet",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 19, 17])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 7])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def batches_for(shape, n=8, seed=0):
    rng = np.random.default_rng(seed)
    return [{"image" if shape == (1, 3, 32, 32) else "x": rng.standard_normal(shape).astype(np.float32)}
            for _ in range(n)]


@pytest.fixture(scope="session")
def sample_model():
    from edgeops.sample import build_sample_model
    return build_sample_model()


@pytest.fixture(scope="session")
def sample_calib():
    return batches_for((1, 3, 32, 32))


@pytest.fixture(scope="session")
def convnet():
    return small_convnet()


@pytest.fixture(scope="session")
def convnet_calib():
    return batches_for((1, 3, 19, 17))
