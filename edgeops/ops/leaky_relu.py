"""LeakyRelu: y = x if x >= 0 else alpha * x."""
import numpy as np

from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class LeakyRelu(OpDef):
    name = "LeakyRelu"
    attrs = {"alpha": Attr("float", 0.01)}
    flops_per_element = 2

    @classmethod
    def reference(cls, x, *, alpha):
        return np.where(x >= 0, x, x * np.asarray(alpha, x.dtype)).astype(x.dtype, copy=False)
