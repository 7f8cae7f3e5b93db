"""Split: cut X along ``axis`` into pieces given by the optional ``split`` input (opset 13+) or
into num_outputs pieces (opset 18; when uneven, all but the last have ceil(dim/num_outputs)).
Opset 13-17 models with neither derive the count from the node's outputs: pass it as
num_outputs."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import axis_of
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class Split(OpDef):
    name = "Split"
    min_inputs, max_inputs = 1, 2
    attrs = {"axis": Attr("int", 0),
             "num_outputs": Attr("int", None, check=lambda n: n >= 1, help="num_outputs >= 1")}
    flops_per_element = 0

    @classmethod
    def sizes(cls, attrs, x, split):
        ax = axis_of(cls.name, attrs["axis"], len(x))
        n, dim = attrs["num_outputs"], x[ax]
        if (split is None) == (n is None):
            raise OpDefinitionError(f"{cls.name}: give exactly one of the split input and the "
                                    f"num_outputs attribute (got split={split}, num_outputs={n})")
        if split is not None:
            sizes = [int(v) for v in np.asarray(split).reshape(-1)]
        else:
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
        if sum(sizes) != dim or min(sizes) < 0 or (split is None and sizes[-1] < 1):
            raise OpDefinitionError(f"{cls.name}: pieces {sizes} do not cut axis {ax} of size "
                                    f"{dim}")
        return ax, sizes

    @classmethod
    def shape(cls, attrs, shapes, values=None):
        """``values[1]``: the value of the split input, when the node has one."""
        split = values[1] if values is not None and len(values) > 1 else None
        if split is None and len(shapes) > 1 and shapes[1] is not None:
            raise OpDefinitionError(f"{cls.name}: the output shapes depend on the value of input "
                                    f"'split'; pass it as values[1] to shape()")
        ax, sizes = cls.sizes(attrs, tuple(shapes[0]), split)
        return [tuple(shapes[0][:ax]) + (s,) + tuple(shapes[0][ax + 1:]) for s in sizes]

    @classmethod
    def reference(cls, x, split=None, **attrs):
        ax, sizes = cls.sizes(attrs, x.shape, split)
        return tuple(p.copy() for p in np.split(x, np.cumsum(sizes)[:-1], axis=ax))
