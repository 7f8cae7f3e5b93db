"""Reshape (opset 14+): the target shape is an int64 input. -1 (at most one) is inferred; 0 copies
the input dimension at that index unless allowzero=1, where it means a real zero (and then -1
cannot appear with it)."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import need_values
from edgeops.ops.base import Attr, OpDef, define_op


def target_shape(op, x, spec, allowzero):
    spec = [int(v) for v in np.asarray(spec).reshape(-1)]
    if spec.count(-1) > 1 or any(v < -1 for v in spec):
        raise OpDefinitionError(f"{op}: shape {spec} may hold at most one -1 and no other negative")
    if allowzero and 0 in spec and -1 in spec:
        raise OpDefinitionError(f"{op}: with allowzero=1 the shape {spec} cannot hold both 0 "
                                f"and -1")
    if any(v == 0 and not allowzero and i >= len(x) for i, v in enumerate(spec)):
        raise OpDefinitionError(f"{op}: shape {spec} copies (0) an axis that X {tuple(x)} lacks")
    out = [x[i] if v == 0 and not allowzero else v for i, v in enumerate(spec)]
    n, known = int(np.prod(x)), int(np.prod([v for v in out if v != -1]))
    if -1 in out:
        if known == 0 or n % known:
            raise OpDefinitionError(f"{op}: cannot infer -1 in {spec} for X {tuple(x)} "
                                    f"({n} elements)")
        out[out.index(-1)] = n // known
    if int(np.prod(out)) != n:
        raise OpDefinitionError(f"{op}: X {tuple(x)} has {n} elements, shape {spec} gives {out}")
    return tuple(out)


@define_op
class Reshape(OpDef):
    name = "Reshape"
    min_inputs, max_inputs = 2, 2
    attrs = {"allowzero": Attr("int", 0, choices=(0, 1))}
    flops_per_element = 0

    @classmethod
    def shape(cls, attrs, shapes, values=None):
        """``values[1]``: the value of the shape input (the output depends on it)."""
        return [target_shape(cls.name, shapes[0], need_values(cls.name, "shape", values, 1),
                             attrs["allowzero"])]

    @classmethod
    def reference(cls, x, shape, *, allowzero):
        return x.reshape(target_shape(cls.name, x.shape, shape, allowzero)).copy()
