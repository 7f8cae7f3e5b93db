"""QConvBnAct (ai.edgeops): INT8 convolution (+ activation) at a float boundary."""
import numpy as np

from edgeops.ops import qarith
from edgeops.ops.base import EDGEOPS_DOMAIN, OpDef, define_op
from edgeops.ops.conv import Conv
from edgeops.ops.conv_bn_act import ACTIVATIONS, ConvBnAct


@define_op
class QConvBnAct(OpDef):
    """QConvBnAct (ai.edgeops, version 1): a QDQ Conv unit (DequantizeLinear on input, weight
    and bias -> Conv [-> Relu] [-> QuantizeLinear -> DequantizeLinear]) as one int8 op.

    Inputs, in order: X (N, C, H, W) fp32, the float activation the input QuantizeLinear read;
    W (K, C/group, R, S) fp32 holding symmetric int8 values; W_scale (K) fp32; B (K) fp32
    holding int32 values at scale x_scale * W_scale, optional. Output: fp32, what the unit's last
    DequantizeLinear (or the Conv, with no output Q/DQ) wrote. Attributes: those of Conv, the
    ``activation`` of ConvBnAct (only none/relu with a quantized output), ``x_scale``,
    ``x_zero_point``, ``x_type`` and ``y_scale`` (0: output not quantized), ``y_zero_point``,
    ``y_type``. Arithmetic: :mod:`edgeops.ops.qarith`.
    """
    name = "QConvBnAct"
    domain = EDGEOPS_DOMAIN
    min_inputs, max_inputs = 3, 4
    attrs = {**ConvBnAct.attrs, **qarith.q_attrs("x")}

    @classmethod
    def validate(cls, attrs, where=""):
        ConvBnAct.validate(attrs, where)
        qarith.validate_q(cls.qualname(), attrs, "x", where)

    @classmethod
    def shape(cls, attrs, shapes):
        return Conv.shape(attrs, shapes)

    @classmethod
    def reference(cls, x, w, w_scale, b=None, **attrs):
        """Integer reference: int64 window sums of (xq - zp) * w, then qarith.finish."""
        xq = qarith.quantize_input(x, attrs["x_scale"], attrs["x_zero_point"], attrs["x_type"])
        conv = {k: attrs[k] for k in Conv.attrs}
        # float64 holds these integer sums exactly (|term| < 2**15, far fewer than 2**37 terms)
        acc = Conv.reference(xq.astype(np.float64) - attrs["x_zero_point"],
                             qarith.int_weight(w).astype(np.float64), None, **conv)
        acc = acc.astype(np.int64)
        bias = qarith.int_bias(b)
        if bias is not None:
            acc = acc + bias.reshape(1, -1, *[1] * (acc.ndim - 2))
        return qarith.finish(acc.astype(np.int32), 1, attrs, "x", w_scale, _act)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        return ConvBnAct.cost(attrs, in_shapes[:2], out_shapes)


def _act(y, attrs):
    return ACTIVATIONS[attrs["activation"]][0](y, attrs["clip_min"], attrs["clip_max"])
