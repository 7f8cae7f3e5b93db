"""INT8 kernels for the QDQ units of ``fuse_qdq`` (ai.edgeops::QConvBnAct / QMatMul) on the
emulated NPU: the Cube's int8 x int8 -> int32 path with the bias added by FixPipe.

The Cube multiplies signed int8 only, and pads an img2col window with 0; the INT8 convention
(:mod:`edgeops.ops.qarith`) has int8 or uint8 activations with any zero point ``zp``. So the
host shifts the quantized input to ``xs = xq - zs`` (``zs`` = 128 for uint8, 0 for int8: int8
again) and folds the shift back into the int32 bias, exactly:

    sum (xq - zp) * w  =  sum xs * w  +  (zs - zp) * sum w        (per output channel)

A padded window position must contribute ``(zp - zp) * w = 0``; the Cube's zero padding is
``xs = 0``, i.e. ``xq = zs``, which is right only when ``zp == zs``. Otherwise the host pads the
input with ``zp - zs`` and the Cube convolves without padding.

QuantizeLinear on the input and the requantisation / dequantisation of the int32 result run
on the host with :func:`edgeops.ops.qarith.finish`: FixPipe's quant step (``Epilogue.scale``)
is one float64 scale per tensor, and the convention needs a float32 multiplier per output
channel (bit-exactness against the op's integer reference depends on that float32 order).
"""
from __future__ import annotations

import numpy as np

from edgeops.errors import EdgeOpsError
from edgeops.ops import qarith
from edgeops.ops.conv import Conv
from edgeops.ops.conv_bn_act import ACTIVATIONS
from edgeops.registry import register_kernel
from edgeops.targets.ascend.conv import ConvGeom
from edgeops.targets.ascend.gemm import GemmGeom
from edgeops.targets.ascend.kernels import _conv_pred, _run
from edgeops.targets.ascend.lower import lower_conv, lower_gemm

T = "ascend"
SHIFT = {"uint8": 128, "int8": 0}    # xq - SHIFT[type] is int8 for either activation type


def _act(y, attrs):
    return ACTIVATIONS[attrs["activation"]][0](y, attrs["clip_min"], attrs["clip_max"])


def _operands(x, w, bias, attrs, prefix, what):
    """(xs int8, wq int8, the int32 bias with the zero-point shift folded in, zs, zp)."""
    try:
        wq, bq = qarith.int_weight(w, what), qarith.int_bias(bias)
    except EdgeOpsError as e:
        raise EdgeOpsError(f"ascend int8: {e}") from None
    qt, zp = attrs[f"{prefix}_type"], attrs[f"{prefix}_zero_point"]
    xq = qarith.quantize_input(x, attrs[f"{prefix}_scale"], zp, qt)
    zs = SHIFT[qt]
    xs = (xq.astype(np.int16) - zs).astype(np.int8)
    return xs, wq, bq, zs, zp


def _bias(bq, wsum, zs, zp, n):
    """int32 bias for the Cube's shifted product; None when it is all zero and none was given."""
    b = (zs - zp) * wsum.astype(np.int64) + (0 if bq is None else bq.astype(np.int64))
    if bq is None and zs == zp:
        return None
    if np.abs(b).max(initial=0) >= 1 << 31:
        raise EdgeOpsError("ascend int8: bias plus the zero-point correction overflows int32")
    return np.ascontiguousarray(np.broadcast_to(b, (n,)), np.int32)


@register_kernel("ai.edgeops::QConvBnAct", T, dtypes=("fp32",), predicate=_conv_pred,
                 name="ascend.qconv_bn_act_int8", priority=10)
def _qconv(inputs, attrs, tiling=None, board=None):
    """INT8 implicit-GEMM Conv2D on the Cube (int32 in L0C, bias on FixPipe); input
    quantisation and per-channel requantisation on the host."""
    x, w, w_scale = inputs[:3]
    b = inputs[3] if len(inputs) > 3 else None
    xs, wq, bq, zs, zp = _operands(x, w, b, attrs, "x", "W")
    begin, end, _, s, d = Conv.geometry(attrs, x.shape, w.shape)
    begin, end = tuple(begin), tuple(end)
    if zs != zp and any(begin + end):
        # the Cube pads with xs = 0 (xq = zs); the zero point (xs = zp - zs) is what 0.0 reads
        xs = np.pad(xs, ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])),
                    constant_values=zp - zs)
        begin = end = (0, 0)
    N, C, H, W = xs.shape
    K, _, R, S = wq.shape
    G = attrs["group"]
    g = ConvGeom(N, C, H, W, K, R, S, tuple(s), begin, end, tuple(d), G, "int8")
    gm = {"X": np.ascontiguousarray(xs), "W": np.ascontiguousarray(wq)}
    bias = _bias(bq, wq.reshape(K, -1).sum(axis=1), zs, zp, K)
    if bias is not None:
        gm["bias"] = bias
    spec = (f"conv2d:N={N},C={C},H={H},W={W},K={K},R={R},S={S},stride={s[0]},pad={begin[0]},"
            f"pad_end={end[0]},dilation={d[0]},groups={G},dtype=int8")
    acc = _run(lower_conv, spec, tiling, board, gm, g, out="int32",
               bias="bias" if bias is not None else None)
    return [qarith.finish(acc, 1, attrs, "x", w_scale, _act)]


def _qmatmul_pred(node):
    ws = node.input_shapes[1]
    return True if ws is not None and len(ws) == 2 else f"B must be 2-D, got {ws}"


@register_kernel("ai.edgeops::QMatMul", T, dtypes=("fp32",), predicate=_qmatmul_pred,
                 name="ascend.qmatmul_int8", priority=10)
def _qmatmul(inputs, attrs, tiling=None, board=None):
    """INT8 MatMul/Gemm on the Cube (A's leading axes flattened into M, B shared)."""
    a, b, b_scale = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    if a.shape[-1] != b.shape[0]:
        raise EdgeOpsError(f"ascend int8 matmul: A {a.shape} and B {b.shape} do not multiply")
    xs, bq, biq, zs, zp = _operands(a, b, bias, attrs, "a", "B")
    K, N = bq.shape
    a2 = xs.reshape(-1, K)
    M = a2.shape[0]
    gm = {"A": np.ascontiguousarray(a2)[None], "B": np.ascontiguousarray(bq)[None]}
    bb = _bias(biq, bq.sum(axis=0), zs, zp, N)
    if bb is not None:
        gm["bias"] = bb
    spec = f"gemm:M={M},N={N},K={K},dtype=int8" + (",bias=1" if bb is not None else "")
    acc = _run(lower_gemm, spec, tiling, board, gm, GemmGeom(M, N, K, dtype="int8"),
               out="int32", bias="bias" if bb is not None else None)[0]
    y = qarith.finish(acc, -1, attrs, "a", b_scale, lambda v, at: np.maximum(v, 0.0))
    return [y.reshape(a.shape[:-1] + (N,))]
