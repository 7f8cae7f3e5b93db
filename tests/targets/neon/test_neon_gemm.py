"""Packed GEMM / MatMul against the ops' float64 numpy references (Gemm, MatMul)."""
import numba
import numpy as np
import pytest

from edgeops.errors import EdgeOpsError
from edgeops.ops.gemm import Gemm
from edgeops.ops.matmul import MatMul
from edgeops.targets.neon import gemm as G
from edgeops.targets.neon._microkernel import MR, NR
from edgeops.targets.neon.blocking import Blocking, blocking_for, from_tiling

# fp32 contraction vs a float64 oracle: error grows ~ sqrt(K) * eps * |a||b|
RTOL, ATOL = 2e-5, 2e-5


def _ref_gemm(a, b, c=None, **attrs):
    full = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, **attrs}
    return Gemm.reference(a.astype(np.float64), b.astype(np.float64),
                          None if c is None else c.astype(np.float64), **full)


def _close(y, ref, k):
    scale = max(1.0, np.sqrt(k))
    np.testing.assert_allclose(y, ref, rtol=RTOL * scale, atol=ATOL * scale)


# ragged shapes around the micro-tile (MR x NR) and blocking edges
SHAPES = [(1, 1, 1), (MR - 1, NR + 3, 5), (MR + 1, NR - 1, 17), (37, 53, 71), (130, 67, 300),
          (3, 200, 9)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_gemm_matches_reference(rng, m, n, k):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    _close(G.gemm(a, b), _ref_gemm(a, b), k)


@pytest.mark.parametrize("blk", [Blocking(MR, NR, 2), Blocking(2 * MR + 3, 3 * NR, 7),
                                 Blocking(64, 128, 64), Blocking(1024, 8192, 512)])
def test_one_compiled_kernel_serves_every_blocking(rng, blk):
    """Tile sizes are runtime arguments: these blockings reuse the same compiled driver."""
    a = rng.standard_normal((75, 61), dtype=np.float32)
    b = rng.standard_normal((61, 83), dtype=np.float32)
    before = len(G._gemm_par.signatures)
    _close(G.gemm(a, b, blocking=blk), _ref_gemm(a, b), 61)
    assert len(G._gemm_par.signatures) == max(before, 1)


@pytest.mark.parametrize("ta,tb", [(0, 1), (1, 0), (1, 1)])
def test_gemm_transposes_and_c(rng, ta, tb):
    m, n, k = 19, 45, 33
    a = rng.standard_normal((k, m) if ta else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    for c in (rng.standard_normal((m, n), dtype=np.float32),
              rng.standard_normal((n,), dtype=np.float32),
              rng.standard_normal((m, 1), dtype=np.float32), np.float32(0.5)):
        y = G.gemm(a, b, c, alpha=0.75, beta=-1.5, trans_a=bool(ta), trans_b=bool(tb),
                   blocking=Blocking(8, 32, 8))
        ref = _ref_gemm(a, b, np.asarray(c), alpha=0.75, beta=-1.5, transA=ta, transB=tb)
        _close(y, ref, k)


@pytest.mark.parametrize("act", ["relu", "relu6", "silu", "hardswish", "gelu_tanh"])
def test_gemm_fused_bias_activation(rng, act):
    from edgeops.ops.conv_bn_act import ACTIVATIONS
    from edgeops.ops.gelu import Gelu
    m, n, k = 29, 70, 40
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    y = G.gemm(a, b, bias=bias, act=act, blocking=Blocking(16, 64, 16))
    pre = _ref_gemm(a, b) + bias
    if act == "gelu_tanh":
        ref = Gelu.reference(pre, approximate="tanh")
    else:
        ref = ACTIVATIONS[act][0](pre, -np.inf, np.inf)
    _close(y, ref, k)


@pytest.mark.parametrize("sa,sb", [((2, 3, 17, 9), (2, 3, 9, 40)), ((4, 1, 33, 8), (5, 8, 12)),
                                   ((9,), (3, 9, 7)), ((6, 11), (11,)), ((1, 20, 30), (30, 35))])
def test_matmul_batched_broadcast(rng, sa, sb):
    a = rng.standard_normal(sa, dtype=np.float32)
    b = rng.standard_normal(sb, dtype=np.float32)
    y = G.matmul(a, b, blocking=Blocking(16, 32, 4))
    ref = MatMul.reference(a.astype(np.float64), b.astype(np.float64))
    assert y.shape == ref.shape
    _close(y, ref, sa[-1])


def test_results_do_not_depend_on_thread_count(rng):
    a = rng.standard_normal((150, 90), dtype=np.float32)
    b = rng.standard_normal((90, 140), dtype=np.float32)
    t0 = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        y1 = G.gemm(a, b)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        yn = G.gemm(a, b)
    finally:
        numba.set_num_threads(t0)
    np.testing.assert_array_equal(y1, yn)


def test_noncontiguous_operands(rng):
    a = rng.standard_normal((40, 60), dtype=np.float32)[::2, 1::2]
    b = rng.standard_normal((90, 25), dtype=np.float32)[::3]
    _close(G.gemm(a, b), _ref_gemm(a, b), 30)


def test_bad_inputs_raise_clear_errors():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(EdgeOpsError, match="float32"):
        G.gemm(a.astype(np.float64), a.T)
    with pytest.raises(EdgeOpsError, match="inner dimensions"):
        G.gemm(a, a)
    with pytest.raises(EdgeOpsError, match="rank"):
        G.gemm(a[0], a.T)
    with pytest.raises(EdgeOpsError, match="broadcast"):
        G.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))


def test_blocking_from_a_planner_tiling(rng):
    from edgeops.tiling.tiling import LevelTiling, Tiling
    lv = lambda name, **t: LevelTiling(name, tuple(t.items()), tuple(t), (), ())  # noqa: E731
    rule = blocking_for("host")
    # nc from the outermost level, mc and kc from the next; each at least the rule's
    t = Tiling("gemm", "gemm", "neon", (lv("l3", m=512, n=9000, k=64),
                                        lv("l2", m=1001, n=96, k=40), lv("l1", m=MR, n=NR, k=40)))
    b = from_tiling(t)
    assert (b.mc, b.nc, b.kc) == (max(1001, rule.mc), max(9000, rule.nc), rule.kc)
    assert b.normalized().mc % MR == 0                                     # whole MR panels
    a = rng.standard_normal((70, 90), dtype=np.float32)
    bb = rng.standard_normal((90, 130), dtype=np.float32)
    _close(G.gemm(a, bb, tiling=t), _ref_gemm(a, bb), 90)
    conv = Tiling("conv2d", "im2col", "neon", (lv("l2", k=16, oh=4, ow=8, c=8, r=3, s=3),))
    assert from_tiling(conv).as_args() == rule.as_args()


def test_blocking_sources():
    assert from_tiling({"mc": 48, "nc": 96, "kc": 32}).as_args() == (48, 96, 32)
    assert from_tiling(None) == blocking_for("host")
    b = blocking_for("rpi5")
    assert b.mc % MR == 0 and b.nc % NR == 0 and b.kc % 2 == 0
    with pytest.raises(EdgeOpsError, match="mc"):
        Blocking(0, 8, 8)
    with pytest.raises(EdgeOpsError, match="cannot read"):
        from_tiling(object())


@pytest.mark.parametrize("m,n,k,tb", [(37, 53, 71, False), (130, 67, 1100, True),
                                      (MR, NR, 5, False)])
def test_b_packed_once_gives_the_same_bits(rng, m, n, k, tb):
    """A native step packs held weights whole once (``prepack_b``); the kernel reading them must
    give the bits of the per-call packing (ragged N, several K, M and N blocks, transposed B)."""
    from edgeops.targets.neon import epilogue as ep
    blk = Blocking(64, 64, 512)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    y = G.gemm(a, b, bias=bias, trans_b=tb, blocking=blk)
    _close(y, _ref_gemm(a, b, bias, transB=int(tb)), k)
    af, ars, acs = G.operand(a)
    bf, brs, bcs = G.operand(b.T if tb else b)
    lay = G.flat_layout(m, n, k, [0], [0], [0], None, blk)
    bpk = G.prepack_b(lay, bf, brs, bcs)
    out = np.full(m * n, np.nan, np.float32)
    G.run_flat(lay, af, ars, acs, np.zeros(1, np.float32), brs, bcs, out, n, np.float32(1),
               False, bias, ep.BIAS_COL, 0, 0.0, 0.0, bpk)
    np.testing.assert_array_equal(out.reshape(m, n), y)
