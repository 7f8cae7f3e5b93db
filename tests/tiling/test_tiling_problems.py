"""Iteration spaces as problems: decompositions, their FLOP/byte counts, the naive tiling,
normalisation passes, Ascend separated-architecture epilogues, halo re-reads."""
import pytest

from edgeops.tiling import compulsory_bytes, decompositions, naive, parse_spec, predict, problem_for
from edgeops.tiling.problem import get_problem


def test_conv_decompositions(mini_npu):
    assert decompositions("conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16", mini_npu) == \
        ["implicit_gemm", "direct", "im2col", "winograd"]
    # Winograd F(2x2,3x3) only for 3x3, stride 1, dilation 1, one group
    assert "winograd" not in decompositions("conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,stride=2,dtype=fp16",
                                            mini_npu)
    assert "winograd" not in decompositions("conv2d:N=1,C=16,H=8,W=8,K=16,R=5,S=5,pad=2,dtype=fp16",
                                            mini_npu)


def test_im2col_and_winograd_have_their_own_counts(mini_npu):
    spec = "conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16"
    im2col = problem_for(spec, mini_npu, "im2col")
    assert im2col.gemm_dims == (64, 16, 144, 1)             # M = N*OH*OW, N = K, K = C*R*S
    assert [f.name for f in im2col.fixed] == ["im2col"]
    assert im2col.fixed[0].hop_bytes == {"gm->ub": 16 * 64 * 2, "ub->gm": 64 * 144 * 2}
    wino = problem_for(spec, mini_npu, "winograd")
    assert wino.gemm_dims == (16, 16, 16, 16)               # 16 GEMMs over 4x4 = 16 tiles
    assert [f.name for f in wino.fixed] == ["winograd input transform", "winograd output transform"]


def test_naive_is_smallest_single_buffered_and_rereads(mini_npu):
    spec = "gemm:M=64,N=48,K=32,dtype=fp16"
    t = naive(spec, mini_npu)
    assert all(s == 16 for lv in t.levels for _, s in lv.tile)
    assert all(b == 1 for lv in t.levels for _, b in lv.buffers)
    assert t.levels[0].order == ("m", "n", "k")
    pr = predict(spec, mini_npu, t).prediction
    # A is re-read once per N tile (3), B once per M tile (4), C written once
    assert pr.bytes["gm->l1"] == 64 * 32 * 2 * 3 + 32 * 48 * 2 * 4
    assert pr.bytes["l0c->gm"] == 64 * 48 * 2


def test_conv_halo_rereads(two_level):
    # 3x3 stride 1 pad 1 on 8 rows, tiles of 2 output rows: each reads 4 input rows, clipped at
    # the borders: 3 + 4 + 4 + 3 = 14 rows instead of 8
    spec = "conv2d:N=1,C=1,H=8,W=4,K=1,R=3,S=3,pad=1"
    t = naive(spec, two_level)
    d = t.to_dict()
    d["levels"][0]["tile"].update(oh=2, ow=4)
    pr = predict(spec, two_level, d).prediction
    assert pr.bytes["dram->buf"] == 4 * (14 * 4 + 9)        # input rows x W, + the 3x3 weights
    assert compulsory_bytes(parse_spec(spec)) == 4 * (8 * 4 + 9 + 8 * 4)


def test_normalisation_passes(mini_npu):
    spec = "softmax:M=8,D=1024,dtype=fp16"
    whole = naive(spec, mini_npu).to_dict()
    whole["levels"][0]["tile"].update(r=1, d=1024)
    split = naive(spec, mini_npu).to_dict()
    split["levels"][0]["tile"].update(r=1, d=512)
    one = predict(spec, mini_npu, whole).prediction.bytes["gm->ub"]
    two = predict(spec, mini_npu, split).prediction.bytes["gm->ub"]
    x = 8 * 1024 * 2
    assert (one, two) == (x, 2 * x)           # 1 pass when a row fits on chip, 2 when it is split


def test_separated_epilogue_round_trip(mini_npu):
    relu = problem_for("conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16,act=relu", mini_npu)
    silu = problem_for("conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16,act=silu", mini_npu)
    assert relu.fixed == ()                                  # FixPipe applies ReLU on the way out
    assert [f.name for f in silu.fixed] == ["silu epilogue (AIV via GM)"]
    out = 16 * 64 * 2
    assert silu.fixed[0].hop_bytes == {"gm->ub": out, "ub->gm": out}


def test_swiglu_is_a_gemm_with_a_gating_epilogue(mini_npu, mini_cpu):
    sep = problem_for("swiglu:M=32,D=64,F=48,dtype=fp16", mini_npu)
    assert sep.gemm_dims[:3] == (32, 96, 64) and sep.fixed[0].name.startswith("swiglu gate")
    cpu = problem_for("swiglu:M=32,D=64,F=48", mini_cpu)
    assert cpu.fixed == () and cpu.vector_flops == 6 * 32 * 48


def test_unknown_decomposition(mini_npu):
    from edgeops.errors import TilingError
    with pytest.raises(TilingError, match="available: gemm"):
        get_problem(parse_spec("gemm:M=8,N=8,K=8,dtype=fp16"), problem_for("gemm:M=8,N=8,K=8,dtype=fp16",
                                                                             mini_npu).hw, "im2col")


def test_cpu_and_gpu_hierarchies(mini_cpu):
    p = problem_for("gemm:M=64,N=64,K=64", mini_cpu)
    assert [pl.name for pl in p.plans] == ["outer", "l1", "reg"]
    assert [dict(lv.holds)["C"] for lv in p.levels] == ["l2", "l1d", "reg"]
    pr = predict("gemm:M=64,N=64,K=64", mini_cpu, naive("gemm:M=64,N=64,K=64", mini_cpu)).prediction
    assert pr.bound in ("compute", "dma", "launch") and pr.bytes["dram->l2"] > 0


def test_gpu_occupancy_from_board_limits():
    import edgeops.boards
    if "jetson-orin-nano" not in edgeops.boards.names():
        pytest.skip("bundled jetson board not present")
    from edgeops.tiling.batch import batch_from_tilings
    from edgeops.tiling.model import evaluate
    spec = "gemm:M=512,N=512,K=512,dtype=fp16"
    p = problem_for(spec, "jetson-orin-nano")
    small = naive(spec, "jetson-orin-nano")
    big = small.to_dict()
    big["levels"][0]["tile"] = {"m": 256, "n": 256, "k": 64}
    from edgeops.tiling import Tiling
    s = evaluate(p, batch_from_tilings(p, [small, Tiling.from_dict(big)]))
    occ = s.ev.occupancy
    assert occ[0] == p.hw.board.gpu.max_blocks_per_sm      # tiny blocks: the block limit binds
    assert occ[1] == 1                                       # 256 KiB of fp32 accumulators
