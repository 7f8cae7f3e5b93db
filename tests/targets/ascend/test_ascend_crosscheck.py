"""The emulator keeps the analytic simulator honest.

For random legal tilings (every loop order, ragged tails, reduction loops outside the
accumulator, single and double buffers, core splits) of GEMM, Conv2D and GroupNorm:

* the bytes the emulator's DMA instructions moved, per path, equal the closed-form traffic
  model's prediction exactly (the two share no traffic code);
* the analytic latency is within 10% of the event-driven replay of the executed trace (MAPE
  over the sweep; the worst case is printed), and ranks the tilings the same way (Spearman).

Where the model and the emulator disagree for a reason in the model, the test says so with an
``xfail(strict=True)`` that names it: a fix to the model turns it into a failure to remove.
"""
import os

import pytest

from sweep_util import launch_s, mape, spearman, sweep

GEMM = ["gemm:M=100,N=70,K=90,dtype=fp16", "gemm:M=33,N=130,K=200,dtype=fp16"]
CONV = ["conv2d:N=2,C=20,H=13,W=11,K=24,R=3,S=3,stride=1,pad=1,dtype=fp16",
        "conv2d:N=1,C=3,H=17,W=19,K=20,R=7,S=7,stride=2,pad=3,dtype=fp16",
        "conv2d:N=1,C=16,H=9,W=10,K=16,R=3,S=3,stride=2,pad=1,groups=16,dtype=fp16"]
NORM = ["groupnorm:N=2,C=64,H=20,W=21,groups=32,dtype=fp16",
        "groupnorm:N=1,C=32,H=40,W=41,groups=2,act=silu,dtype=fp16"]
FULL = os.environ.get("EDGEOPS_TEST_FULL") == "1"

# (spec, board, tilings): about 50 tilings in the default run
FAST = [(GEMM[0], "ascend-910b", 10), (GEMM[1], "ascend-310b", 6), (CONV[0], "ascend-910b", 8),
        (CONV[1], "ascend-310b", 5), (NORM[0], "ascend-910b", 10), (NORM[1], "ascend-310b", 6),
        (CONV[2], "ascend-910b", 6)]
BIG = [(s, b, 30) for s in GEMM + CONV + NORM for b in ("ascend-910b", "ascend-310b")]


def _bytes_agree(points):
    bad = [(p.tiling.describe(), p.emulated, p.predicted) for p in points if p.emulated != p.predicted]
    assert not bad, f"{len(bad)} of {len(points)} tilings disagree, first: {bad[0]}"


@pytest.mark.parametrize("spec,board,n", FAST)
def test_bytes_per_path_match_the_model(spec, board, n):
    pts = sweep(spec, board, n, seed=1)
    assert len(pts) == n
    _bytes_agree(pts)
    assert max(p.max_rel_error for p in pts) < 4 * 2.0 ** -11      # and the results are right


@pytest.mark.full
@pytest.mark.parametrize("spec,board,n", BIG)
def test_bytes_per_path_match_the_model_full(spec, board, n):
    _bytes_agree(sweep(spec, board, n, seed=2))


@pytest.mark.parametrize("g", [2, 4, 6, 16])
def test_grouped_conv_with_several_groups_per_block_matches_the_model(g):
    _bytes_agree(sweep(CONV[2], "ascend-910b", 6, seed=1, fixed=(("g", g),)))


def test_gemm_bias_read_by_fixpipe_matches_the_model():
    pts = sweep("gemm:M=100,N=70,K=90,dtype=fp16,bias=1", "ascend-910b", 8, seed=4)
    assert all(p.emulated.get("gm->fixpipe") for p in pts)
    _bytes_agree(pts)


def _report(tag, pts, board):
    m, w, p = mape(pts)
    mb, wb, _ = mape(pts, launch_s(board))
    rho = spearman([q.replay_s for q in pts], [q.analytic_s for q in pts])
    print(f"\n{tag} on {board}: {len(pts)} tilings, latency MAPE {m:.1%} (worst {w:.1%}: "
          f"{p.tiling.describe()}), without the launch MAPE {mb:.1%} (worst {wb:.1%}), "
          f"Spearman {rho:.3f}")
    return m, rho


TIMED = [(GEMM[0], "ascend-910b"), (CONV[0], "ascend-910b"), (NORM[0], "ascend-910b"),
         (GEMM[0], "ascend-310b"), (CONV[0], "ascend-310b"), (NORM[0], "ascend-310b")]


@pytest.mark.parametrize("spec,board", TIMED)
def test_latency_double_buffered_within_10_percent_of_replay(spec, board):
    pts = sweep(spec, board, 24 if FULL else 12, seed=3, buffers=2)
    m, _ = _report("double-buffered " + spec.split(":")[0], pts, board)
    assert m <= 0.10


@pytest.mark.parametrize("spec,board", TIMED)
def test_analytic_model_ranks_tilings_like_the_replay(spec, board):
    pts = sweep(spec, board, 24 if FULL else 12, seed=3, buffers=None)
    _, rho = _report("mixed-buffer " + spec.split(":")[0], pts, board)
    assert rho >= 0.9


@pytest.mark.parametrize("spec,board", TIMED)
def test_latency_mixed_buffers_within_10_percent_of_replay(spec, board):
    pts = sweep(spec, board, 24 if FULL else 12, seed=3, buffers=None)
    m, _ = _report("mixed-buffer " + spec.split(":")[0], pts, board)
    assert m <= 0.10
