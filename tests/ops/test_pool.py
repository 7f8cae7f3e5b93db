"""Pools vs ONNX Runtime (fp32) and, in fp64, a naive loop-per-output implementation written from
the spec text (onnx.reference gets SAME_LOWER wrong and ORT has no double AveragePool)."""
import itertools
import math

import numpy as np
import pytest

from _ops_harness import check, rand
from edgeops.ops import get_op

POOLS = [  # (attrs, ONNX shape inference agrees)
    ({"kernel_shape": [3, 3]}, True),
    ({"kernel_shape": [3, 2], "strides": [2, 2]}, True),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ({"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 0, 0, 1]}, True),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, True),
    # the last ceil window would start in the end padding: ORT and onnx.reference drop it (so
    # do we), onnx 1.23's C++ shape inference still counts it
    ({"kernel_shape": [2, 2], "strides": [2, 3], "pads": [1, 1, 0, 1], "ceil_mode": 1}, False),
    ({"kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1}, False),
    ({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, True),
    ({"kernel_shape": [2, 4], "auto_pad": "SAME_LOWER", "strides": [2, 3]}, True),
    ({"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]}, True),
    ({"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [1, 2]}, True),
    ({"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 1, 1, 1], "ceil_mode": 1,
      "strides": [2, 2]}, True),
]


def naive_pool(x, kind, kernel_shape, strides=None, dilations=None, pads=None, ceil_mode=0,
               auto_pad="NOTSET", count_include_pad=0):
    """One output element at a time, straight from the ONNX operator text."""
    sp, nd = x.shape[2:], len(kernel_shape)
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    pads = list(pads or [0] * 2 * nd)
    outs = []
    for i, (n, k, s, d) in enumerate(zip(sp, kernel_shape, strides, dilations)):
        eff = d * (k - 1) + 1
        if auto_pad.startswith("SAME"):
            o = math.ceil(n / s)
            total = max(0, (o - 1) * s + eff - n)
            pads[i] = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pads[i + nd] = total - pads[i]
        elif auto_pad == "VALID":
            o = (n - eff) // s + 1
        else:
            r = (n + pads[i] + pads[i + nd] - eff) / s
            o = (math.ceil(r) if ceil_mode else math.floor(r)) + 1
            if ceil_mode and (o - 1) * s >= n + pads[i]:
                o -= 1
        outs.append(o)
    y = np.empty(x.shape[:2] + tuple(outs))
    for idx in itertools.product(*map(range, outs)):
        vals, padded = [], 0
        for tap in itertools.product(*map(range, kernel_shape)):
            pos = [o * s - pads[i] + t * d
                   for i, (o, s, t, d) in enumerate(zip(idx, strides, tap, dilations))]
            if all(0 <= p < n for p, n in zip(pos, sp)):
                vals.append(x[(slice(None), slice(None), *pos)])
            elif all(-pads[i] <= p < n + pads[i + nd] for i, (p, n) in enumerate(zip(pos, sp))):
                padded += 1
        v = np.stack(vals)
        div = len(vals) + (padded if count_include_pad else 0)
        y[(Ellipsis, *idx)] = v.max(0) if kind == "max" else v.sum(0) / div
    return y


@pytest.mark.parametrize("attrs,infer_ok", POOLS)
def test_maxpool(rng, attrs, infer_ok):
    check("MaxPool", [rand(rng, 2, 3, 13, 11)], attrs, shape_inference=infer_ok,
          fp64=lambda x: [naive_pool(x, "max", **attrs)])


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs,infer_ok", POOLS)
def test_averagepool(rng, attrs, infer_ok, count_include_pad):
    a = {**attrs, "count_include_pad": count_include_pad}
    check("AveragePool", [rand(rng, 2, 3, 13, 11)], a, shape_inference=infer_ok,
          fp64=lambda x: [naive_pool(x, "avg", **a)])


def test_ceil_mode_drops_window_starting_in_padding():
    attrs = get_op("MaxPool").parse_attrs(POOLS[5][0])
    assert get_op("MaxPool").shape(attrs, [(2, 3, 13, 11)]) == [(2, 3, 7, 4)]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("xs,attrs", [
    ((2, 3, 17), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 7, 6, 5), {"kernel_shape": [2, 3, 2], "ceil_mode": 1, "strides": [2, 2, 2]})])
def test_pool_1d_3d(rng, op, xs, attrs):
    check(op, [rand(rng, *xs)], attrs,
          fp64=lambda x: [naive_pool(x, "max" if op == "MaxPool" else "avg", **attrs)])


@pytest.mark.parametrize("xs", [(2, 3, 13, 7), (3, 5, 11), (1, 2, 3, 4, 5)])
def test_global_averagepool(rng, xs):
    check("GlobalAveragePool", [rand(rng, *xs)])
