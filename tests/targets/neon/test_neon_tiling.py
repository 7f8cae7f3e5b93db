"""The planner's Tiling reaches the NEON kernels: ``accepts_tiling`` (the lowering hook) and
``blocking.from_tiling`` turn it into runtime (mc, nc, kc) of ONE compiled kernel. Different
tilings change the blocking the kernel runs with, never the numbers beyond fp32 rounding."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeops.ops.gemm import Gemm
from edgeops.targets.neon import accepts_tiling, gemm as G
from edgeops.targets.neon._microkernel import MR, NR
from edgeops.targets.neon.blocking import blocking_for, from_tiling
from edgeops.targets.neon.conv import conv2d_im2col, geom_from_attrs
from edgeops.tiling import LevelTiling, Tiling


def _lv(name, **t):
    return LevelTiling(name, tuple(t.items()), tuple(t), (), ())


def _gemm_tiling(outer, l1, target="neon"):
    return Tiling("gemm", "gemm", target, (_lv("outer", **outer), _lv("l1", **l1),
                                           _lv("reg", m=1, n=NR, k=1)))


# T1 asks for blocks below the board rule's (raised to the rule); T2 for a K block above it
T1 = _gemm_tiling(dict(m=64, n=2 * NR, k=96), dict(m=MR, n=NR, k=40))
T2 = _gemm_tiling(dict(m=96, n=5 * NR, k=200), dict(m=3 * MR, n=NR, k=1200))
RULE = blocking_for("host")


@pytest.fixture
def used_blockings(monkeypatch):
    """(mc, nc, kc) of every packed-GEMM launch."""
    seen = []
    orig = G._gemm_par

    def spy(*args):
        seen.append(tuple(args[-5:-2]))
        return orig(*args)

    monkeypatch.setattr(G, "_gemm_par", spy)
    return seen


def test_two_tilings_same_numbers_different_blocking(rng, used_blockings):
    a = rng.standard_normal((77, 1100), dtype=np.float32)
    b = rng.standard_normal((1100, 141), dtype=np.float32)
    ref = Gemm.reference(a.astype(np.float64), b.astype(np.float64), None, alpha=1.0, beta=1.0,
                         transA=0, transB=0)
    y1 = G.gemm(a, b, tiling=T1)
    y2 = G.gemm(a, b, tiling=T2)
    assert len(used_blockings) == 2 and used_blockings[0] != used_blockings[1]
    b1, b2 = from_tiling(T1), from_tiling(T2)
    # blocks below the rule's are raised to it (the register level is skipped); larger stay
    assert (b1.mc, b1.nc, b1.kc) == RULE.as_args()
    assert (b2.mc, b2.nc, b2.kc) == (RULE.mc, RULE.nc, 1200)
    # what ran is the tiling's blocking, fitted to the problem (never larger than asked)
    for used, want in zip(used_blockings, (b1, b2)):
        assert used == want.fitted(77, 141, 1100)
    tol = 2e-5 * np.sqrt(1100)
    np.testing.assert_allclose(y1, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(y2, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(y1, y2, rtol=tol, atol=tol)


def test_conv_tiling_sets_the_im2col_gemm_blocking(rng, used_blockings):
    x = rng.standard_normal((2, 64, 13, 11), dtype=np.float32)
    w = rng.standard_normal((19, 64, 3, 3), dtype=np.float32)
    g = geom_from_attrs(x.shape, w.shape, {"pads": (1, 1, 1, 1)})
    tiles = [Tiling("conv2d", "im2col", "neon", (_lv("outer", k=16, c=5, oh=4, ow=11, r=3, s=3),
                                                 _lv("l1", k=8, c=4, oh=2, ow=11, r=3, s=3))),
             Tiling("conv2d", "im2col", "neon", (_lv("outer", k=19, c=64, oh=13, ow=11, r=3,
                                                     s=3),))]     # K = 576: one K block
    ys = [conv2d_im2col(x, w, None, g, tiling=t) for t in tiles]
    assert used_blockings[0] != used_blockings[1]
    # small planner blocks are raised to the rule's; a large one (M = k = 256, whole MR panels;
    # N = oh*ow = 8192; K = c*r*s = 1152) is kept
    assert from_tiling(tiles[0]).as_args() == RULE.as_args()
    big = Tiling("conv2d", "im2col", "neon", (_lv("l1", k=256, c=128, oh=64, ow=128, r=3, s=3),))
    assert from_tiling(big).as_args() == (max(256, RULE.mc), max(8192, RULE.nc), 1152)
    np.testing.assert_allclose(ys[0], ys[1], rtol=1e-4, atol=1e-4)


def test_readings_are_remembered_only_for_immutable_tilings():
    """A package node hands the same frozen Tiling every call: read once; an equal tiling made
    again reads the same numbers; a mapping (mutable) is read again each call."""
    from edgeops.targets.neon import blocking
    k1, k2 = RULE.kc + 50, RULE.kc + 70          # above the rule's kc: the tiling's own
    a = _gemm_tiling(dict(m=64, n=3 * NR, k=96), dict(m=2 * MR, n=NR, k=k1))
    first = from_tiling(a)
    assert from_tiling(a) is first                       # remembered for this object
    again = _gemm_tiling(dict(m=64, n=3 * NR, k=96), dict(m=2 * MR, n=NR, k=k1))
    assert again is not a and from_tiling(again).as_args() == first.as_args()
    other = _gemm_tiling(dict(m=64, n=3 * NR, k=96), dict(m=2 * MR, n=NR, k=k2))
    assert from_tiling(other).kc == k2 and first.kc == k1
    m = {"mc": MR, "nc": NR, "kc": 64}
    assert from_tiling(m).kc == 64
    m["kc"] = 96
    assert from_tiling(m).kc == 96
    assert all(v[0] is not m for v in blocking._MEMO.values())


def test_conv_geometry_follows_its_attributes_and_shapes():
    """The geometry is remembered per shapes and attribute values: other pads, strides or a
    list attribute changed in place give the other geometry."""
    attrs = {"pads": [1, 1, 1, 1], "strides": [1, 1]}
    g1 = geom_from_attrs((1, 4, 9, 7), (8, 4, 3, 3), attrs)
    assert (g1.oh, g1.ow) == (9, 7) and geom_from_attrs((1, 4, 9, 7), (8, 4, 3, 3), attrs) is g1
    attrs["strides"][0] = 2
    g2 = geom_from_attrs((1, 4, 9, 7), (8, 4, 3, 3), attrs)
    assert (g2.oh, g2.ow, g2.sh) == (5, 7, 2)
    g3 = geom_from_attrs((1, 4, 11, 7), (8, 4, 3, 3), {"pads": [0, 0, 0, 0]})
    assert (g3.oh, g3.ow, g3.ph) == (9, 5, 0)


def test_degenerate_planner_blocks_are_raised_to_the_rule():
    t = _gemm_tiling(dict(m=1, n=1, k=1), dict(m=1, n=1, k=2))
    assert from_tiling(t).as_args() == RULE.as_args()
    assert RULE.mc % MR == 0 and RULE.nc % NR == 0


def test_accepts_tiling_hook():
    assert accepts_tiling("neon.gemm_packed", T1) is True
    assert accepts_tiling("neon.conv_bn_act_im2col", T1) is True
    assert "no cache blocking" in accepts_tiling("neon.layernorm", T1)
    cuda = _gemm_tiling(dict(m=8, n=8, k=8), dict(m=8, n=8, k=8), "cuda")
    assert "not 'cuda'" in accepts_tiling("neon.matmul_packed", cuda)
    odd = Tiling("softmax", "rows", "neon", (_lv("l1", rows=4, cols=64),))
    assert "cannot read" in accepts_tiling("neon.gemm_packed", odd)


def test_lowering_attaches_the_planner_tiling_and_it_reaches_the_kernel(rng, monkeypatch):
    """edgeops.lower puts the planner's tiling on a neon MatMul node (the target declares
    ``accepts_tiling``), the ORT custom op hands it to the kernel, results match ONNX Runtime."""
    import onnxruntime as ort

    import edgeops.ort as eort
    from edgeops.lower import lower
    from edgeops.targets.neon import register
    seen = []
    orig = register.matmul

    def spy(a, b, tiling=None, **kw):
        seen.append(tiling)
        return orig(a, b, tiling=tiling, **kw)

    monkeypatch.setattr(register, "matmul", spy)
    w = rng.standard_normal((96, 72), dtype=np.float32)
    gr = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 96])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [40, 72])],
                           [numpy_helper.from_array(w, "w")])
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    lw = lower(m, "rpi5", mode="all", targets=["neon"])
    p = lw.placements[0]
    assert p.kernel == "neon.matmul_packed" and p.tiling is not None, p
    t = Tiling.from_json(p.tiling)
    assert t.target == "neon"
    x = rng.standard_normal((40, 96), dtype=np.float32)
    got = eort.session(lw.model).run(None, {"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert seen and seen[-1] == t
