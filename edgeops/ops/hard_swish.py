"""HardSwish: y = x * max(0, min(1, alpha * x + 1/2)), alpha = 1/6 rounded to float32 as the
spec's function body (HardSigmoid with a float32 attribute) defines it."""
import numpy as np

from edgeops.ops._common import wide
from edgeops.ops.base import OpDef, define_op

ALPHA = float(np.float32(1 / 6))


def hard_swish(x):
    xw = wide(x)
    return xw * np.clip(ALPHA * xw + 0.5, 0.0, 1.0)


@define_op
class HardSwish(OpDef):
    name = "HardSwish"
    flops_per_element = 5

    @classmethod
    def reference(cls, x):
        return hard_swish(x).astype(x.dtype, copy=False)
