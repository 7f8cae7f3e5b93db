"""Sliding-window geometry shared by Conv, ConvBnAct, MaxPool and AveragePool (ONNX rules)."""
import math

import numpy as np

from edgeops.errors import OpDefinitionError
from edgeops.ops._common import at
from edgeops.ops.base import Attr

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_pos = dict(check=lambda v: all(x >= 1 for x in v), help="every entry must be >= 1")

WINDOW_ATTRS = {
    "auto_pad": Attr("str", "NOTSET", choices=AUTO_PADS),
    "kernel_shape": Attr("ints", None, **_pos),
    "strides": Attr("ints", None, **_pos),
    "dilations": Attr("ints", None, **_pos),
    "pads": Attr("ints", None, check=lambda v: all(x >= 0 for x in v), help="pads must be >= 0"),
}


def validate(op: str, attrs: dict, where: str) -> None:
    """Lengths agree with each other; explicit pads and auto_pad exclude each other."""
    lens = {k: len(attrs[k]) for k in ("kernel_shape", "strides", "dilations") if attrs.get(k)}
    if attrs.get("pads"):
        if len(attrs["pads"]) % 2:
            raise OpDefinitionError(f"{op}{at(where)}: pads={list(attrs['pads'])} must have 2 "
                                    f"entries per spatial axis (all begins, then all ends)")
        lens["pads/2"] = len(attrs["pads"]) // 2
    if len(set(lens.values())) > 1:
        raise OpDefinitionError(f"{op}{at(where)}: attributes disagree on the number of spatial "
                                f"axes: {lens}")
    if attrs["auto_pad"] != "NOTSET" and any(attrs.get("pads") or ()):
        raise OpDefinitionError(f"{op}{at(where)}: auto_pad={attrs['auto_pad']} and explicit "
                                f"pads={list(attrs['pads'])} cannot be used together")


def geometry(op: str, attrs: dict, spatial, kernel, ceil_mode: bool = False):
    """(pads_begin, pads_end, out, strides, dilations) per spatial axis."""
    nd = len(spatial)
    s = attrs["strides"] or (1,) * nd
    d = attrs.get("dilations") or (1,) * nd
    pads = attrs.get("pads") or (0,) * (2 * nd)
    if attrs.get("kernel_shape") and tuple(attrs["kernel_shape"]) != tuple(kernel):
        raise OpDefinitionError(f"{op}: kernel_shape={list(attrs['kernel_shape'])} does not "
                                f"match the weight's spatial shape {list(kernel)}")
    if not len(s) == len(d) == len(kernel) == nd or len(pads) != 2 * nd:
        raise OpDefinitionError(f"{op}: input has {nd} spatial axes but strides={list(s)}, "
                                f"dilations={list(d)}, kernel={list(kernel)}, pads={list(pads)}")
    begin, end, out = [], [], []
    for n, k, st, di, b, e in zip(spatial, kernel, s, d, pads[:nd], pads[nd:]):
        eff = (k - 1) * di + 1
        if attrs["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // st)
            total = max((o - 1) * st + eff - n, 0)
            b = total // 2 if attrs["auto_pad"] == "SAME_UPPER" else (total + 1) // 2
            e = total - b
        elif attrs["auto_pad"] == "VALID":
            b = e = 0
            o = (n - eff) // st + 1
        else:
            span = n + b + e - eff
            o = (math.ceil if ceil_mode else math.floor)(span / st) + 1
            if ceil_mode and (o - 1) * st >= n + b:
                o -= 1   # the last window would start in the end padding: drop it (as ORT/PyTorch)
        if o < 1:
            raise OpDefinitionError(f"{op}: window {eff} (kernel {k}, dilation {di}) does not fit "
                                    f"the padded input extent {n + b + e}")
        begin.append(b), end.append(e), out.append(o)
    return tuple(begin), tuple(end), tuple(out), tuple(s), tuple(d)


def windows(xp: np.ndarray, kernel, out, strides, dilations):
    """Yield (kernel offset, view) for each kernel position; views cover the last len(kernel)
    axes of the padded input, one entry per output position."""
    for off in np.ndindex(*kernel):
        sl = tuple(slice(o * di, o * di + (n - 1) * st + 1, st)
                   for o, di, n, st in zip(off, dilations, out, strides))
        yield off, xp[(Ellipsis, *sl)]


def overhang(spatial, begin, end, out, strides, kernel, dilations):
    """Extra end padding so the ceil_mode last window stays inside the array."""
    return tuple(max(0, (o - 1) * st + (k - 1) * di + 1 - (n + b + e))
                 for n, b, e, o, st, k, di
                 in zip(spatial, begin, end, out, strides, kernel, dilations))
