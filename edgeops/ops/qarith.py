"""The INT8 arithmetic (docs/architecture.md) shared by the quantized ai.edgeops ops (QConvBnAct,
QMatMul), their kernels and the fusion pass: the one place the float boundary is defined.

Not an op (no ``@define_op``). The ops take and return fp32 at the ONNX Runtime boundary (the
Python custom-op bridge declares fp32 tensors only): the input is the float activation that
the model's QuantizeLinear read, the output is the float tensor its DequantizeLinear (or the
float node, when the output is not quantized) wrote. Inside, exactly as ONNX Q/DQ define:

    xq  = saturate(round_half_even(float32(x) / x_scale) + x_zero_point)       QuantizeLinear
    acc = sum (xq - x_zero_point) * w  +  bias                                 int32
    y_scale == 0 (output not quantized):
        y = activation(float32(acc) * float32(x_scale * w_scale[k]))           DequantizeLinear
    y_scale > 0 (a Q/DQ pair on the output):
        yq = saturate(round_half_even(float32(acc) * mult[k]) + y_zero_point)
        mult[k] = float32(float32(x_scale) * w_scale[k] / float32(y_scale))
        relu: yq = max(yq, y_zero_point)   (Q is monotonic, so Q(relu(v)) == max(Q(v), zp))
        y = float32(yq - y_zero_point) * y_scale

Weights are symmetric int8 (zero point 0) per output channel, the bias int32 at scale
x_scale * w_scale[k]; both travel as fp32 tensors holding those integers (exact: |w| <= 127,
|bias| < 2**24, which the fusion pass checks).
"""
from __future__ import annotations

import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops.base import Attr

QTYPES = {"int8": (-128, 127, np.int8), "uint8": (0, 255, np.uint8)}
BIAS_LIMIT = 1 << 24          # fp32 holds every integer below this exactly
REQUANT_ACTS = ("none", "relu")


def q_attrs(prefix_in: str) -> dict[str, Attr]:
    """Scale / zero point / type attributes of the input (``prefix_in``) and the output."""
    return {f"{prefix_in}_scale": Attr("float", check=lambda s: s > 0, help="scale > 0"),
            f"{prefix_in}_zero_point": Attr("int", 0),
            f"{prefix_in}_type": Attr("str", "int8", choices=tuple(QTYPES)),
            "y_scale": Attr("float", 0.0, check=lambda s: s >= 0,
                            help="0: output not quantized, else its scale"),
            "y_zero_point": Attr("int", 0),
            "y_type": Attr("str", "int8", choices=tuple(QTYPES))}


def validate_q(name: str, attrs: dict, prefix_in: str, where: str = "") -> None:
    at = f" in node {where!r}" if where else ""
    for p in (prefix_in, "y"):
        lo, hi, _ = QTYPES[attrs[f"{p}_type"]]
        if not lo <= attrs[f"{p}_zero_point"] <= hi:
            raise OpDefinitionError(f"{name}{at}: {p}_zero_point={attrs[f'{p}_zero_point']} is "
                                    f"outside {attrs[f'{p}_type']}")
    if attrs["y_scale"] > 0 and attrs["activation"] not in REQUANT_ACTS:
        raise OpDefinitionError(f"{name}{at}: activation {attrs['activation']!r} cannot follow a "
                                f"requantised output; only {', '.join(REQUANT_ACTS)}")


def quantize_input(x, scale: float, zero_point: int, qtype: str) -> np.ndarray:
    """ONNX QuantizeLinear, per tensor (float32 division, half to even, saturate)."""
    lo, hi, dt = QTYPES[qtype]
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + np.float32(zero_point)
    return np.clip(q, lo, hi).astype(dt)


def int_weight(w, what: str = "W") -> np.ndarray:
    """fp32 tensor of int8 values -> int8 (raises if it is not one)."""
    w = np.asarray(w)
    q = w.astype(np.int8)
    if not np.array_equal(q.astype(w.dtype), w):
        raise OpDefinitionError(f"{what} must hold integers in [-128, 127] (int8 weights carried "
                                f"as fp32)")
    return q


def int_bias(b) -> np.ndarray | None:
    if b is None or np.size(b) == 0:
        return None
    b = np.asarray(b)
    q = b.astype(np.int64)
    if not np.array_equal(q.astype(b.dtype), b) or np.abs(q).max(initial=0) >= BIAS_LIMIT:
        raise OpDefinitionError(f"bias must hold integers below 2**24 in magnitude (int32 bias "
                                f"carried as fp32)")
    return q.astype(np.int32)


def multiplier(in_scale: float, w_scale, y_scale: float) -> np.ndarray:
    return (np.float32(in_scale) * np.asarray(w_scale, np.float32).reshape(-1)
            / np.float32(y_scale)).astype(np.float32)


def finish(acc: np.ndarray, axis: int, attrs: dict, in_prefix: str, w_scale, act_fn) -> np.ndarray:
    """int32 accumulators (bias included) -> the fp32 output, channels along ``axis``.
    ``act_fn(y_float64, attrs)`` applies a float activation (output not quantized)."""
    shape = [1] * acc.ndim
    shape[axis] = -1
    s_in = np.float32(attrs[f"{in_prefix}_scale"])
    ws = np.asarray(w_scale, np.float32).reshape(shape)
    if attrs["y_scale"] == 0:
        y = acc.astype(np.float32) * (s_in * ws).astype(np.float32)
        if attrs["activation"] == "none":
            return y
        return act_fn(y.astype(np.float64), attrs).astype(np.float32)
    lo, hi, _ = QTYPES[attrs["y_type"]]
    zp = np.float32(attrs["y_zero_point"])
    m = multiplier(s_in, w_scale, attrs["y_scale"]).reshape(shape)
    yq = np.clip(np.rint(acc.astype(np.float32) * m) + zp, lo, hi)
    return dequantize_output(yq, attrs)


def dequantize_output(yq, attrs) -> np.ndarray:
    """Requantised output (any integer-valued array) -> fp32, the activation applied."""
    zp = np.float32(attrs["y_zero_point"])
    yq = np.asarray(yq, np.float32)
    if attrs["activation"] == "relu":
        yq = np.maximum(yq, zp)
    return ((yq - zp) * np.float32(attrs["y_scale"])).astype(np.float32)
