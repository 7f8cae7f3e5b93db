"""Concat: join inputs of equal rank along ``axis``; every other dimension must agree."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import axis_of
from edgeops.ops.base import OpDef, define_op, required


@define_op
class Concat(OpDef):
    name = "Concat"
    min_inputs, max_inputs = 1, 2 ** 31 - 1
    attrs = {"axis": required("int")}
    flops_per_element = 0

    @classmethod
    def shape(cls, attrs, shapes):
        shapes = [tuple(s) for s in shapes]
        ax = axis_of(cls.name, attrs["axis"], len(shapes[0]))
        rest = {s[:ax] + s[ax + 1:] for s in shapes}
        if len(rest) > 1 or len({len(s) for s in shapes}) > 1:
            raise OpDefinitionError(f"{cls.name}: inputs {shapes} differ outside axis "
                                    f"{attrs['axis']}")
        out = list(shapes[0])
        out[ax] = sum(s[ax] for s in shapes)
        return [tuple(out)]

    @classmethod
    def reference(cls, *xs, axis):
        cls.shape({"axis": axis}, [x.shape for x in xs])
        return np.concatenate(xs, axis=axis).astype(xs[0].dtype, copy=False)
