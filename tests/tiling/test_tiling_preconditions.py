"""Each tiling primitive's documented preconditions, one pytest.raises each (TVM style)."""
import numpy as np
import pytest

import edgeops.boards
from edgeops.errors import BoardError, OpSpecError, TilingError
from edgeops.tiling import (as_space, naive, parse_spec, predict, problem_for, search,
                            smith_bound_words)
from edgeops.tiling.candidates import tile_values
from edgeops.tiling.problem import get_problem


def test_tile_values_preconditions_and_contents():
    with pytest.raises(ValueError, match="D >= 1"):
        tile_values(0, 16)
    with pytest.raises(ValueError, match="g >= 1"):
        tile_values(64, 0)
    v = tile_values(2048, 16, limit=24, extra=[181])
    assert v.min() == 16 and v.max() == 2048 and np.all(v % 16 == 0) and len(v) <= 24
    assert 192 in tile_values(2048, 16, limit=64)            # ceil(2048 / 11) rounded up to 16
    assert tile_values(50, 16).tolist() == [16, 32, 48, 64]  # few legal sizes: all of them


def test_smith_bound_preconditions():
    with pytest.raises(ValueError, match="S_words must be > 0"):
        smith_bound_words(8, 8, 8, 0)
    assert smith_bound_words(2048, 2048, 2048, 2 ** 16) == 2 * 2048 ** 3 / 256 - 2 * 2 ** 16
    assert smith_bound_words(2, 2, 2, 2 ** 16) == 0.0      # never negative


def test_op_arguments():
    with pytest.raises(OpSpecError, match="cannot describe int as an op"):
        as_space(42)
    assert as_space("gemm:M=8,N=8,K=8") == parse_spec("gemm:M=8,N=8,K=8")


def test_target_must_be_offered(mini_npu):
    with pytest.raises(BoardError, match="does not offer target 'cuda'"):
        problem_for("gemm:M=8,N=8,K=8,dtype=fp16", mini_npu, target="cuda")


def test_dtype_the_unit_lacks(mini_npu):
    text = open(mini_npu.path_on_disk).read().replace(", fp32 = 2048", "").replace(
        '"mini-npu"', '"no-fp32"')
    path = mini_npu.path_on_disk.replace("mini-npu", "no-fp32")
    open(path, "w").write(text)
    board = edgeops.boards.load(path)
    with pytest.raises(BoardError, match="unit 'cube' has no rate for fp32"):
        search("gemm:M=64,N=64,K=64", board)


def test_level_lookup_and_decomposition(mini_npu):
    t = naive("gemm:M=8,N=8,K=8,dtype=fp16", mini_npu)
    with pytest.raises(TilingError, match="tiling has no level 'l2'"):
        t.tile("l2", "m")
    with pytest.raises(TilingError, match="no decomposition 'winograd' here"):
        get_problem(parse_spec("gemm:M=8,N=8,K=8,dtype=fp16"),
                    problem_for("gemm:M=8,N=8,K=8,dtype=fp16", mini_npu).hw, "winograd")
    from dataclasses import replace
    from edgeops.tiling import check
    p = problem_for("conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16", mini_npu, "im2col")
    with pytest.raises(TilingError, match="tiling.decomposition is 'gemm', the problem is 'im2col'"):
        check(p, replace(t, op="conv2d"))


def test_predict_rejects_a_too_big_tile_file(mini_npu):
    spec = "gemm:M=128,N=128,K=64,dtype=fp16"
    d = naive(spec, mini_npu).to_dict()
    d["levels"][0].update(tile={"m": 128, "n": 128, "k": 64}, buffers={"A": 2, "B": 2})
    with pytest.raises(TilingError, match=r"^L1 holds A: 2 buffers x 16,384 B \+ B: 2 buffers x "
                                          r"16,384 B = 65,536 B > 32,768 B \(level l1\)$"):
        predict(spec, mini_npu, d)
