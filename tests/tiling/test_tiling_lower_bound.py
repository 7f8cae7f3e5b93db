"""``lower_bound_bytes``: at least the compulsory traffic (counted here independently of
``compulsory_bytes``), and never above what a real legal tiling is predicted to move."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from edgeops import tiling as T
from edgeops.errors import TilingError
from edgeops.targets.ascend.sweep import random_tilings
from edgeops.tiling.bounds import lower_bound_bytes

BOARDS = ("ascend-910b", "ascend-310b", "rk3588", "rpi5", "jetson-orin-nano")
ELEM = {"fp32": 4, "fp16": 2, "int8": 1}
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def dtype_for(board):
    return "fp16" if board.startswith(("ascend", "jetson")) else "fp32"


@st.composite
def gemm_specs(draw, hi=2600):
    board = draw(st.sampled_from(BOARDS))
    M, N, K = (draw(st.integers(1, hi)) for _ in range(3))
    if draw(st.booleans()):
        B, shared = draw(st.integers(2, 6)), draw(st.sampled_from([0, 1]))
        spec = f"matmul:B={B},M={M},N={N},K={K},bshared={shared},dtype={dtype_for(board)}"
    else:
        spec = f"gemm:M={M},N={N},K={K},dtype={dtype_for(board)}"
    return board, spec


@st.composite
def conv_specs(draw):
    board = draw(st.sampled_from(BOARDS))
    g = draw(st.sampled_from([1, 1, 2]))
    C, K = g * draw(st.integers(1, 24)), g * draw(st.integers(1, 24))
    R, S = draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 3]))
    H, W = draw(st.integers(R, 40)), draw(st.integers(S, 40))
    st_, pad, dil = draw(st.sampled_from([1, 2, 3])), draw(st.integers(0, 2)), draw(st.sampled_from([1, 2]))
    if (H + 2 * pad - dil * (R - 1)) < 1 or (W + 2 * pad - dil * (S - 1)) < 1:
        dil = 1
    return board, (f"conv2d:N={draw(st.integers(1, 2))},C={C},H={H},W={W},K={K},R={R},S={S},"
                   f"stride={st_},pad={pad},dilation={dil},groups={g},dtype={dtype_for(board)}")


def used(n_out, stride, dil, taps, pad, size):
    """Input rows some output row's window reads (padding excluded), by enumeration."""
    return len({o * stride - pad + t * dil for o in range(n_out) for t in range(taps)} & set(range(size)))


def compulsory_by_hand(sp) -> int:
    e = ELEM[sp.dtype]
    if sp.kind in ("gemm", "matmul"):
        B = sp.get("B", 1)
        bb = 1 if sp.get("bshared", 0) else B
        return e * (B * sp["M"] * sp["K"] + bb * sp["K"] * sp["N"] + B * sp["M"] * sp["N"])
    oh, ow = sp.conv_out
    rows = used(oh, sp["stride"], sp["dilation"], sp["R"], sp["pad"], sp["H"])
    cols = used(ow, sp["stride"], sp["dilation"], sp["S"], sp["pad"], sp["W"])
    x = sp["N"] * sp["C"] * rows * cols
    w = sp["K"] * (sp["C"] // sp["groups"]) * sp["R"] * sp["S"]
    return e * (x + w + sp["N"] * sp["K"] * oh * ow)


@SETTINGS
@given(st.one_of(gemm_specs(), conv_specs()))
def test_lower_bound_at_least_compulsory(case):
    board, spec = case
    sp = T.parse_spec(spec)
    comp = compulsory_by_hand(sp)
    for dec in T.decompositions(spec, board):
        assert lower_bound_bytes(T.problem_for(spec, board, dec)) >= comp, (spec, board, dec)


def test_issue_gemm_1024_on_910b():
    """The report: 1024^3 fp16 on ascend-910b gave a bound of 5,276,405 B < 6,291,456 B."""
    spec = "gemm:M=1024,N=1024,K=1024,dtype=fp16"
    r = T.search(spec, "ascend-910b", budget=20_000)
    assert r.compulsory_bytes == 3 * 1024 * 1024 * 2
    assert r.lower_bound_bytes >= r.compulsory_bytes
    assert r.best.prediction.offchip_bytes >= r.lower_bound_bytes


def test_smith_term_binds_for_a_large_single_core_gemm(two_level):
    """Where Smith exceeds compulsory, the bound is Smith's: 2MNK/sqrt(S) - 2S words, S = 2**16
    fp32 words (the test board: one core, one 256 KiB buffer)."""
    M = N = K = 3000
    smith = 4 * (2 * M * N * K / 2 ** 8 - 2 * 2 ** 16)
    p = T.problem_for(f"gemm:M={M},N={N},K={K}", two_level)
    assert lower_bound_bytes(p) == int(smith) > 4 * 3 * M * N


def plans(spec, board):
    """Real legal tilings: the search's top, its Pareto front, and random tilings check() accepts."""
    out = []
    for dec in T.decompositions(spec, board):
        try:
            r = T.search(spec, board, decomposition=dec, top=3, budget=3000)
        except TilingError:
            continue
        out += [(dec, e.tiling) for e in r.top + r.pareto]
        buffers = 1 if board in ("rk3588", "rpi5") else None
        out += [(dec, t) for t in random_tilings(spec, board, 2, seed=len(spec), decomposition=dec,
                                                 buffers=buffers, max_tries=300)]
    return out


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(gemm_specs(), conv_specs()))
def test_predicted_traffic_never_below_the_bound(case):
    board, spec = case
    found = plans(spec, board)
    assert found
    for dec, til in found:
        lb = lower_bound_bytes(T.problem_for(spec, board, dec))
        got = T.predict(spec, board, til).prediction.offchip_bytes
        assert got >= lb, (spec, board, til.describe(), got, lb)


@pytest.mark.full
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(gemm_specs(6000), conv_specs()))
def test_predicted_traffic_never_below_the_bound_full(case):
    board, spec = case
    for dec, til in plans(spec, board):
        lb = lower_bound_bytes(T.problem_for(spec, board, dec))
        assert T.predict(spec, board, til).prediction.offchip_bytes >= lb, (spec, board, dec)
