"""Relu: y = max(x, 0)."""
import numpy as np

from edgeops.ops.base import OpDef, define_op


@define_op
class Relu(OpDef):
    name = "Relu"

    @classmethod
    def reference(cls, x):
        return np.maximum(x, 0).astype(x.dtype, copy=False)
