"""A plan the planner calls legal must run: the search's plans and random tilings that
``edgeops.tiling.check`` accepts are lowered and run on the emulator (every launch, fixed passes
included: the 910B's SwiGLU gate and activation epilogues), and the outputs match a float64
numpy reference written here, not the project's oracles.

Tolerance, normwise as in test_ascend_kernels.py: max|y - ref| <= steps * u * max|ref| with
u = 2^-11 (fp16). A Cube result is rounded once to fp16 (plus fp32 accumulation): 2u, about the
1e-3 relative the NPU targets promise. SwiGLU rounds gate and up to fp16, then runs the gating
on the Vector unit: 8u, the bound test_ascend_kernels.py holds SwiGLU to.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from edgeops import tiling as T
from edgeops.targets.ascend.emulate import execute
from edgeops.targets.ascend.sweep import random_tilings

U = 2.0 ** -11
BOARDS = ("ascend-910b", "ascend-310b")
QUICK = settings(max_examples=15, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])
FULL = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def silu(v):
    return v / (1.0 + np.exp(-v))


def ref_conv(x, w, stride, pad, pad_end, dil, groups):
    """Direct convolution in float64: one shifted, strided slice of the padded input per tap."""
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad_end), (pad, pad_end)))
    OH = (H + pad + pad_end - dil * (R - 1) - 1) // stride + 1
    OW = (W + pad + pad_end - dil * (S - 1) - 1) // stride + 1
    y = np.zeros((N, K, OH, OW))
    Kg = K // groups
    for g in range(groups):
        xs, ws = xp[:, g * Cg:(g + 1) * Cg], w[g * Kg:(g + 1) * Kg]
        for r in range(R):
            for s in range(S):
                win = xs[:, :, r * dil:r * dil + stride * (OH - 1) + 1:stride,
                         s * dil:s * dil + stride * (OW - 1) + 1:stride]
                y[:, g * Kg:(g + 1) * Kg] += np.einsum("nchw,kc->nkhw", win, ws[:, :, r, s])
    return y


ACTS = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0), "silu": silu}


def case(kind, dims, rng):
    """(spec, GM inputs in the emulator's layouts, float64 reference, rounding steps)."""
    w = lambda a: np.asarray(a, np.float64)
    if kind == "gemm":
        M, N, K, act = dims
        a, b = f16(rng, (1, M, K)), f16(rng, (1, K, N), K ** -0.5)
        return (f"gemm:M={M},N={N},K={K},act={act},dtype=fp16", {"A": a, "B": b},
                ACTS[act](w(a[0]) @ w(b[0])), 2)
    if kind == "conv2d":
        C, H, W, K, R, stride, pad, groups = dims
        x, wt = f16(rng, (1, C, H, W)), f16(rng, (K, C // groups, R, R), (C // groups * R * R) ** -0.5)
        spec = (f"conv2d:N=1,C={C},H={H},W={W},K={K},R={R},S={R},stride={stride},pad={pad},"
                f"groups={groups},dtype=fp16")
        return spec, {"X": x, "W": wt}, ref_conv(w(x), w(wt), stride, pad, pad, 1, groups), 2
    M, D, F = dims
    x, w1, w2 = f16(rng, (M, D)), f16(rng, (D, F), D ** -0.5), f16(rng, (D, F), D ** -0.5)
    gate, up = w(x) @ w(w1), w(x) @ w(w2)
    return (f"swiglu:M={M},D={D},F={F},dtype=fp16", {"A": x[None], "W1": w1, "W2": w2},
            silu(gate) * up, 8)


def legal_plans(spec, board, seed, n_random):
    """The planner's best and runner-up, and random tilings its legality check accepts."""
    dec = "implicit_gemm" if spec.startswith("conv2d") else None
    r = T.search(spec, board, decomposition=dec, top=2, budget=20_000)
    plans = [e.tiling for e in r.top] + random_tilings(spec, board, n_random, seed=seed,
                                                       decomposition=dec)
    for til in plans:
        T.check(T.problem_for(spec, board, dec), til)     # legal by the planner's own rule
    return plans


def run_all(kind, dims, board, seed, n_random=2):
    rng = np.random.default_rng(seed)
    spec, gm0, ref, steps = case(kind, dims, rng)
    sp = T.parse_spec(spec)
    plans = legal_plans(spec, board, seed, n_random)
    assert plans
    for til in plans:
        gm = {k: v.copy() for k, v in gm0.items()}
        y = np.asarray(execute(sp, til, board, gm).output, np.float64).reshape(ref.shape)
        err, tol = float(np.abs(y - ref).max()), steps * U * float(np.abs(ref).max())
        assert err <= tol, f"{spec} on {board}, {til.describe()}: max|err| {err:.3g} > {tol:.3g}"


def gemm_dims(x=1):
    return st.tuples(st.integers(1, 70 * x), st.integers(1, 70 * x), st.integers(1, 90 * x),
                     st.sampled_from(sorted(ACTS)))


@st.composite
def conv_dims(draw, x=1):
    groups = draw(st.sampled_from([1, 1, 2]))
    C, K = groups * draw(st.integers(1, 9 * x)), groups * draw(st.integers(1, 12 * x))
    R = draw(st.sampled_from([1, 3]))
    H, W = draw(st.integers(R, 12 * x)), draw(st.integers(R, 12 * x))
    return C, H, W, K, R, draw(st.sampled_from([1, 2])), draw(st.integers(0, R // 2)), groups


def swiglu_dims(x=1):
    return st.tuples(st.integers(1, 40 * x), st.integers(1, 72 * x), st.integers(1, 56 * x))


OPS = {"gemm": gemm_dims, "conv2d": conv_dims, "swiglu": swiglu_dims}


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("kind", sorted(OPS))
def test_legal_plans_run_and_match_numpy(kind, board):
    @QUICK
    @given(OPS[kind](), st.integers(0, 2 ** 16))
    def prop(dims, seed):
        run_all(kind, dims, board, seed)
    prop()


@pytest.mark.full
@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("kind", sorted(OPS))
def test_legal_plans_run_and_match_numpy_full(kind, board):
    @FULL      # shapes up to 4x larger: tiles that fill the buffers, more spills and splits
    @given(OPS[kind](4), st.integers(0, 2 ** 16))
    def prop(dims, seed):
        run_all(kind, dims, board, seed, n_random=4)
    prop()


@pytest.mark.parametrize("M,D,F", [(64, 256, 512), (32, 256, 704), (37, 256, 688)])
def test_issue_swiglu_shapes_run_on_910b(M, D, F):
    """The shapes whose AIV gate pass overflowed UB ("queue 'out' needs 2 x 49,152 B")."""
    run_all("swiglu", (M, D, F), "ascend-910b", 0, n_random=0)


def test_pass_buffers_fit_ub_for_any_input_count():
    """The emulator's pass queues (a queue per input, one output, PASS_BUFS each) fit UB."""
    from edgeops.simulator.passes import PASS_BUFS, pass_tile_bytes
    from edgeops.targets.ascend import machine
    for board in BOARDS:
        m = machine(board)
        cap, al = m.capacity["ub"], m.alignment["ub"]
        for n_in in (1, 2, 3, 5):
            t = pass_tile_bytes(cap, al, n_in)
            assert t % al == 0 and PASS_BUFS * (n_in + 1) * t <= cap
            assert PASS_BUFS * (n_in + 1) * (t + al) > cap      # and it is the largest such tile
