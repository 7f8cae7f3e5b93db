"""MaxPool (opset 12+), N-D: max over each window; padding never wins (it is -inf). ceil_mode
keeps a partial last window unless it would start in the end padding. Only Y is produced
(Indices is not); storage_order only concerns Indices and is accepted for loading."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops import _window as win
from edgeops.ops.base import Attr, OpDef, _numel, define_op, required

POOL_ATTRS = {**win.WINDOW_ATTRS, "kernel_shape": required("ints", check=lambda v: min(v) >= 1,
                                                                help="every entry >= 1"),
              "ceil_mode": Attr("int", 0, choices=(0, 1))}


def pool_shape(op, attrs, x):
    if len(x) < 3:
        raise OpDefinitionError(f"{op}: X must be (N, C, spatial...), got {tuple(x)}")
    return [(x[0], x[1], *win.geometry(op, attrs, x[2:], attrs["kernel_shape"],
                                       bool(attrs["ceil_mode"]))[2])]


def pool_cost(attrs, out_shapes):
    n = _numel(out_shapes[0]) * _numel(attrs["kernel_shape"])  # one compare or add per tap
    return 0, n


@define_op
class MaxPool(OpDef):
    name = "MaxPool"
    attrs = {**POOL_ATTRS, "storage_order": Attr("int", 0, choices=(0, 1))}

    @classmethod
    def validate(cls, attrs, where=""):
        win.validate(cls.name, attrs, where)

    @classmethod
    def shape(cls, attrs, shapes):
        return pool_shape(cls.name, attrs, shapes[0])

    @classmethod
    def reference(cls, x, **attrs):
        ks = attrs["kernel_shape"]
        pool_shape(cls.name, attrs, x.shape)
        b, e, out, s, d = win.geometry(cls.name, attrs, x.shape[2:], ks, bool(attrs["ceil_mode"]))
        extra = win.overhang(x.shape[2:], b, e, out, s, ks, d)
        lo = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min  # MaxPool takes int8 too
        xp = np.pad(x, [(0, 0), (0, 0), *zip(b, np.add(e, extra))], constant_values=lo)
        y = np.full((*x.shape[:2], *out), lo, dtype=x.dtype)
        for _, view in win.windows(xp, ks, out, s, d):
            np.maximum(y, view, out=y)
        return y

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        return pool_cost(attrs, out_shapes)
