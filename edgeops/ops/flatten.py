"""Flatten: X to 2-D (prod(shape[:axis]), prod(shape[axis:])); axis in [-rank, rank]."""
import numpy as np

from edgeops.ops._common import axis_of
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class Flatten(OpDef):
    name = "Flatten"
    attrs = {"axis": Attr("int", 1)}
    flops_per_element = 0

    @classmethod
    def shape(cls, attrs, shapes):
        x = tuple(shapes[0])
        ax = axis_of(cls.name, attrs["axis"], len(x), allow_end=True)
        return [(int(np.prod(x[:ax])), int(np.prod(x[ax:])))]

    @classmethod
    def reference(cls, x, *, axis):
        return x.reshape(cls.shape({"axis": axis}, [x.shape])[0]).copy()
