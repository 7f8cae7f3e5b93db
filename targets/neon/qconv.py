"""INT8 Conv2D and MatMul at the float boundary of QConvBnAct / QMatMul: quantise the input
(ONNX QuantizeLinear), int8 im2col (zero-point padding) + int16-pair GEMM with int32
accumulation (:mod:`edgeops.targets.neon.qgemm`), then requantise and dequantise per
:mod:`edgeops.ops.qarith`. With a quantized output the requantisation is qgemm's fused
per-channel pass; without one the int32 accumulators are scaled to float per channel.

Weights arrive as fp32 tensors holding int8 values (the bridge's fp32 contract); the int8
copy is made per call (one pass over the weights, small next to the GEMM).
"""
from __future__ import annotations

import numpy as np

from edgeops.errors import EdgeOpsError
from edgeops.ops import qarith
from edgeops.targets.neon.qgemm import PER_COL, PER_ROW, qconv2d, qgemm, requantize

# x_type / y_type names -> numpy dtypes
DT = {k: v[2] for k, v in qarith.QTYPES.items()}


def _prepare(w, bias, what):
    try:
        return qarith.int_weight(w, what), qarith.int_bias(bias)
    except Exception as e:  # noqa: BLE001  (an OpDefinitionError: the user's model)
        raise EdgeOpsError(f"neon int8: {e}") from None


def _finish_float(acc, axis, attrs, prefix, w_scale, act):
    """No output quantization: per-channel float scale, then the float activation."""
    return qarith.finish(acc, axis, attrs, prefix, w_scale, act)


def qconv_bn_act(x, w, w_scale, bias, g, attrs, act, tiling=None) -> np.ndarray:
    """QConvBnAct on NCHW fp32 ``x``; ``g`` its ConvGeom; ``act(y, attrs)`` the float
    activation (used only when the output is not quantized)."""
    wq, bq = _prepare(w, bias, "W")
    xq = qarith.quantize_input(x, attrs["x_scale"], attrs["x_zero_point"], attrs["x_type"])
    if attrs["y_scale"] == 0:
        acc = qconv2d(xq, attrs["x_zero_point"], wq, bq, g, tiling=tiling)
        return _finish_float(acc, 1, attrs, "x", w_scale, act)
    mult = qarith.multiplier(attrs["x_scale"], w_scale, attrs["y_scale"])
    yq = qconv2d(xq, attrs["x_zero_point"], wq, bq, g, mult, attrs["y_zero_point"],
                 DT[attrs["y_type"]], tiling=tiling)
    return qarith.dequantize_output(yq, attrs)


def qmatmul(a, b, b_scale, bias, attrs, tiling=None) -> np.ndarray:
    """QMatMul: A (..., K) fp32, B (K, N) fp32 holding int8; batched over A's leading axes."""
    if b.ndim != 2 or a.shape[-1] != b.shape[0]:
        raise EdgeOpsError(f"neon int8 matmul: A {a.shape} and B {b.shape} do not multiply")
    bq, biq = _prepare(b, bias, "B")
    aq = qarith.quantize_input(a, attrs["a_scale"], attrs["a_zero_point"], attrs["a_type"])
    a2 = aq.reshape(-1, a.shape[-1])
    acc = qgemm(a2, bq, a_zero_point=attrs["a_zero_point"], tiling=tiling)
    if attrs["y_scale"] == 0:
        if biq is not None:
            acc += biq.reshape(1, -1)
        y = _finish_float(acc, 1, attrs, "a", b_scale, lambda v, at: np.maximum(v, 0.0))
    else:
        mult = qarith.multiplier(attrs["a_scale"], b_scale, attrs["y_scale"])
        yq = requantize(acc, mult, attrs["y_zero_point"], DT[attrs["y_type"]], biq, PER_COL)
        y = qarith.dequantize_output(yq, attrs)
    return y.reshape(a.shape[:-1] + (b.shape[1],))


__all__ = ["qconv_bn_act", "qmatmul", "PER_ROW", "PER_COL"]
