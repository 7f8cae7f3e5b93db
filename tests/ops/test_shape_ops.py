"""Data-movement ops, MatMul and Gemm vs ONNX Runtime (fp32) and onnx.reference (fp64); value-
dependent shape rules (Reshape, Split, Resize) get the values, as ONNX shape inference does."""
import itertools

import numpy as np
import pytest

from _ops_harness import check, node_model, rand, run_model
from edgeops.ops import get_op

I64 = np.int64


@pytest.mark.parametrize("xs,spec,allowzero", [
    ((2, 3, 4), [6, 4], 0), ((2, 3, 4), [-1, 2], 0), ((2, 3, 4), [0, -1], 0),
    ((2, 3, 4), [0, 0, 2, 2], 0), ((7, 13), [13, 7], 1), ((7, 13), [-1], 0),
    ((0, 3), [3, 0], 1), ((2, 3, 4), [4, 0, -1], 0)])
def test_reshape(rng, xs, spec, allowzero):
    check("Reshape", [rand(rng, *xs), np.array(spec, I64)], {"allowzero": allowzero},
          const=(1,), shape_values=True)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3, -4])
def test_flatten(rng, axis):
    check("Flatten", [rand(rng, 2, 7, 3, 5)], {"axis": axis})


@pytest.mark.parametrize("perm", [None, [0, 2, 1, 3], [3, 1, 0, 2], [0, 1, 2, 3]])
def test_transpose(rng, perm):
    check("Transpose", [rand(rng, 2, 7, 3, 5)], {} if perm is None else {"perm": perm})


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_concat(rng, axis):
    shapes = []
    for k in (3, 1, 5):
        s = [2, 7, 4]
        s[axis] = k
        shapes.append(s)
    check("Concat", [rand(rng, *s) for s in shapes], {"axis": axis})


@pytest.mark.parametrize("xs,axis,split", [((7, 13), 1, [3, 10]), ((7, 13), -2, [2, 2, 3]),
                                           ((2, 9, 4), 1, [9]), ((2, 9, 4), 2, [1, 0, 3])])
def test_split_input(rng, xs, axis, split):
    check("Split", [rand(rng, *xs), np.array(split, I64)], {"axis": axis}, const=(1,),
          n_out=len(split), shape_values=True)


@pytest.mark.parametrize("dim,n", [(12, 3), (13, 4), (7, 3), (5, 5)])
def test_split_num_outputs(rng, dim, n):
    # uneven: ceil-sized pieces, the last one smaller
    check("Split", [rand(rng, 3, dim)], {"axis": 1, "num_outputs": n}, n_out=n)


COORD = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
ROUND = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def ort_pixels(x, *rest, attrs, const):
    """float64 oracle for nearest Resize: the pixels ONNX Runtime picks (it has no double
    Resize; onnx.reference decides near-ties in float64, and align_corners by the fractional
    output length, so it disagrees with ORT), applied to the float64 data."""
    ids = np.arange(x.size, dtype=np.float32).reshape(x.shape)  # exact in float32 here
    model, feeds = node_model("Resize", [ids, *rest], attrs, 1, const)
    picked = run_model(model, feeds, "ort")[0].astype(np.int64)
    return [x.reshape(-1)[picked]]


def check_resize(x, rest, attrs):
    const = tuple(i + 1 for i, v in enumerate(rest) if v is not None)
    check("Resize", [x, *rest], attrs, const=const, shape_values=True, exact=True,
          fp64=lambda x, *r: ort_pixels(x, *r, attrs=attrs, const=const))


@pytest.mark.parametrize("ctm,nearest", list(itertools.product(COORD, ROUND)))
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 3.0], [1, 1, 0.5, 0.6], [1, 1, 1.7, 0.8]])
def test_resize_scales(rng, ctm, nearest, scales):
    check_resize(rand(rng, 2, 3, 7, 10), [None, np.array(scales, np.float32)],
                 {"mode": "nearest", "coordinate_transformation_mode": ctm,
                  "nearest_mode": nearest})


@pytest.mark.parametrize("ctm", COORD)
@pytest.mark.parametrize("sizes,axes,policy", [
    ([2, 3, 13, 5], None, "stretch"), ([1, 3, 4, 17], None, "stretch"),
    ([11, 4], [2, 3], "stretch"), ([11, 4], [-2, -1], "stretch"),
    ([11, 4], [2, 3], "not_larger"), ([11, 4], [2, 3], "not_smaller")])
def test_resize_sizes(rng, ctm, sizes, axes, policy):
    attrs = {"coordinate_transformation_mode": ctm, "keep_aspect_ratio_policy": policy}
    if axes:
        attrs["axes"] = axes
    check_resize(rand(rng, 2, 3, 7, 10), [None, None, np.array(sizes, I64)], attrs)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_negative_axes(rng, policy):
    """ORT 1.32 ignores keep_aspect_ratio_policy's resize when axes are negative (returns X)
    and onnx.reference fails: negative axes must mean what the positive ones do."""
    resize, x, sizes = get_op("Resize"), rand(rng, 2, 3, 7, 10), np.array([11, 4], I64)
    neg = resize.run([x, None, None, sizes], {"axes": [-2, -1], "keep_aspect_ratio_policy": policy})
    pos = resize.run([x, None, None, sizes], {"axes": [2, 3], "keep_aspect_ratio_policy": policy})
    np.testing.assert_array_equal(neg[0], pos[0])


def test_resize_defaults_are_half_pixel_round_prefer_floor(rng):
    check_resize(rand(rng, 1, 2, 5, 6), [np.array([], np.float32),
                                         np.array([1, 1, 2.5, 1.5], np.float32)], {})


@pytest.mark.parametrize("nearest,want", [
    ("round_prefer_floor", [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]),
    ("round_prefer_ceil", [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]),  # no exact ties here
    ("floor", [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]), ("ceil", [1, 1, 2, 2, 3, 3, 4, 4, 4, 4])])
def test_resize_tf_half_pixel_for_nearest(rng, nearest, want):
    """Opset-11 mode that neither ORT 1.32 nor onnx.reference still implements: the indices
    are worked out by hand from x_original = (x + 0.5) / scale (0.25, 0.75, 1.25, ...); axes
    with scale 1 stay as they are (the formula would map row 0 to 0.5, and ceil to row 1)."""
    x = rand(rng, 1, 2, 3, 5)
    y = get_op("Resize").run([x, None, np.array([1, 1, 1, 2], np.float32)],
                             {"coordinate_transformation_mode": "tf_half_pixel_for_nearest",
                              "nearest_mode": nearest})[0]
    np.testing.assert_array_equal(y, x[..., want])


MATMULS = [((7, 13), (13, 5)), ((3, 7, 13), (13, 5)), ((13,), (3, 13, 5)), ((3, 7, 13), (13,)),
           ((13,), (13,)), ((2, 1, 7, 13), (3, 13, 5)), ((4, 1, 7, 13), (1, 2, 13, 5))]


@pytest.mark.parametrize("sa,sb", MATMULS)
def test_matmul(rng, sa, sb):
    check("MatMul", [rand(rng, *sa), rand(rng, *sb)])


@pytest.mark.parametrize("sa,sb", MATMULS)
def test_matmul_cost_matches_brute_force(sa, sb):
    """Brute force: multiply matrices of ones, recording each product through a counter."""
    mm = get_op("MatMul")
    out = mm.shape({}, [sa, sb])[0]
    a2 = np.ones((1, *sa) if len(sa) == 1 else sa)
    b2 = np.ones((*sb, 1) if len(sb) == 1 else sb)
    n = 0
    for ia in itertools.product(*map(range, np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))):
        for _ in itertools.product(range(a2.shape[-2]), range(b2.shape[-1]), range(a2.shape[-1])):
            n += 1
    assert mm.cost({}, [sa, sb], [out]) == (n, 2 * n)


@pytest.mark.parametrize("ta,tb,alpha,beta,c", [(0, 0, 1.0, 1.0, (7, 5)), (1, 0, 0.5, 2.0, (5,)),
                                                (0, 1, 1.3, 0.7, (7, 1)), (1, 1, 1.0, 1.0, None)])
def test_gemm(rng, ta, tb, alpha, beta, c):
    a = rand(rng, *((13, 7) if ta else (7, 13)))
    b = rand(rng, *((5, 13) if tb else (13, 5)))
    check("Gemm", [a, b, None if c is None else rand(rng, *c)],
          {"transA": ta, "transB": tb, "alpha": alpha, "beta": beta})


@pytest.mark.parametrize("ta,tb,bias", [(0, 0, True), (1, 1, False), (1, 0, None)])
def test_gemm_cost_matches_brute_force(ta, tb, bias):
    gemm = get_op("Gemm")
    a, b = ((13, 7) if ta else (7, 13)), ((5, 13) if tb else (13, 5))
    attrs = gemm.parse_attrs({"transA": ta, "transB": tb})
    ins = [a, b] + ([] if bias is False else [(7, 5) if bias else None])
    n = sum(1 for _ in itertools.product(range(7), range(5), range(13)))
    assert gemm.cost(attrs, ins, [(7, 5)]) == (n, 2 * n + (7 * 5 if bias else 0))
