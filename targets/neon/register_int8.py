"""INT8 kernels for the QDQ units the ``fuse_qdq`` pass makes (ai.edgeops::QConvBnAct,
ai.edgeops::QMatMul), registered under target "neon". The registry's dtype is the node's
boundary dtype: fp32 in, fp32 out; int8 lives inside (see :mod:`edgeops.ops.qarith`)."""
from __future__ import annotations

from edgeops.ops.conv_bn_act import ACTIVATIONS
from edgeops.registry import register_kernel
from edgeops.targets.neon.qconv import qconv_bn_act, qmatmul
from edgeops.targets.neon.register import _im2col_pred

T = "neon"


def _act(y, attrs):
    return ACTIVATIONS[attrs["activation"]][0](y, attrs["clip_min"], attrs["clip_max"])


def _qmatmul_pred(node):
    ws = node.input_shapes[1]
    if ws is None or len(ws) != 2:
        return f"B must be a 2-D constant, got {ws}"
    return True


@register_kernel("ai.edgeops::QConvBnAct", T, dtypes=("fp32",), predicate=_im2col_pred,
                 name="neon.qconv_bn_act_int8", priority=10)
def _qconv(inputs, attrs, tiling=None, state=None):
    """INT8 Conv2D (+act): quantise, im2col + int16-pair GEMM, int32 acc, requantise."""
    x, w, ws = inputs[:3]
    b = inputs[3] if len(inputs) > 3 else None
    return [qconv_bn_act(x, w, ws, b, attrs, _act, tiling, state)]


@register_kernel("ai.edgeops::QMatMul", T, dtypes=("fp32",), predicate=_qmatmul_pred,
                 name="neon.qmatmul_int8", priority=10)
def _qmm(inputs, attrs, tiling=None, state=None):
    """INT8 MatMul/Gemm (+relu): quantise, int16-pair GEMM, int32 acc, requantise."""
    a, b, bs = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    return [qmatmul(a, b, bs, bias, attrs, tiling, state)]
