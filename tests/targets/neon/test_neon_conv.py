"""Conv2D decompositions (im2col+GEMM, direct depthwise, Winograd) and the fused ConvBnAct
epilogue against the float64 Conv / ConvBnAct references."""
import numpy as np
import pytest

from edgeops.errors import EdgeOpsError
from edgeops.ops.conv import Conv
from edgeops.ops.conv_bn_act import ConvBnAct
from edgeops.targets.neon import chooser, epilogue as ep
from edgeops.targets.neon.blocking import Blocking
from edgeops.targets.neon.conv import conv2d_im2col, geom_from_attrs
from edgeops.targets.neon import depthwise
from edgeops.targets.neon.depthwise import conv2d_depthwise, uses_dw3
from edgeops.targets.neon.winograd import conv2d_winograd


def _case(rng, n, c, h, w, k, r, s, group=1, bias=True, **attrs):
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((k, c // group, r, s), dtype=np.float32)
    b = rng.standard_normal(k, dtype=np.float32) if bias else None
    attrs = {"group": group, **attrs}
    return x, wt, b, attrs, geom_from_attrs(x.shape, wt.shape, attrs)


def _ref(x, w, b, attrs, act="none", lo=-np.inf, hi=np.inf):
    full = {"auto_pad": "NOTSET", "kernel_shape": None, "strides": None, "dilations": None,
            "pads": None, "group": 1, **attrs}
    return ConvBnAct.reference(x.astype(np.float64), w.astype(np.float64),
                               None if b is None else b.astype(np.float64), activation=act,
                               clip_min=lo, clip_max=hi, **full)


def _close(y, ref, kk):
    tol = 3e-6 * max(8.0, np.sqrt(kk)) * max(1.0, float(np.abs(ref).max()) ** 0.5)
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)


# (n, c, h, w, k, r, s, group, attrs): ragged sizes, batch > 1, groups, strides, dilations, pads
IM2COL_CASES = [
    (2, 3, 11, 13, 5, 3, 3, 1, {"pads": (1, 1, 1, 1)}),
    (1, 8, 9, 10, 12, 3, 3, 4, {"strides": (2, 2), "pads": (1, 0, 2, 1)}),
    (3, 6, 12, 7, 9, 2, 3, 3, {"dilations": (2, 1), "pads": (0, 2, 1, 0)}),
    (2, 16, 7, 7, 33, 1, 1, 1, {}),                      # pointwise: no im2col
    (1, 6, 15, 14, 10, 1, 1, 2, {"strides": (2, 3)}),    # 1x1 strided: im2col
    (1, 3, 23, 19, 7, 7, 7, 1, {"strides": (2, 2), "pads": (3, 3, 3, 3)}),
    (2, 4, 8, 8, 4, 3, 3, 1, {"auto_pad": "SAME_UPPER", "strides": (2, 2)}),
    # one output pixel: conv._gemv instead of the GEMM (K ragged against its 16 lanes)
    (2, 6, 3, 3, 38, 3, 3, 2, {"strides": (2, 2)}),
    (1, 21, 1, 1, 19, 3, 3, 1, {"pads": (1, 1, 1, 1)}),
]


@pytest.mark.parametrize("n,c,h,w,k,r,s,group,attrs", IM2COL_CASES)
def test_im2col_matches_conv_reference(rng, n, c, h, w, k, r, s, group, attrs):
    x, wt, b, attrs, g = _case(rng, n, c, h, w, k, r, s, group, **attrs)
    y = conv2d_im2col(x, wt, b, g, blocking=Blocking(16, 64, 24))
    ref = Conv.reference(x.astype(np.float64), wt.astype(np.float64), b.astype(np.float64),
                         **{"auto_pad": "NOTSET", "kernel_shape": None, "strides": None,
                            "dilations": None, "pads": None, **attrs})
    assert y.shape == ref.shape
    _close(y, ref, g.cg * r * s)


DW_CASES = [
    (2, 8, 13, 11, 8, 3, 3, {"pads": (1, 1, 1, 1)}),
    (1, 5, 17, 16, 10, 3, 3, {"strides": (2, 2), "pads": (1, 1, 1, 1)}),   # multiplier 2
    (1, 6, 12, 12, 6, 5, 5, {"dilations": (2, 2), "pads": (4, 3, 2, 4)}),
    (3, 4, 9, 7, 4, 3, 2, {"strides": (1, 3)}),
    # wide enough for the vectorised 3x3 rows (interior >= 16 outputs; ragged last vector)
    (2, 3, 7, 37, 6, 3, 3, {"pads": (1, 1, 1, 1)}),
    (1, 4, 9, 71, 4, 3, 3, {"strides": (2, 2), "pads": (0, 1, 2, 0)}),
    (1, 2, 11, 50, 2, 3, 3, {"dilations": (2, 1), "strides": (1, 2), "pads": (2, 0, 2, 1)}),
    (1, 3, 5, 33, 3, 3, 3, {}),
]


@pytest.mark.parametrize("n,c,h,w,k,r,s,attrs", DW_CASES)
@pytest.mark.parametrize("act", ["none", "relu6"])
def test_depthwise_direct(rng, n, c, h, w, k, r, s, attrs, act):
    x, wt, b, attrs, g = _case(rng, n, c, h, w, k, r, s, group=c, **attrs)
    y = conv2d_depthwise(x, wt, b, g, ep.activation(act))
    _close(y, _ref(x, wt, b, attrs, act), r * s)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 1, 1, 1), (2, 0, 0, 2)])
@pytest.mark.parametrize("mult,act", [(1, "relu6"), (2, "none"), (3, "silu")])
def test_depthwise_3x3_narrow_rows(rng, stride, pads, mult, act):
    """3x3 rows of every width from 1 to 20 outputs: narrower than a vector (masked loads and
    stores on x86, scalar edges on 4-lane NEON), a vector plus a partial one, padding on one
    side only, and a clamp or an activation on the row."""
    c, h = 2, 5
    for ow in range(1, 21):
        w = (ow - 1) * stride + 3 - pads[1] - pads[3]
        if w < 1:
            continue
        x, wt, b, attrs, g = _case(rng, 2, c, h, w, c * mult, 3, 3, group=c,
                                   strides=(stride, stride), pads=pads)
        assert uses_dw3(g) and g.ow == ow
        y = conv2d_depthwise(x, wt, b, g, ep.activation(act))
        _close(y, _ref(x, wt, b, attrs, act), 9)
        # the kernel into a buffer with guard cells either side: nothing stored outside Y
        guard = np.full(y.size + 64, 7.0, np.float32)
        code, p0, p1 = ep.activation(act)
        depthwise._dw3_parallel(x.reshape(-1), wt.reshape(-1), b, True, guard[32:-32], g.n,
                                g.c, g.h, g.w, g.k, g.oh, g.ow, g.sh, g.sw, g.dh, g.ph, g.pw,
                                code, float(p0), float(p1))
        assert (guard[:32] == 7).all() and (guard[-32:] == 7).all()
        np.testing.assert_array_equal(guard[32:-32], y.reshape(-1))


WINO_CASES = [(1, 3, 8, 8, 4, {"pads": (1, 1, 1, 1)}), (2, 5, 11, 9, 7, {"pads": (1, 1, 1, 1)}),
              (1, 16, 7, 13, 9, {}), (2, 4, 6, 5, 3, {"pads": (0, 2, 1, 0)})]


@pytest.mark.parametrize("n,c,h,w,k,attrs", WINO_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_winograd_3x3(rng, n, c, h, w, k, attrs, bias):
    x, wt, b, attrs, g = _case(rng, n, c, h, w, k, 3, 3, bias=bias, **attrs)
    y = conv2d_winograd(x, wt, b, g, blocking=Blocking(8, 32, 4))
    # Winograd reassociates the sums (transforms in fp32): a little more error than im2col
    _close(y, _ref(x, wt, b, attrs), 4 * c * 9)


@pytest.mark.parametrize("act,lo,hi", [("relu", None, None), ("relu6", None, None),
                                       ("clip", -0.5, 1.25), ("silu", None, None),
                                       ("hardswish", None, None)])
@pytest.mark.parametrize("method", ["im2col", "winograd", "depthwise"])
def test_conv_bn_act_epilogue(rng, act, lo, hi, method):
    group = 6 if method == "depthwise" else 1
    x, wt, b, attrs, g = _case(rng, 2, 6, 10, 9, 6, 3, 3, group, pads=(1, 1, 1, 1))
    y = chooser.conv2d(x, wt, b, g, ep.activation(act, lo, hi), method=method)
    ref = _ref(x, wt, b, attrs, act, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    _close(y, ref, 6 * 9)


def test_chooser_candidates_and_override():
    x_shape, w_shape = (1, 32, 28, 28), (32, 32, 3, 3)
    g = geom_from_attrs(x_shape, w_shape, {"pads": (1, 1, 1, 1)})
    assert set(chooser.candidates(g)) == {"im2col", "winograd"}
    pick, why = chooser.choose(g, "host")
    assert pick in ("im2col", "winograd") and why
    dw = geom_from_attrs((1, 32, 28, 28), (32, 1, 3, 3), {"group": 32, "pads": (1, 1, 1, 1)})
    assert chooser.choose(dw, "host")[0] == "depthwise"
    s = geom_from_attrs(x_shape, w_shape, {"strides": (2, 2)})
    assert chooser.candidates(s) == ["im2col"]
    saved = chooser.OVERRIDES.get("host")
    chooser.OVERRIDES["host"] = {chooser.signature(g): "im2col"}
    try:
        assert chooser.choose(g, "host") == ("im2col", "measured override for host")
    finally:
        chooser.OVERRIDES["host"] = saved if saved is not None else {}
    prev = chooser.cost_hook()
    chooser.set_cost_hook(lambda geom, d, board: {"im2col": 2.0, "winograd": 1.0}[d])
    try:
        assert chooser.choose(g, "host")[0] == "winograd"
        chooser.set_cost_hook(lambda geom, d, board: {"im2col": 1.0, "winograd": 2.0}[d])
        assert chooser.choose(g, "host")[0] == "im2col"
    finally:
        chooser.set_cost_hook(prev)


def test_chooser_uses_the_simulator_by_default():
    """Importing the target installs the simulator's cost; its pick is the decomposition with the
    lowest predicted latency, and a measured override still wins over it."""
    from edgeops.targets.neon import simcost
    assert chooser.cost_hook() is simcost.simulator_cost
    g = geom_from_attrs((1, 32, 20, 20), (48, 32, 3, 3), {"pads": (1, 1, 1, 1)})
    costs = {d: simcost.simulator_cost(g, d, "host") for d in chooser.candidates(g)}
    assert all(t is not None and t > 0 for t in costs.values()), costs
    pick, why = chooser.choose(g, "host")
    assert pick == min(costs, key=costs.get) and why.startswith("simulator"), (pick, why, costs)
    # a 1x1 conv is priced as the planner's implicit GEMM (no column copy, as the kernel runs it)
    pw = geom_from_attrs((1, 16, 9, 9), (8, 16, 1, 1), {})
    assert simcost.planner_decomposition(pw, "im2col") == "implicit_gemm"
    # the planner's spec has one pad/stride for both axes: anything else is "no opinion"
    odd = geom_from_attrs((1, 4, 9, 9), (4, 4, 3, 3), {"strides": (1, 2)})
    assert simcost.simulator_cost(odd, "im2col", "host") is None
    assert chooser.choose(odd, "host")[1].startswith("cost model")
    other = next(d for d in costs if d != pick)
    saved = chooser.OVERRIDES.get("host")
    chooser.OVERRIDES["host"] = {chooser.signature(g): other}
    try:
        assert chooser.choose(g, "host") == (other, "measured override for host")
    finally:
        chooser.OVERRIDES["host"] = saved if saved is not None else {}


def test_conv_bad_inputs(rng):
    x, wt, b, attrs, g = _case(rng, 1, 4, 6, 6, 4, 3, 3)
    with pytest.raises(EdgeOpsError, match="float32"):
        conv2d_im2col(x.astype(np.float64), wt, b, g)
    with pytest.raises(EdgeOpsError, match="do not match"):
        conv2d_im2col(x[:, :3], wt, b, g)
    with pytest.raises(EdgeOpsError, match="3x3"):
        conv2d_winograd(x, wt[:, :, :2], b, geom_from_attrs(x.shape, (4, 4, 2, 3), {}))
    with pytest.raises(EdgeOpsError, match="group == C"):
        conv2d_depthwise(x, wt, b, g)
    with pytest.raises(EdgeOpsError, match="2-D"):
        geom_from_attrs((1, 4, 6), (4, 4, 3), {})
