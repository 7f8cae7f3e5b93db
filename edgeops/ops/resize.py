"""Resize (opset 19), nearest mode. Inputs X, roi (unused), scales, sizes: exactly one of scales
and sizes, one entry per resized axis (``axes``, default all). Each output index maps back to an
input coordinate by coordinate_transformation_mode, is rounded by nearest_mode, and is clamped.
linear/cubic and tf_crop_and_resize/half_pixel_symmetric are valid ONNX but have no edgeops
reference: shape() works for them, reference() refuses them."""
import math

import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import axis_of
from edgeops.ops.base import Attr, OpDef, define_op

_F = np.float32
# Coordinates are computed in float32 with ONNX Runtime's operation order: near-ties (scale 0.6 is
# 0.6000000238 in float32) then resolve to the same pixel as ORT and the fp32 kernels do.
_COORD = {
    "half_pixel": lambda x, s, n, o: (x + _F(0.5)) / s - _F(0.5),
    "pytorch_half_pixel": lambda x, s, n, o: (x + _F(0.5)) / s - _F(0.5) if o > 1 else 0 * x,
    "asymmetric": lambda x, s, n, o: x / s,
    "tf_half_pixel_for_nearest": lambda x, s, n, o: (x + _F(0.5)) / s,  # opset 11 only
    "align_corners": lambda x, s, n, o: x * _F(n - 1) / _F(o - 1) if o > 1 else 0 * x,
}
_ROUND = {"round_prefer_floor": lambda c: np.ceil(c - _F(0.5)),
          "round_prefer_ceil": lambda c: np.floor(c + _F(0.5)), "floor": np.floor, "ceil": np.ceil}


@define_op
class Resize(OpDef):
    name = "Resize"
    min_inputs, max_inputs = 1, 4
    attrs = {"mode": Attr("str", "nearest", choices=("nearest", "linear", "cubic")),
             "coordinate_transformation_mode": Attr("str", "half_pixel", choices=(
                 *_COORD, "half_pixel_symmetric", "tf_crop_and_resize")),
             "nearest_mode": Attr("str", "round_prefer_floor", choices=tuple(_ROUND)),
             "keep_aspect_ratio_policy": Attr("str", "stretch",
                                              choices=("stretch", "not_larger", "not_smaller")),
             "axes": Attr("ints", None), "antialias": Attr("int", 0, choices=(0, 1)),
             "cubic_coeff_a": Attr("float", -0.75), "exclude_outside": Attr("int", 0),
             "extrapolation_value": Attr("float", 0.0)}
    flops_per_element = 0

    @classmethod
    def plan(cls, attrs, x, scales, sizes):
        """(axes, output shape, scale per axis)."""
        x = tuple(x)
        axes = [axis_of(cls.name, a, len(x)) for a in attrs["axes"] or range(len(x))]
        scales = None if scales is None or np.size(scales) == 0 else np.asarray(scales, np.float32)
        sizes = None if sizes is None or np.size(sizes) == 0 else np.asarray(sizes, np.int64)
        given = scales if sizes is None else sizes
        if (scales is None) == (sizes is None) or given.size != len(axes):
            raise OpDefinitionError(f"{cls.name}: give exactly one of scales and sizes, with one "
                                    f"entry per resized axis {axes} (got scales={scales}, "
                                    f"sizes={sizes})")
        out, scale = list(x), [1.0] * len(x)
        if scales is not None:
            for a, s in zip(axes, scales):
                out[a], scale[a] = int(math.floor(x[a] * float(s))), float(s)
        elif attrs["keep_aspect_ratio_policy"] == "stretch":
            for a, n in zip(axes, sizes):
                out[a], scale[a] = int(n), float(_F(int(n)) / _F(x[a]))
        else:
            pick = min if attrs["keep_aspect_ratio_policy"] == "not_larger" else max
            s = pick(int(n) / x[a] for a, n in zip(axes, sizes))
            for a in axes:
                out[a], scale[a] = int(s * x[a] + 0.5), s
        if min(out) < 1 and math.prod(x):
            raise OpDefinitionError(f"{cls.name}: output shape {out} of X {x} has an empty axis")
        return axes, tuple(out), scale

    @classmethod
    def shape(cls, attrs, shapes, values=None):
        """``values[2]`` / ``values[3]``: the value of the scales / sizes input."""
        vals = list(values or []) + [None] * 4
        if vals[2] is None and vals[3] is None:
            raise OpDefinitionError(f"{cls.name}: the output shape depends on the value of input "
                                    f"'scales' or 'sizes'; pass it as values[2] or values[3]")
        return [cls.plan(attrs, shapes[0], vals[2], vals[3])[1]]

    @classmethod
    def reference(cls, x, roi=None, scales=None, sizes=None, **attrs):
        ctm = attrs["coordinate_transformation_mode"]
        if attrs["mode"] != "nearest" or ctm not in _COORD:
            raise OpDefinitionError(
                f"{cls.name}: mode={attrs['mode']!r}, coordinate_transformation_mode={ctm!r} has "
                f"no edgeops reference; supported: mode 'nearest' with {sorted(_COORD)}")
        axes, out, scale = cls.plan(attrs, x.shape, scales, sizes)
        y = x
        for a in axes:
            if out[a] == x.shape[a] and scale[a] == 1.0:
                # an unscaled axis is copied, as onnx.reference does: otherwise the opset-11
                # tf_half_pixel_for_nearest mode would shift it by one under the ceil roundings
                continue
            coord = _COORD[ctm](np.arange(out[a], dtype=_F), _F(scale[a]), x.shape[a], out[a])
            idx = np.clip(_ROUND[attrs["nearest_mode"]](coord), 0, x.shape[a] - 1).astype(np.int64)
            y = np.take(y, idx, axis=a)
        return np.array(y, copy=True)
