"""Gelu (opset 20): approximate="none": y = x/2 * (1 + erf(x / sqrt(2)));
approximate="tanh": y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))."""
import math

import numpy as np

from edgeops.ops._common import erf, wide
from edgeops.ops.base import Attr, OpDef, define_op

# the spec's function body holds these as float32 constants (CastLike to X): so does the oracle
_TWO_OVER_PI, _C0 = float(np.float32(2 / math.pi)), float(np.float32(0.044715))


@define_op
class Gelu(OpDef):
    name = "Gelu"
    attrs = {"approximate": Attr("str", "none", choices=("none", "tanh"))}
    flops_per_element = 8

    @classmethod
    def reference(cls, x, *, approximate="none"):
        xw = wide(x)
        if approximate == "tanh":
            inner = math.sqrt(_TWO_OVER_PI) * (xw + _C0 * xw ** 3)
            y = 0.5 * xw * (1.0 + np.tanh(inner))
        else:
            y = 0.5 * xw * (1.0 + erf(xw / math.sqrt(2.0)))
        return y.astype(x.dtype, copy=False)
