"""Conv (ONNX opset 11+): N-D grouped convolution. X (N, C, *D), W (K, C/group, *k), B (K) optional;
kernel_shape, when given, must match W. Depthwise is group == C."""
import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops import _window as win
from edgeops.ops._common import wide
from edgeops.ops.base import Attr, OpDef, _numel, define_op


@define_op
class Conv(OpDef):
    name = "Conv"
    min_inputs, max_inputs = 2, 3
    attrs = {**win.WINDOW_ATTRS, "group": Attr("int", 1, check=lambda g: g >= 1, help="group >= 1")}

    @classmethod
    def validate(cls, attrs, where=""):
        win.validate(cls.name, attrs, where)

    @classmethod
    def geometry(cls, attrs, x, w):
        """(pads_begin, pads_end, out_spatial, strides, dilations) after checking X against W."""
        g = attrs["group"]
        if len(x) < 3 or len(w) != len(x):
            raise OpDefinitionError(f"{cls.name}: X {tuple(x)} and W {tuple(w)} must both be "
                                    f"(N, C, spatial...) / (K, C/group, kernel...) of equal rank")
        if x[1] % g or w[0] % g or w[1] * g != x[1]:
            raise OpDefinitionError(f"{cls.name}: group={g} does not fit C={x[1]} and W "
                                    f"{tuple(w)}: need C % group == 0, K % group == 0 and "
                                    f"W.shape[1] == C/group")
        return win.geometry(cls.name, attrs, x[2:], w[2:])

    @classmethod
    def shape(cls, attrs, shapes):
        x, w = shapes[0], shapes[1]
        return [(x[0], w[0], *cls.geometry(attrs, x, w)[2])]

    @classmethod
    def reference(cls, x, w, b=None, **attrs):
        begin, end, out, s, d = cls.geometry(attrs, x.shape, w.shape)
        n, (k, cg), g = x.shape[0], w.shape[:2], attrs["group"]
        xp = np.pad(wide(x), [(0, 0), (0, 0), *zip(begin, end)])
        xp = xp.reshape(n, g, cg, *xp.shape[2:])
        wg = wide(w).reshape(g, k // g, cg, *w.shape[2:])
        y = np.zeros((n, g, k // g, *out))
        for off, view in win.windows(xp, w.shape[2:], out, s, d):
            y += np.einsum("ngc...,gkc->ngk...", view, wg[(Ellipsis, *off)])
        y = y.reshape(n, k, *out)
        if b is not None:
            y += wide(b).reshape(k, *[1] * len(out))
        return y.astype(x.dtype, copy=False)

    @classmethod
    def cost(cls, attrs, in_shapes, out_shapes):
        w, y = in_shapes[1], out_shapes[0]
        macs = _numel(y) * _numel(w[1:])  # every output sums C/group * prod(kernel) products
        bias = len(in_shapes) > 2 and in_shapes[2] is not None
        return macs, 2 * macs + (_numel(y) if bias else 0)
