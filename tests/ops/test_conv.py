"""Conv reference vs ONNX Runtime (fp32) and onnx.reference (fp64); shape rule vs ONNX shape
inference; cost vs a brute-force count."""
import itertools

import numpy as np
import pytest

from _ops_harness import check, rand
from edgeops.ops import get_op

CASES = [  # (X shape, K, group, kernel, attrs)
    ((2, 6, 13, 7), 4, 1, (3, 3), {}),
    ((1, 6, 13, 7), 9, 3, (3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 5, 11, 9), 5, 5, (3, 3), {"pads": [1, 1, 1, 1]}),                  # depthwise
    ((1, 4, 13, 11), 8, 4, (5, 3), {"strides": [2, 3], "pads": [2, 1, 2, 1]}),  # depthwise x2
    ((2, 3, 13, 10), 5, 1, (3, 3), {"dilations": [2, 3], "pads": [2, 0, 1, 3]}),
    ((1, 4, 12, 9), 6, 2, (3, 3), {"strides": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ((1, 3, 13, 7), 5, 1, (3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 13, 8), 5, 1, (4, 2), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ((1, 6, 13, 7), 6, 2, (2, 3), {"auto_pad": "SAME_UPPER"}),
    ((1, 3, 13, 7), 5, 1, (3, 4), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 3, 13, 7), 5, 1, (3, 3), {"auto_pad": "NOTSET", "kernel_shape": [3, 3]}),
    ((2, 4, 17), 6, 2, (3,), {"strides": [2], "pads": [1, 2]}),              # 1-D
    ((1, 2, 5, 6, 7), 3, 1, (2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),        # 3-D
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,k,group,kernel,attrs", CASES)
def test_conv_matches_onnx(rng, xs, k, group, kernel, attrs, bias):
    x = rand(rng, *xs)
    w = rand(rng, k, xs[1] // group, *kernel)
    b = rand(rng, k) if bias else None
    check("Conv", [x, w, b], {**attrs, "group": group})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_with_dilation_follows_spec(rng, auto_pad):
    """SAME with dilations: the spec's output is ceil(in / stride) with the dilated kernel.
    ONNX Runtime refuses dilation with SAME_*, so onnx.reference is the peer in both precisions."""
    x, w = rand(rng, 1, 3, 13, 10), rand(rng, 4, 3, 3, 3)
    got = check("Conv", [x, w], {"auto_pad": auto_pad, "dilations": [2, 3], "strides": [2, 1]},
                fp32="ref")
    assert got[0].shape == (1, 4, 7, 10)


def brute_force_macs(xs, ws, group, out_spatial):
    """Count one MAC per (output element, input channel of its group, kernel tap)."""
    n = 0
    for _ in itertools.product(range(xs[0]), range(ws[0]), *map(range, out_spatial)):
        for _ in itertools.product(range(xs[1] // group), *map(range, ws[2:])):
            n += 1
    return n


@pytest.mark.parametrize("xs,k,group,kernel,attrs", [CASES[1], CASES[2], CASES[5], CASES[11]])
def test_conv_cost_matches_brute_force(xs, k, group, kernel, attrs):
    conv = get_op("Conv")
    a = conv.parse_attrs({**attrs, "group": group})
    ws = (k, xs[1] // group, *kernel)
    ys = conv.shape(a, [xs, ws])[0]
    macs = brute_force_macs(xs, ws, group, ys[2:])
    assert conv.cost(a, [xs, ws], [ys]) == (macs, 2 * macs)
    assert conv.cost(a, [xs, ws, (k,)], [ys]) == (macs, 2 * macs + int(np.prod(ys)))
    assert conv.cost(a, [xs, ws, None], [ys]) == (macs, 2 * macs)  # omitted bias
