"""Legality: every rule has a pytest.raises test, and the message carries the rule and numbers."""
from dataclasses import replace

import pytest

from edgeops.errors import TilingError
from edgeops.tiling import check, naive, predict, problem_for

GEMM = "gemm:M=64,N=48,K=32,dtype=fp16"


def set_tile(t, level, **sizes):
    levels = list(t.levels)
    lv = levels[level]
    levels[level] = replace(lv, tile=tuple((d, sizes.get(d, s)) for d, s in lv.tile))
    return replace(t, levels=tuple(levels))


def set_level(t, level, **fields):
    levels = list(t.levels)
    levels[level] = replace(levels[level], **fields)
    return replace(t, levels=tuple(levels))


def test_naive_is_legal(mini_npu):
    predict(GEMM, mini_npu, naive(GEMM, mini_npu))


def test_capacity_names_memory_buffers_and_bytes(mini_npu):
    t = set_tile(naive(GEMM, mini_npu), 0, m=64, n=48, k=32)
    t = set_tile(t, 1, m=64, k=32)
    check(problem_for(GEMM, mini_npu), t)                 # 64 x 32 fp16 = 4 KiB: L0A exactly
    with pytest.raises(TilingError, match=r"L0A holds 2 buffers x 4,096 B = 8,192 B > 4,096 B \(level l0\)"):
        check(problem_for(GEMM, mini_npu), set_level(t, 1, buffers=(("A", 2), ("B", 1), ("C", 1))))


def test_capacity_sums_operands_sharing_a_memory(mini_npu):
    spec = "softmax:M=64,D=4096,dtype=fp16"
    t = set_tile(naive(spec, mini_npu), 0, r=2, d=4096)
    t = set_level(t, 0, buffers=(("in", 2), ("out", 2)))
    with pytest.raises(TilingError, match=r"UB holds in: 2 buffers x 16,384 B \+ out: 2 buffers x "
                                          r"16,384 B = 65,536 B > 16,384 B"):
        check(problem_for(spec, mini_npu), t)


def test_cube_fractal_alignment(mini_npu):
    t = set_tile(naive(GEMM, mini_npu), 0, m=32)
    with pytest.raises(TilingError, match=r"^L0A tile 20x16 fp16 = 640 B is not 512 B aligned: the Cube "
                                          r"reads 16x16 fp16 fractals \(512 B\), so m=20 must be a "
                                          r"multiple of 16"):
        check(problem_for(GEMM, mini_npu), set_tile(t, 1, m=20))
    i8 = "gemm:M=64,N=48,K=64,dtype=int8"
    t = set_tile(naive(i8, mini_npu), 0, k=64)
    with pytest.raises(TilingError, match=r"L0A tile 16x48 int8 = 768 B is not 512 B aligned: .*16x32 "
                                          r"int8 fractals.*k=48 must be a multiple of 32"):
        check(problem_for(i8, mini_npu), set_tile(t, 1, k=48))


def test_ub_rows_are_32_byte_blocks(mini_npu):
    spec = "softmax:M=8,D=1000,dtype=fp16"
    with pytest.raises(TilingError, match=r"UB tile rows of d=100 fp16 = 200 B are not 32 B aligned: "
                                          r"d must be a multiple of 16 or cover the whole dim \(1000\)"):
        check(problem_for(spec, mini_npu), set_tile(naive(spec, mini_npu), 0, d=100))
    check(problem_for(spec, mini_npu), set_tile(naive(spec, mini_npu), 0, d=1000))   # whole row


def test_ragged_tiles_are_legal(mini_npu):
    spec = "gemm:M=50,N=40,K=36,dtype=fp16"
    t = set_tile(naive(spec, mini_npu), 0, m=48, n=32, k=32)     # 50 = 48 + 2, 40 = 32 + 8 ...
    predict(spec, mini_npu, t)


def test_nesting(mini_npu):
    with pytest.raises(TilingError, match="level l0 tile m=32 exceeds its parent level l1 tile m=16"):
        check(problem_for(GEMM, mini_npu), set_tile(naive(GEMM, mini_npu), 1, m=32))
    with pytest.raises(TilingError, match=r"level l1 tile m=80 exceeds the dim \(64\)"):
        check(problem_for(GEMM, mini_npu), set_tile(naive(GEMM, mini_npu), 0, m=80))


def test_view_tile_within_block(mini_npu):
    spec = "conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16"
    t = naive(spec, mini_npu, "implicit_gemm")          # l1 block: 1 output pixel
    with pytest.raises(TilingError, match=r"level l0 tile m=32 exceeds the largest block of level l1: "
                                          r"1 pixels, 16 rounded up to 16"):
        check(problem_for(spec, mini_npu, "implicit_gemm"), set_tile(t, 1, m=32))


def test_split_rules(mini_npu):
    t = naive(GEMM, mini_npu)
    with pytest.raises(TilingError, match="split over 'k' needs it outside loop 'm'"):
        check(problem_for(GEMM, mini_npu), replace(t, split=(("k", 2),)))
    with pytest.raises(TilingError, match=r"split uses 8 cores \(\{'m': 8\}\) but cube runs on 2"):
        check(problem_for(GEMM, mini_npu), replace(t, split=(("m", 8),)))
    with pytest.raises(TilingError, match="split names dim 'q'"):
        check(problem_for(GEMM, mini_npu), replace(t, split=(("q", 2),)))


def test_order_and_placement_must_be_supported(mini_npu):
    t = naive(GEMM, mini_npu)
    p = problem_for(GEMM, mini_npu)
    with pytest.raises(TilingError, match="is not a supported loop order"):
        spec = "conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16"
        tc = naive(spec, mini_npu, "implicit_gemm")
        check(problem_for(spec, mini_npu, "implicit_gemm"),
              set_level(tc, 0, order=("c", "g", "k", "n", "oh", "ow")))
    with pytest.raises(TilingError, match="is not a placement this target supports"):
        check(p, set_level(t, 0, holds=(("A", "ub"), ("B", "l1"))))
    with pytest.raises(TilingError, match="buffers names operand 'C'"):
        check(p, set_level(t, 0, buffers=(("A", 1), ("B", 1), ("C", 2))))


def test_cpu_levels_take_one_buffer(mini_cpu):
    spec = "gemm:M=64,N=64,K=64"
    t = naive(spec, mini_cpu)
    with pytest.raises(TilingError, match="a CPU level must have 1 buffer"):
        check(problem_for(spec, mini_cpu), set_level(t, 0, buffers=(("A", 2), ("B", 1), ("C", 1))))
