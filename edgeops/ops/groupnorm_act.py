"""GroupNormAct (ai.edgeops): GroupNormalization followed by an optional SiLU."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import sigmoid
from edgeops.ops.base import EDGEOPS_DOMAIN, Attr, OpDef, define_op, required
from edgeops.ops.groupnorm import group_norm


@define_op
class GroupNormAct(OpDef):
    """GroupNormAct (ai.edgeops, version 1): Y = act(GroupNormalization(X, Scale, Bias)), act none |
    silu (silu(z) = z * sigmoid(z); GroupNorm+SiLU is the diffusion-UNet block).

    Inputs, in order: X (N, C, ...); Scale (C); Bias (C) — per channel, as GroupNormalization
    opset 21. Attributes: num_groups (must divide C), epsilon (1e-5), activation.
    """
    name = "GroupNormAct"
    domain = EDGEOPS_DOMAIN
    min_inputs, max_inputs = 3, 3
    attrs = {"num_groups": required("int", check=lambda g: g >= 1, help="num_groups >= 1"),
             "epsilon": Attr("float", 1e-5),
             "activation": Attr("str", "none", choices=("none", "silu"))}
    flops_per_element = 8

    @classmethod
    def shape(cls, attrs, shapes):
        x, g = tuple(shapes[0]), attrs["num_groups"]
        if len(x) < 2 or x[1] % g or any(tuple(s) != (x[1],) for s in shapes[1:3]):
            raise OpDefinitionError(f"{cls.qualname()}: need X (N, C, ...) with num_groups={g} "
                                    f"dividing C and Scale, Bias of shape (C,); got "
                                    f"{[tuple(s) for s in shapes]}")
        return [x]

    @classmethod
    def reference(cls, x, scale, bias, *, num_groups, epsilon, activation):
        cls.shape({"num_groups": num_groups}, [x.shape, scale.shape, bias.shape])
        y = group_norm(x, scale, bias, num_groups, epsilon)
        return (y * sigmoid(y) if activation == "silu" else y).astype(x.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        per = cls.flops_per_element + (5 if attrs["activation"] == "silu" else 0)
        return 0, int(np.prod(out_shapes[0])) * per
