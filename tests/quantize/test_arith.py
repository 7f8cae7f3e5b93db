"""The INT8 arithmetic against an integer reference written here (the specification in
edgeops.ops.qarith): QuantizeLinear = saturate(round_half_even(x / scale) + zero_point),
DequantizeLinear = (q - zero_point) * scale, symmetric per-channel int8 weights, int32 bias at s_in * s_w."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeops.quantize.observers import (activation_qparams, dequantize, quantize, quantize_bias,
                                        quantize_weight)


def ref_quantize(x, scale, zp, qmin, qmax):
    """Python integers: x / scale in float32 (as QuantizeLinear), round half to even, saturate."""
    out = []
    for v, s, z in zip(np.ravel(x), np.ravel(np.broadcast_to(scale, np.shape(x))),
                       np.ravel(np.broadcast_to(zp, np.shape(x)))):
        r = float(np.float32(v) / np.float32(s))
        q = round(r) + int(z)          # Python's round: half to even
        out.append(min(max(q, qmin), qmax))
    return np.array(out, np.int64).reshape(np.shape(x))


def _inputs(rng, shape, scale):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    # exact ties k + 0.5 (scale is a power of two) and values far out of range
    x.flat[:8] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e4, -1e4], np.float32) * scale
    return x


@pytest.mark.parametrize("qtype,qmin,qmax", [("int8", -128, 127), ("uint8", 0, 255)])
def test_quantize_per_tensor_bit_exact(qtype, qmin, qmax):
    rng = np.random.default_rng(3)
    s = np.float32(2.0 ** -5)
    x = _inputs(rng, (5, 37), s)
    zp = 3 if qtype == "int8" else 131
    ref = ref_quantize(x, s, zp, qmin, qmax)
    np.testing.assert_array_equal(quantize(x, s, zp, qmin, qmax).astype(np.int64), ref)
    # stock ONNX Runtime's QuantizeLinear agrees with the reference too
    zdt = TensorProto.INT8 if qtype == "int8" else TensorProto.UINT8
    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                           helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])], "q",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("q", zdt, list(x.shape)),
                           helper.make_tensor_value_info("d", TensorProto.FLOAT, list(x.shape))],
                          [numpy_helper.from_array(np.array(s, np.float32), "s"),
                           helper.make_tensor("z", zdt, [], [zp])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    q, d = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(q.astype(np.int64), ref)
    np.testing.assert_array_equal(dequantize(q, s, zp), d)
    np.testing.assert_array_equal(d, ((ref - zp) * np.float64(s)).astype(np.float32))


def test_weights_symmetric_per_channel_bit_exact():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    w[2] *= 100                                   # channels with very different ranges
    q, s, z = quantize_weight(w, axis=0)
    assert q.dtype == np.int8 and z.dtype == np.int8 and not z.any()
    for c in range(6):
        amax = np.abs(w[c]).max()
        assert s[c] == np.float32(amax / 127)
        np.testing.assert_array_equal(q[c].astype(np.int64), ref_quantize(w[c], s[c], 0, -127, 127))
    assert np.abs(q).max() == 127 and q.min() >= -127
    # MatMul weights (K, N): output channels on the last axis
    w2 = rng.standard_normal((7, 9)).astype(np.float32)
    q2, s2, _ = quantize_weight(w2, axis=1)
    assert s2.shape == (9,)
    np.testing.assert_array_equal(q2.astype(np.int64), ref_quantize(w2, np.broadcast_to(s2, w2.shape), 0, -127, 127))


def test_bias_int32_scale_is_input_times_weight_scale():
    rng = np.random.default_rng(5)
    b = rng.standard_normal(11).astype(np.float32)
    s_in, s_w = np.float32(0.02), (rng.uniform(0.001, 0.01, 11)).astype(np.float32)
    q, s = quantize_bias(b, s_in, s_w)
    assert q.dtype == np.int32
    np.testing.assert_array_equal(s, (s_in * s_w).astype(np.float32))
    np.testing.assert_array_equal(q, [round(float(v) / float(sc)) for v, sc in zip(b, s)])


@pytest.mark.parametrize("qtype", ["int8", "uint8"])
def test_activation_qparams_represent_zero_exactly(qtype):
    for lo, hi in [(-1.3, 4.1), (0.2, 3.0), (-5.0, -0.1), (0.0, 0.0)]:
        s, z = activation_qparams(lo, hi, qtype)
        qmin, qmax = (-128, 127) if qtype == "int8" else (0, 255)
        assert qmin <= z <= qmax and s > 0
        assert dequantize(quantize(np.float32(0), s, z, qmin, qmax), s, z) == 0
        if hi > lo:    # the ends of the range (with 0) are representable within half a step
            for v in (min(lo, 0), max(hi, 0)):
                assert abs(float(dequantize(quantize(np.float32(v), s, z, qmin, qmax), s, z)) - v) <= s * 0.5001
