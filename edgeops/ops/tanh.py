"""Tanh: y = tanh(x)."""
import numpy as np

from edgeops.ops._common import wide
from edgeops.ops.base import OpDef, define_op


@define_op
class Tanh(OpDef):
    name = "Tanh"
    flops_per_element = 4

    @classmethod
    def reference(cls, x):
        return np.tanh(wide(x)).astype(x.dtype, copy=False)
