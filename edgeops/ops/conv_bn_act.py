"""ConvBnAct (ai.edgeops): convolution with folded BatchNorm and an activation."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops import _window as win
from edgeops.ops._common import at, sigmoid, wide
from edgeops.ops.base import EDGEOPS_DOMAIN, Attr, OpDef, define_op
from edgeops.ops.conv import Conv
from edgeops.ops.hard_swish import hard_swish

ACTIVATIONS = {  # name -> (float64 function of (y, lo, hi), FLOPs per output element)
    "none": (lambda y, lo, hi: y, 0),
    "relu": (lambda y, lo, hi: np.maximum(y, 0.0), 1),
    "relu6": (lambda y, lo, hi: np.minimum(np.maximum(y, 0.0), 6.0), 2),
    "clip": (lambda y, lo, hi: np.minimum(np.maximum(y, lo), hi), 2),
    "silu": (lambda y, lo, hi: y * sigmoid(y), 5),
    "hardswish": (lambda y, lo, hi: hard_swish(y), 5),
}


@define_op
class ConvBnAct(OpDef):
    """ConvBnAct (ai.edgeops, version 1): convolution with BatchNormalization already folded
    into its weights, then an activation.

    Inputs, in order: X (N, C, *D); W (K, C/group, *kernel) with BN folded per output channel,
    W = W_conv * scale / sqrt(var + eps); B (K), optional,
    B = (b_conv - mean) * scale / sqrt(var + eps) + bias. Attributes: those of Conv (auto_pad,
    kernel_shape, strides, dilations, pads, group) plus ``activation`` none | relu | relu6 |
    clip | silu | hardswish; ``clip_min``/``clip_max`` bound clip (relu6 is clip 0..6 and
    ignores them).
    """
    name = "ConvBnAct"
    domain = EDGEOPS_DOMAIN
    min_inputs, max_inputs = 2, 3
    attrs = {**Conv.attrs, "activation": Attr("str", "none", choices=tuple(ACTIVATIONS)),
             "clip_min": Attr("float", -np.inf), "clip_max": Attr("float", np.inf)}

    @classmethod
    def validate(cls, attrs, where=""):
        win.validate(cls.qualname(), attrs, where)
        if attrs["activation"] == "clip" and attrs["clip_min"] > attrs["clip_max"]:
            raise OpDefinitionError(f"{cls.qualname()}{at(where)}: clip_min={attrs['clip_min']} "
                                    f"exceeds clip_max={attrs['clip_max']}")

    @classmethod
    def shape(cls, attrs, shapes):
        return Conv.shape(attrs, shapes)

    @classmethod
    def reference(cls, x, w, b=None, *, activation, clip_min, clip_max, **conv_attrs):
        # conv in float64 and the activation on that, so the result is rounded once
        y = Conv.reference(wide(x), wide(w), None if b is None else wide(b), **conv_attrs)
        return ACTIVATIONS[activation][0](y, clip_min, clip_max).astype(x.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        macs, flops = Conv.cost(attrs, in_shapes, out_shapes)
        n = int(np.prod(out_shapes[0]))
        return macs, flops + ACTIVATIONS[attrs["activation"]][1] * n
