"""Sigmoid: y = 1 / (1 + exp(-x))."""
from edgeops.ops._common import sigmoid
from edgeops.ops.base import OpDef, define_op


@define_op
class Sigmoid(OpDef):
    name = "Sigmoid"
    flops_per_element = 4  # neg, exp, add, reciprocal

    @classmethod
    def reference(cls, x):
        return sigmoid(x).astype(x.dtype, copy=False)
