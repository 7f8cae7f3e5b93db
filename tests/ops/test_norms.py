"""Normalisations vs ONNX Runtime (fp32) and onnx.reference (fp64)."""
import numpy as np
import pytest

from _ops_harness import check, rand


@pytest.mark.parametrize("xs", [(2, 7, 13, 5), (3, 7), (2, 5, 11)])
@pytest.mark.parametrize("eps", [1e-5, 0.3])
def test_batchnorm(rng, xs, eps):
    c = xs[1]
    var = rng.uniform(0.2, 2.0, c)  # variances are positive
    check("BatchNormalization", [rand(rng, *xs), rand(rng, c), rand(rng, c), rand(rng, c), var],
          {"epsilon": eps})


@pytest.mark.parametrize("xs,axis", [((7, 13), -1), ((2, 7, 13), -1), ((2, 7, 13), 1),
                                     ((2, 7, 13), -2), ((3, 5, 4, 6), 2), ((3, 5, 4, 6), 0)])
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm(rng, xs, axis, bias):
    tail = xs[axis:]
    x = rand(rng, *xs) * 3 + 1.5   # an offset, so the mean really has to be removed
    check("LayerNormalization", [x, rand(rng, *tail), rand(rng, *tail) if bias else None],
          {"axis": axis})


def test_layernorm_broadcast_scale(rng):
    check("LayerNormalization", [rand(rng, 2, 7, 13), rand(rng, 1, 13), rand(rng, 13)],
          {"axis": -2, "epsilon": 1e-3})


@pytest.mark.parametrize("xs,groups", [((2, 6, 7, 5), 3), ((1, 8, 13), 2), ((2, 6, 5, 3), 6),
                                       ((2, 6, 5, 3), 1), ((1, 4, 3, 2, 5), 2)])
def test_groupnorm_per_channel(rng, xs, groups):
    """Opset 21: scale and bias have one entry per channel. The fp64 check sets stash_type=11:
    onnx.reference otherwise computes the statistics in float32, as the spec says."""
    c = xs[1]
    ins = [rand(rng, *xs) + 2, rand(rng, c), rand(rng, c)]
    # onnx 1.23 infers no output shape for GroupNormalization-21: nothing to compare shape() to
    check("GroupNormalization", ins, {"num_groups": groups, "epsilon": 1e-4}, fp64=None,
          shape_inference=False)
    check("GroupNormalization", ins, {"num_groups": groups, "epsilon": 1e-4, "stash_type": 11},
          fp32=None, shape_inference=False)


def test_groupnorm_per_group_scale_is_opset18(rng):
    """Opset-18 per-group scale/bias: each group's value applies to all its channels."""
    from edgeops.ops import get_op
    x, s, b = rand(rng, 2, 6, 5), rand(rng, 3), rand(rng, 3)
    got = get_op("GroupNormalization").run([x, s, b], {"num_groups": 3})[0]
    want = get_op("GroupNormalization").run([x, np.repeat(s, 2), np.repeat(b, 2)],
                                            {"num_groups": 3})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("xs", [(2, 5, 7, 13), (3, 4, 11), (1, 3, 4, 5, 3)])
def test_instancenorm(rng, xs):
    c = xs[1]
    check("InstanceNormalization", [rand(rng, *xs) - 1, rand(rng, c), rand(rng, c)],
          {"epsilon": 1e-4})
