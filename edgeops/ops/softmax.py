"""Softmax (opset 13): exp(x) / sum(exp(x)) along one axis (default -1)."""
import numpy as np

from edgeops.ops._common import axis_of, wide
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class Softmax(OpDef):
    name = "Softmax"
    attrs = {"axis": Attr("int", -1)}
    flops_per_element = 5  # max, sub, exp, sum, div

    @classmethod
    def shape(cls, attrs, shapes):
        axis_of(cls.name, attrs["axis"], len(shapes[0]))
        return [tuple(shapes[0])]

    @classmethod
    def reference(cls, x, *, axis):
        ax = axis_of(cls.name, axis, x.ndim)
        e = np.exp(wide(x) - wide(x).max(axis=ax, keepdims=True))  # shift: no overflow
        return (e / e.sum(axis=ax, keepdims=True)).astype(x.dtype, copy=False)
