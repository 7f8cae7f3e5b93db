"""INT8 GEMM / Conv: bit-exact against the integer reference, which IS the specification:
int32 accumulation of zero-point-corrected products, int32 bias, then ONNX QuantizeLinear
(float32 multiply, round half to even, add zero point, saturate)."""
import numpy as np
import pytest

from edgeops.errors import EdgeOpsError
from edgeops.targets.neon._microkernel import QMR, QNR
from edgeops.targets.neon.blocking import Blocking
from edgeops.targets.neon.conv import geom_from_attrs
from edgeops.targets.neon.qgemm import qconv2d, qgemm, requant_multiplier


def reference_acc(a, a_zp, b, b_zp=0):
    return (a.astype(np.int64) - a_zp) @ (b.astype(np.int64) - b_zp)


def reference_requant(acc, bias, mult, y_zp, dtype, axis):
    """The spec. ``axis``: which axis of ``acc`` the output channels run along."""
    shape = [1] * acc.ndim
    shape[axis] = -1
    v = acc.astype(np.int32) + (0 if bias is None else bias.astype(np.int32).reshape(shape))
    q = np.rint(v.astype(np.float32) * mult.astype(np.float32).reshape(shape)) + np.float32(y_zp)
    info = np.iinfo(dtype)
    return np.clip(q, info.min, info.max).astype(dtype)


def reference_qconv(x, x_zp, w, g):
    """Integer conv via an explicit padded window sum (independent of im2col)."""
    xp = np.full((g.n, g.c, g.h + 2 * g.r * g.dh + g.ph, g.w + 2 * g.s * g.dw + g.pw), x_zp,
                 np.int64)
    xp[:, :, g.ph:g.ph + g.h, g.pw:g.pw + g.w] = x
    xp -= x_zp
    out = np.zeros((g.n, g.k, g.oh, g.ow), np.int64)
    for k in range(g.k):
        grp = k // g.kg
        for r in range(g.r):
            for s in range(g.s):
                win = xp[:, grp * g.cg:(grp + 1) * g.cg,
                         r * g.dh: r * g.dh + g.sh * (g.oh - 1) + 1: g.sh,
                         s * g.dw: s * g.dw + g.sw * (g.ow - 1) + 1: g.sw]
                out[:, k] += np.einsum("nchw,c->nhw", win, w[k, :, r, s].astype(np.int64))
    return out


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (QMR + 1, QNR - 3, 7), (37, 70, 129), (64, 33, 256)])
@pytest.mark.parametrize("adt", [np.uint8, np.int8])
def test_qgemm_int32_exact(rng, m, n, k, adt):
    info = np.iinfo(adt)
    a = rng.integers(info.min, info.max + 1, (m, k), dtype=adt)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    azp = int(rng.integers(info.min, info.max + 1))
    for blk in (None, Blocking(QMR, QNR, 4), Blocking(3 * QMR + 5, 2 * QNR, 9)):
        acc = qgemm(a, b, a_zero_point=azp, blocking=blk)
        np.testing.assert_array_equal(acc, reference_acc(a, azp, b))


@pytest.mark.parametrize("odt", [np.uint8, np.int8])
def test_qgemm_requant_exact(rng, odt):
    m, n, k = 45, 67, 300
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(-127, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-20000, 20000, n, dtype=np.int32)
    mult = requant_multiplier(0.02, rng.uniform(0.001, 0.01, n), 0.1)
    yzp = 128 if odt == np.uint8 else -3
    y = qgemm(a, b, a_zero_point=121, bias=bias, multiplier=mult, y_zero_point=yzp, out_dtype=odt)
    ref = reference_requant(reference_acc(a, 121, b), bias, mult, yzp, odt, axis=1)
    np.testing.assert_array_equal(y, ref)
    # the data must exercise saturation at both ends (ties: test_requant_ties_round_half_to_even)
    assert (y == np.iinfo(odt).max).any() and (y == np.iinfo(odt).min).any()
    assert ((y > np.iinfo(odt).min) & (y < np.iinfo(odt).max)).mean() > 0.3


def test_requant_ties_round_half_to_even():
    acc = np.array([[1, 3, 5, -1, -3, 7]], np.int32)   # x * 0.5 = .5 ties
    y = qgemm(np.ones((1, 1), np.uint8), np.ones((1, 1), np.int8), multiplier=[0.5],
              y_zero_point=0, out_dtype=np.int8)
    assert y.tolist() == [[0]]                       # 1 * 0.5 = 0.5 -> 0 (even)
    from edgeops.targets.neon.qgemm import requantize
    got = requantize(acc, [0.5], 0, np.int8)
    assert got.tolist() == [[0, 2, 2, 0, -2, 4]]


CONVS = [
    (2, 5, 9, 11, 7, 3, 3, 1, {"pads": (1, 1, 1, 1)}),
    (1, 6, 10, 8, 9, 3, 2, 3, {"strides": (2, 1), "pads": (1, 0, 0, 1), "dilations": (1, 2)}),
    (2, 8, 6, 7, 12, 1, 1, 1, {}),
    (1, 4, 9, 9, 4, 3, 3, 4, {"pads": (1, 1, 1, 1)}),            # depthwise via grouped GEMM
]


@pytest.mark.parametrize("n,c,h,w,k,r,s,group,attrs", CONVS)
def test_qconv_exact(rng, n, c, h, w, k, r, s, group, attrs):
    x = rng.integers(0, 256, (n, c, h, w), dtype=np.uint8)
    wt = rng.integers(-127, 128, (k, c // group, r, s), dtype=np.int8)
    g = geom_from_attrs(x.shape, wt.shape, {"group": group, **attrs})
    acc = reference_qconv(x, 77, wt, g)
    np.testing.assert_array_equal(qconv2d(x, 77, wt, None, g, blocking=Blocking(8, 32, 6)), acc)
    bias = rng.integers(-5000, 5000, k, dtype=np.int32)
    mult = requant_multiplier(0.03, rng.uniform(0.002, 0.02, k), 0.25)
    y = qconv2d(x, 77, wt, bias, g, mult, 100, np.uint8)
    np.testing.assert_array_equal(y, reference_requant(acc, bias, mult, 100, np.uint8, axis=1))


def test_int8_bad_inputs(rng):
    a = np.zeros((3, 4), np.uint8)
    with pytest.raises(EdgeOpsError, match="int8 or uint8"):
        qgemm(a.astype(np.float32), np.zeros((4, 2), np.int8))
    with pytest.raises(EdgeOpsError, match="zero point"):
        qgemm(a, np.zeros((4, 2), np.int8), a_zero_point=300)
    with pytest.raises(EdgeOpsError, match="multipliers"):
        qgemm(a, np.zeros((4, 2), np.int8), multiplier=[1.0, 2.0, 3.0])
    with pytest.raises(EdgeOpsError, match="inner"):
        qgemm(a, np.zeros((5, 2), np.int8))


# ---- QConvBnAct / QMatMul at the float boundary (targets/neon/qconv.py) -----------------------

def _q_attrs(rng, prefix, requant, act, qt, yt):
    lo, hi = (-128, 127) if qt == "int8" else (0, 255)
    ylo, yhi = (-128, 127) if yt == "int8" else (0, 255)
    return {f"{prefix}_scale": float(np.float32(rng.uniform(0.01, 0.05))),
            f"{prefix}_zero_point": int(rng.integers(lo, hi + 1)) // 2, f"{prefix}_type": qt,
            "y_scale": float(np.float32(rng.uniform(0.05, 0.2))) if requant else 0.0,
            "y_zero_point": int(rng.integers(ylo, yhi + 1)) // 2 if requant else 0,
            "y_type": yt, "activation": act}


@pytest.mark.parametrize("requant,act,qt", [(False, "none", "int8"), (False, "silu", "uint8"),
                                            (True, "none", "uint8"), (True, "relu", "int8")])
@pytest.mark.parametrize("n,c,h,w,k,r,s,group,conv", CONVS[:3])
def test_qconv_bn_act_exact_vs_integer_reference(rng, requant, act, qt, n, c, h, w, k, r, s,
                                                 group, conv):
    """The NEON kernel equals the op's integer reference (QConvBnAct.reference) bit for bit."""
    from edgeops.ops import get_op
    from edgeops.ops.conv_bn_act import ACTIVATIONS
    from edgeops.targets.neon.qconv import qconv_bn_act
    op = get_op("QConvBnAct", "ai.edgeops")
    attrs = op.parse_attrs({**_q_attrs(rng, "x", requant, act, qt, "int8" if qt == "uint8" else "uint8"),
                            "group": group, **{kk: list(v) for kk, v in conv.items()}})
    x = (rng.standard_normal((n, c, h, w)) * 2).astype(np.float32)   # saturates at both ends
    wt = rng.integers(-127, 128, (k, c // group, r, s)).astype(np.float32)
    ws = rng.uniform(1e-3, 1e-2, k).astype(np.float32)
    b = rng.integers(-3000, 3000, k).astype(np.float32)
    want = op.reference(x, wt, ws, b, **attrs)
    g = geom_from_attrs(x.shape, wt.shape, attrs)
    got = qconv_bn_act(x, wt, ws, b, g, attrs,
                       lambda y, a: ACTIVATIONS[a["activation"]][0](y, a["clip_min"], a["clip_max"]))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    if requant:
        steps = (got / np.float32(attrs["y_scale"]))
        assert np.allclose(steps, np.rint(steps), atol=1e-3)   # on the output grid


@pytest.mark.parametrize("requant,act", [(False, "none"), (True, "relu"), (False, "relu")])
@pytest.mark.parametrize("shape,n", [((1, 5), 3), ((2, 7, 33), 19), ((QMR + 1, 130), QNR + 5)])
def test_qmatmul_exact_vs_integer_reference(rng, requant, act, shape, n):
    from edgeops.ops import get_op
    from edgeops.targets.neon.qconv import qmatmul
    op = get_op("QMatMul", "ai.edgeops")
    attrs = op.parse_attrs(_q_attrs(rng, "a", requant, act, "int8", "uint8"))
    a = (rng.standard_normal(shape) * 2).astype(np.float32)
    b = rng.integers(-127, 128, (shape[-1], n)).astype(np.float32)
    bs = rng.uniform(1e-3, 1e-2, n).astype(np.float32)
    bias = rng.integers(-3000, 3000, n).astype(np.float32)
    for bb in (bias, None):
        np.testing.assert_array_equal(qmatmul(a, b, bs, bb, attrs), op.reference(a, b, bs, bb, **attrs))


def test_q_ops_refuse_non_integer_weights(rng):
    from edgeops.ops import get_op
    from edgeops.targets.neon.qconv import qmatmul
    op = get_op("QMatMul", "ai.edgeops")
    attrs = op.parse_attrs(_q_attrs(rng, "a", False, "none", "int8", "int8"))
    with pytest.raises(EdgeOpsError, match="integers"):
        qmatmul(np.ones((2, 3), np.float32), np.full((3, 2), 0.5, np.float32),
                np.ones(2, np.float32), None, attrs)
    with pytest.raises(EdgeOpsError, match="2\\*\\*24"):
        qmatmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), np.ones(2, np.float32),
                np.full(2, 2.0 ** 25, np.float32), attrs)
