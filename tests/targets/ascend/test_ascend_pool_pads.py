"""Ascend MaxPool / AveragePool with ragged windows against the ``edgeops.ops`` references:
end and asymmetric pads, ceil_mode tails, count_include_pad 0/1, non-square strides, dilation.

The inputs are fp16-representable; a pooled value is a max (exact) or a sum of at most R*S
values rounded to fp16 and one division, so 8u * max|ref| bounds the error.
"""
import numpy as np
import pytest

from edgeops import registry
from edgeops.ops import get_op
from edgeops.pipeline.targets import load_targets

load_targets()      # registers the ascend kernels

U = 2.0 ** -11

CASES = [  # (H, W, kernel, strides, pads, ceil_mode, dilations)
    ((6, 6), (7, 7), (1, 1), (0, 0, 1, 1), 0, (1, 1)),      # light_inception_v1's 7x7 pool
    ((7, 7), (3, 3), (1, 1), (0, 0, 1, 1), 0, (1, 1)),
    ((8, 9), (3, 3), (2, 2), (0, 0, 0, 0), 1, (1, 1)),      # ceil_mode tail, no pads
    ((9, 8), (3, 3), (2, 2), (1, 0, 0, 1), 1, (1, 1)),      # asymmetric pads + ceil tail
    ((5, 6), (2, 2), (2, 2), (1, 1, 0, 0), 1, (1, 1)),      # begin pads only
    ((6, 7), (3, 3), (2, 2), (1, 1, 1, 1), 1, (1, 1)),
    ((10, 7), (3, 2), (2, 3), (0, 1, 2, 0), 1, (1, 1)),     # non-square kernel and strides
    ((9, 9), (2, 3), (1, 2), (1, 0, 1, 2), 0, (2, 1)),      # dilation
]


@pytest.mark.parametrize("board", ("ascend-910b", "ascend-310b"))
@pytest.mark.parametrize("hw,k,s,pads,ceil,dil", CASES)
@pytest.mark.parametrize("op,cip", [("MaxPool", None), ("AveragePool", 0), ("AveragePool", 1)])
def test_ragged_pool_matches_reference(op, cip, hw, k, s, pads, ceil, dil, board, rng):
    x = (rng.standard_normal((1, 3, *hw)) * 2).astype(np.float16).astype(np.float32)
    attrs = {"kernel_shape": list(k), "strides": list(s), "pads": list(pads), "ceil_mode": ceil}
    if op == "MaxPool":
        attrs["dilations"] = list(dil)
    elif dil != (1, 1):
        attrs["dilations"] = list(dil)
    if cip is not None:
        attrs["count_include_pad"] = cip
    od = get_op(op, "")
    a = od.parse_attrs(attrs)
    kern = registry.find(registry.op_key(op, ""), "ascend")
    y = kern.fn([x], a, board=board)[0]
    ref = od.reference(x.astype(np.float64), **a)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=0, atol=8 * U * np.abs(ref).max())
