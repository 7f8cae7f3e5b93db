"""Clip (opset 11+): y = min(max(x, min), max); min and max are optional scalar inputs (an
omitted one does not bound). When min > max every element becomes max, as the ONNX spec says."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops.base import OpDef, define_op


@define_op
class Clip(OpDef):
    name = "Clip"
    min_inputs, max_inputs = 1, 3
    flops_per_element = 2

    @classmethod
    def shape(cls, attrs, shapes):
        for s in shapes[1:]:
            if s is not None and int(np.prod(s)) != 1:
                raise OpDefinitionError(f"{cls.name}: min and max must be scalars, got shape {s}")
        return [tuple(shapes[0])]

    @classmethod
    def reference(cls, x, lo=None, hi=None):
        cls.shape({}, [x.shape] + [None if v is None else np.shape(v) for v in (lo, hi)])
        y = x
        if lo is not None:
            y = np.maximum(y, np.asarray(lo, x.dtype).reshape(()))
        if hi is not None:
            y = np.minimum(y, np.asarray(hi, x.dtype).reshape(()))
        return np.asarray(y).astype(x.dtype, copy=True)
