"""GroupNormalization (opset 21): X (N, C, ...) split into num_groups groups of C/num_groups
channels; each (n, group) is normalised over its channels and spatial positions, then
Y = norm * scale[c] + bias[c] with per-CHANNEL scale and bias of size C (opset 21 semantics).
Opset 18 defined per-group scale/bias of size num_groups; those are accepted too (each group's
value repeated over its channels). When num_groups == C the two readings coincide."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import wide
from edgeops.ops.base import Attr, OpDef, define_op, required


def group_norm(x, scale, bias, num_groups, epsilon):
    """float64 group norm shared with GroupNormAct."""
    n, c = x.shape[:2]
    xg = wide(x).reshape(n, num_groups, -1)
    xc = xg - xg.mean(axis=2, keepdims=True)
    y = (xc / np.sqrt((xc * xc).mean(axis=2, keepdims=True) + epsilon)).reshape(x.shape)
    bc = (1, c) + (1,) * (x.ndim - 2)
    per_channel = [np.repeat(wide(p).reshape(-1), c // p.size) for p in (scale, bias)]
    return y * per_channel[0].reshape(bc) + per_channel[1].reshape(bc)


def check_groups(op, x, num_groups, params):
    if len(x) < 2 or x[1] % num_groups:
        raise OpDefinitionError(f"{op}: num_groups={num_groups} must divide the channel count C "
                                f"of X {tuple(x)}")
    for s in params:
        if s is not None and int(np.prod(s)) not in (x[1], num_groups):
            raise OpDefinitionError(f"{op}: scale/bias of shape {tuple(s)} must have C={x[1]} "
                                    f"entries (opset 21) or num_groups={num_groups} (opset 18)")


@define_op
class GroupNormalization(OpDef):
    name = "GroupNormalization"
    min_inputs, max_inputs = 3, 3
    attrs = {"num_groups": required("int", check=lambda g: g >= 1, help="num_groups >= 1"),
             "epsilon": Attr("float", 1e-5), "stash_type": Attr("int", 1)}
    flops_per_element = 8

    @classmethod
    def shape(cls, attrs, shapes):
        check_groups(cls.name, shapes[0], attrs["num_groups"], shapes[1:3])
        return [tuple(shapes[0])]

    @classmethod
    def reference(cls, x, scale, bias, *, num_groups, epsilon, **_):
        check_groups(cls.name, x.shape, num_groups, [scale.shape, bias.shape])
        return group_norm(x, scale, bias, num_groups, epsilon).astype(x.dtype, copy=False)
