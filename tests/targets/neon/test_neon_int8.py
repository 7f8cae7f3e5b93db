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
    got = qconv_bn_act(x, wt, ws, b, attrs,
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


# ---- the fused pipeline's blocking, threading, chunking and prepared-weight cache -------------

def _conv_case(rng, n, c, h, w, k, r, s, group, conv, requant, act="relu", qt="uint8"):
    from edgeops.ops import get_op
    op = get_op("QConvBnAct", "ai.edgeops")
    attrs = op.parse_attrs({**_q_attrs(rng, "x", requant, act, qt, "int8"), "group": group,
                            **{kk: list(v) for kk, v in conv.items()}})
    x = (rng.standard_normal((n, c, h, w)) * 2).astype(np.float32)
    wt = rng.integers(-128, 128, (k, c // group, r, s)).astype(np.float32)
    ws = rng.uniform(1e-3, 1e-2, k).astype(np.float32)
    b = rng.integers(-3000, 3000, k).astype(np.float32)
    return op, attrs, x, wt, ws, b


def _act_fn(y, a):
    from edgeops.ops.conv_bn_act import ACTIVATIONS
    return ACTIVATIONS[a["activation"]][0](y, a["clip_min"], a["clip_max"])


@pytest.mark.parametrize("blk", [Blocking(QMR, QNR, 4), Blocking(2 * QMR, QNR, 6),
                                 Blocking(QMR, 2 * QNR, 10)])
@pytest.mark.parametrize("requant", [False, True])
def test_qconv_fused_blockings_exact(rng, blk, requant):
    """Blocks smaller than the problem along every GEMM axis (several kc blocks with an odd
    tail, ragged mc/nc blocks), batch 3 in image chunks of 2: still the integer reference."""
    import edgeops.targets.neon.qconv as qc
    op, attrs, x, wt, ws, b = _conv_case(rng, 3, 7, 11, 13, 2 * QMR + 3, 3, 3, 1,
                                         {"pads": (1, 2, 0, 1), "strides": (1, 2)}, requant)
    want = op.reference(x, wt, ws, b, **attrs)
    old = qc._COLS_BUDGET
    try:
        per_img = qc.packed_size(11 * 7, 7 * 9, QNR)
        qc._COLS_BUDGET = 2 * 2 * per_img          # two images per chunk
        got = qc.qconv_bn_act(x, wt, ws, b, attrs, _act_fn, blk)
    finally:
        qc._COLS_BUDGET = old
    np.testing.assert_array_equal(got, want)


def test_qconv_and_qmatmul_parallel_path_exact(rng):
    """Problems above the serial threshold run the parallel kernel (all threads)."""
    from edgeops.ops import get_op
    from edgeops.targets.neon.qconv import qconv_bn_act, qmatmul
    op, attrs, x, wt, ws, b = _conv_case(rng, 2, 19, 23, 21, 37, 3, 3, 1, {"pads": (1, 1, 1, 1)},
                                         True)
    np.testing.assert_array_equal(qconv_bn_act(x, wt, ws, b, attrs, _act_fn),
                                  op.reference(x, wt, ws, b, **attrs))
    mop = get_op("QMatMul", "ai.edgeops")
    ma = mop.parse_attrs(_q_attrs(rng, "a", False, "relu", "uint8", "int8"))
    a = (rng.standard_normal((3, 61, 150)) * 2).astype(np.float32)
    bm = rng.integers(-128, 128, (150, 131)).astype(np.float32)
    bs = rng.uniform(1e-3, 1e-2, 131).astype(np.float32)
    np.testing.assert_array_equal(qmatmul(a, bm, bs, None, ma), mop.reference(a, bm, bs, **ma))


def test_prepared_weights_follow_the_inputs(rng):
    """The per-node cache (keyed by the attrs dict) re-prepares when the weights, bias or
    scales of a call differ from the prepared ones: never a stale result."""
    from edgeops.targets.neon.qconv import qconv_bn_act, qmatmul
    op, attrs, x, wt, ws, b = _conv_case(rng, 1, 5, 9, 8, 11, 3, 3, 1, {"pads": (1, 1, 1, 1)},
                                         False, act="none")
    w2 = np.clip(-wt, -128, 127)
    calls = [(wt, ws, b), (wt, ws, b), (w2, ws, b), (w2, ws * 2, b), (w2, ws * 2, None),
             (w2, ws * 2, b + 1), (wt[:, :, :2, :2].copy(), ws, b)]
    for w_i, ws_i, b_i in calls:
        np.testing.assert_array_equal(qconv_bn_act(x, w_i, ws_i, b_i, attrs, _act_fn),
                                      op.reference(x, w_i, ws_i, b_i, **attrs))
    from edgeops.ops import get_op
    mop = get_op("QMatMul", "ai.edgeops")
    ma = mop.parse_attrs(_q_attrs(rng, "a", True, "none", "int8", "int8"))
    a = rng.standard_normal((4, 9)).astype(np.float32)
    bm = rng.integers(-128, 128, (9, 5)).astype(np.float32)
    for b_i in (bm, bm[:, ::-1].copy(), bm):
        np.testing.assert_array_equal(qmatmul(a, b_i, np.float32(0.01), None, ma),
                                      mop.reference(a, b_i, np.float32(0.01), **ma))


def _gemm_packed_args():
    ap = np.zeros(QMR * 16, np.int16)
    bp = np.zeros(QNR * 16, np.int16)
    return (0, QMR, 0, QNR, 16, 16, QMR, QNR, ap, 0, 1, bp, 0, 1, np.zeros(QMR * QNR, np.int32),
            0, QNR)


def test_fused_int8_gemm_is_smlal_on_aarch64():
    """The fused pipeline's GEMM, compiled for Cortex-A76: widening multiply-accumulates
    (smlal) in a hot loop that keeps its accumulators in registers."""
    from edgeops.targets.neon import asm
    from edgeops.targets.neon.qfused import _gemm_packed
    r = asm.aarch64_asm(_gemm_packed, _gemm_packed_args(), "qfused._gemm_packed")
    blocks = [b for b in r.asm.split("\n.LBB") if "\tbl\t" not in b]
    hot = max(blocks, key=lambda b: b.count("smlal"))
    assert hot.count("smlal") >= 48, r.counts      # 8 x 12 tile x (k even, k odd) / 4 lanes
    assert not any(ln.strip().startswith(("str", "stp", "st1")) for ln in hot.splitlines())


def test_fused_int8_gemm_uses_int16_pair_dot_products_on_x86():
    """On an x86 host the same loop is vpdpwssd (AVX512-VNNI / AVX-VNNI) or vpmaddwd."""
    import platform
    import re

    import llvmlite.binding as llb
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("x86 instruction check: this host is not x86")
    from numba import njit, typeof

    from edgeops.targets.neon.qfused import _gemm_packed
    # a fresh, uncached copy: code loaded from Numba's disk cache carries no assembly
    opts = {k: v for k, v in _gemm_packed.targetoptions.items() if k not in ("cache", "nopython")}
    fresh = njit(**opts)(_gemm_packed.py_func)
    sig = tuple(typeof(a) for a in _gemm_packed_args())
    fresh.compile(sig)
    text = fresh.inspect_asm(sig)
    feats = llb.get_host_cpu_features()
    want = "vpdpwssd" if feats.get("avx512vnni") or feats.get("avxvnni") else "vpmaddwd"
    assert len(re.findall(rf"\b{want}\b", text)) >= 16
