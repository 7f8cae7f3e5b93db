"""HardSigmoid: y = max(0, min(1, alpha * x + beta))."""
import numpy as np

from edgeops.ops._common import wide
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class HardSigmoid(OpDef):
    name = "HardSigmoid"
    attrs = {"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)}
    flops_per_element = 4

    @classmethod
    def reference(cls, x, *, alpha, beta):
        return np.clip(alpha * wide(x) + beta, 0.0, 1.0).astype(x.dtype, copy=False)
