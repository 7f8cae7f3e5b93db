"""AveragePool (opset 19), N-D: mean over each window. count_include_pad=0 divides by the number
of real elements; =1 also counts explicit/auto padding, but never the part of a ceil_mode window
that hangs past the padding (as ORT and PyTorch)."""
import numpy as np

from edgeops.ops import _window as win
from edgeops.ops._common import wide
from edgeops.ops.base import Attr, OpDef, define_op
from edgeops.ops.maxpool import POOL_ATTRS, pool_cost, pool_shape


@define_op
class AveragePool(OpDef):
    name = "AveragePool"
    attrs = {**POOL_ATTRS, "count_include_pad": Attr("int", 0, choices=(0, 1))}

    @classmethod
    def validate(cls, attrs, where=""):
        win.validate(cls.name, attrs, where)

    @classmethod
    def shape(cls, attrs, shapes):
        return pool_shape(cls.name, attrs, shapes[0])

    @classmethod
    def reference(cls, x, **attrs):
        ks, sp = attrs["kernel_shape"], x.shape[2:]
        pool_shape(cls.name, attrs, x.shape)
        b, e, out, s, d = win.geometry(cls.name, attrs, sp, ks, bool(attrs["ceil_mode"]))
        extra = win.overhang(sp, b, e, out, s, ks, d)
        xp = np.pad(wide(x), [(0, 0), (0, 0), *zip(b, np.add(e, extra))])
        # what the divisor counts, as a 0/1 mask over the padded extent
        counted = np.pad(np.ones(sp), list(zip(b, np.add(e, extra))))
        if attrs["count_include_pad"]:
            counted = np.pad(np.ones(np.add(np.add(sp, b), e)), [(0, v) for v in extra])
        total, count = 0.0, 0.0
        for (_, view), (_, mask) in zip(win.windows(xp, ks, out, s, d),
                                        win.windows(counted, ks, out, s, d)):
            total, count = total + view, count + mask
        return (total / count).astype(x.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        return pool_cost(attrs, out_shapes)
