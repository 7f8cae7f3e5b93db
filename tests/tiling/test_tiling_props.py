"""Property tests: traffic >= compulsory and >= the Smith bound for every legal tiling, exact
dtype scaling, and illegal tilings always rejected (against an independent capacity count)."""
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from edgeops.errors import TilingError
from edgeops.tiling import (LevelTiling, Tiling, check, compulsory_bytes, parse_spec, predict,
                            problem_for, smith_bound_words)
from edgeops.tiling.bounds import onchip_words

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
ORDERS = [("m", "n", "k"), ("m", "k", "n"), ("n", "m", "k"), ("n", "k", "m"), ("k", "m", "n"), ("k", "n", "m")]


def npu_tiling(t1, t0, o1, o0, b1, b0, split):
    lv1 = LevelTiling("l1", tuple(zip("mnk", t1)), o1, (("A", b1), ("B", b1)), (("A", "l1"), ("B", "l1")))
    lv0 = LevelTiling("l0", tuple(zip("mnk", t0)), o0, (("A", b0), ("B", b0), ("C", b0)),
                      (("A", "l0a"), ("B", "l0b"), ("C", "l0c")))
    return Tiling("gemm", "gemm", "ascend", (lv1, lv0), split)


mult16 = st.integers(1, 5).map(lambda x: 16 * x)


@st.composite
def npu_case(draw):
    M, N, K = (draw(st.integers(1, 80)) for _ in range(3))
    t1 = [draw(mult16) for _ in range(3)]
    t0 = [draw(mult16) for _ in range(3)]
    o1, o0 = draw(st.sampled_from(ORDERS)), draw(st.sampled_from(ORDERS))
    b1, b0 = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    split = ((o1[0], 2),) if draw(st.booleans()) else ()
    return (M, N, K), t1, t0, o1, o0, b1, b0, split


@st.composite
def legal_npu_case(draw):
    """Tilings built to be legal: nested, within the dims and (mostly) within the buffers."""
    M, N, K = (draw(st.integers(1, 100)) for _ in range(3))
    ru = lambda x: -(-x // 16) * 16
    t1 = [draw(st.integers(1, min(4, ru(d) // 16)).map(lambda x: 16 * x)) for d in (M, N, K)]
    t0 = [draw(st.integers(1, min(2, t // 16)).map(lambda x: 16 * x)) for t in t1]
    o1, o0 = draw(st.sampled_from(ORDERS)), draw(st.sampled_from(ORDERS))
    b1, b0 = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    split = ((o1[0], 2),) if draw(st.booleans()) else ()
    return (M, N, K), t1, t0, o1, o0, b1, b0, split


def legal_by_hand(MNK, t1, t0, b1, b0):
    """Independent capacity/nesting rules of the mini NPU (fp16: 2 B, fractal 16)."""
    ru = lambda x: -(-x // 16) * 16
    e1 = [min(t, ru(d)) for t, d in zip(t1, MNK)]
    if any(t > ru(d) for t, d in zip(t1, MNK)) or any(a > b for a, b in zip(t0, t1)):
        return False
    m1, n1, k1 = e1
    m0, n0, k0 = t0
    return (b1 * 2 * (m1 * k1 + k1 * n1) <= 32768 and b0 * 2 * m0 * k0 <= 4096
            and b0 * 2 * k0 * n0 <= 4096 and b0 * 4 * m0 * n0 <= 8192)


@SETTINGS
@given(npu_case())
def test_illegal_tilings_always_rejected(mini_npu, case):
    MNK, t1, t0, o1, o0, b1, b0, split = case
    spec = "gemm:M=%d,N=%d,K=%d,dtype=fp16" % MNK
    t = npu_tiling(t1, t0, o1, o0, b1, b0, split)
    p = problem_for(spec, mini_npu)
    if legal_by_hand(MNK, t1, t0, b1, b0):
        check(p, t)
    else:
        with pytest.raises(TilingError):
            check(p, t)


@SETTINGS
@given(legal_npu_case())
def test_traffic_at_least_compulsory_and_smith_bound_npu(mini_npu, case):
    MNK, t1, t0, o1, o0, b1, b0, split = case
    assume(legal_by_hand(MNK, t1, t0, b1, b0))
    spec = "gemm:M=%d,N=%d,K=%d,dtype=fp16" % MNK
    pr = predict(spec, mini_npu, npu_tiling(t1, t0, o1, o0, b1, b0, split)).prediction
    sp = parse_spec(spec)
    assert pr.offchip_bytes >= compulsory_bytes(sp)
    S = onchip_words(problem_for(spec, mini_npu))
    assert pr.offchip_bytes >= smith_bound_words(*MNK, S) * 2


@st.composite
def flat_case(draw):
    M, N, K = (draw(st.integers(1, 300)) for _ in range(3))
    t = [draw(st.integers(1, 300)) for _ in range(3)]
    return (M, N, K), t, draw(st.sampled_from(ORDERS)), draw(st.sampled_from([1, 2]))


def flat_tiling(t, order, bufs, op="gemm"):
    lv = LevelTiling("buf", tuple(zip("mnk", t)), order, (("A", bufs), ("B", bufs), ("C", bufs)),
                     (("A", "buf"), ("B", "buf"), ("C", "buf")))
    return Tiling(op, "gemm", "flat", (lv,))


@SETTINGS
@given(flat_case())
def test_traffic_at_least_bounds_two_level_board(two_level, case):
    (M, N, K), t, order, bufs = case
    t = [min(a, d) for a, d in zip(t, (M, N, K))]
    legal = bufs * 4 * (t[0] * t[2] + t[2] * t[1] + t[0] * t[1]) <= 262144
    spec = f"gemm:M={M},N={N},K={K}"
    tl = flat_tiling(t, order, bufs)
    if not legal:
        with pytest.raises(TilingError, match="BUF holds"):
            predict(spec, two_level, tl)
        return
    pr = predict(spec, two_level, tl).prediction
    assert pr.offchip_bytes >= compulsory_bytes(parse_spec(spec))
    S = 2 ** 16 / (2 if bufs == 2 else 1)      # the bound with the buffers this tiling can use
    assert pr.offchip_bytes >= 4 * smith_bound_words(M, N, K, S)


@SETTINGS
@given(flat_case())
def test_traffic_scales_exactly_with_dtype_size(two_level, case):
    (M, N, K), t, order, bufs = case
    t = [min(a, d) for a, d in zip(t, (M, N, K))]
    assume(bufs * 4 * (t[0] * t[2] + t[2] * t[1] + t[0] * t[1]) <= 262144)
    tl = flat_tiling(t, order, bufs)
    p16 = predict(f"gemm:M={M},N={N},K={K},dtype=fp16", two_level, tl).prediction
    p32 = predict(f"gemm:M={M},N={N},K={K},dtype=fp32", two_level, tl).prediction
    # partial sums are fp32 whatever the input dtype: compare when the accumulator never spills
    # (the k loop, if it iterates, sits inside C's innermost iterating loop)
    inner_c = max((order.index(d) for d in "mn" if t["mn".index(d)] < (M, N)["mn".index(d)]), default=-1)
    spills = t[2] < K and order.index("k") < inner_c
    if not spills:
        assert p32.bytes == {k: 2 * v for k, v in p16.bytes.items()}


@SETTINGS
@given(legal_npu_case())
def test_npu_traffic_scales_with_dtype_when_aligned_for_both(mini_npu, case):
    MNK, t1, t0, o1, o0, b1, b0, split = case
    # aligned for both: fp16 fractals are 16 deep in k, fp32 ones 8; ragged k tails pad
    # differently, so K is a multiple of both
    MNK = MNK[:2] + (-(-MNK[2] // 16) * 16,)
    assume(legal_by_hand(MNK, t1, t0, b1, b0))
    t = npu_tiling(t1, t0, o1, o0, b1, b0, split)
    p16 = predict("gemm:M=%d,N=%d,K=%d,dtype=fp16" % MNK, mini_npu, t).prediction
    try:
        p32 = predict("gemm:M=%d,N=%d,K=%d,dtype=fp32" % MNK, mini_npu, t).prediction
    except TilingError:
        assume(False)          # fp32 tiles are twice the bytes: may not fit where fp16 does
    for path in ("gm->l1", "l1->l0a", "l1->l0b"):
        assert p32.bytes[path] == 2 * p16.bytes[path]
    if "gm->l0c" not in p16.bytes:          # no partial sums: the output scales too
        assert p32.bytes["l0c->gm"] == 2 * p16.bytes["l0c->gm"]
