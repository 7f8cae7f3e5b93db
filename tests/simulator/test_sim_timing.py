"""The timing model: pipelining, launch, bound, shared bandwidth, and the double-buffering study."""
import numpy as np
import pytest

import edgeops.boards
import tiling_test_boards as tb
from edgeops.errors import BoardError
from edgeops.simulator import from_board, pipeline
from edgeops.simulator.nest import Candidates, Move, Nest, Operand
from edgeops.simulator.evaluate import evaluate_nest
from edgeops.simulator.timing import op_timing


def test_pipeline_three_equal_stages():
    n, t = 100, 1.0
    stage = lambda over: (np.float64(n * t), np.int64(n), over)
    single = pipeline([stage(False), stage(False), stage(False)])
    double = pipeline([stage(True), stage(False), stage(True)])
    assert single == pytest.approx(3 * n * t)
    assert double == pytest.approx((n + 2) * t)          # fill + drain, then one stage per step


def test_pipeline_vectorised_and_slowest_stage():
    busy = np.array([10.0, 40.0])
    out = pipeline([(busy, np.array([10, 10]), True), (np.array([20.0, 20.0]), np.array([10, 10]), False)])
    assert out.tolist() == pytest.approx([20 + 1 + 2 - 2, 40 + 4 + 2 - 4])


def _stream(board, bufs, numel=1 << 16, tile=1024):
    hw = from_board(board)
    nest = Nest((("e", numel),), (Operand("in", ("e",), 2), Operand("out", ("e",), 2, acc=True, acc_elem=2)),
                (("e", "n"),))
    cand = Candidates([{"e": np.array([tile])}], [np.array([0])], [[("e",)]],
                      [{"in": np.array([bufs]), "out": np.array([bufs])}])
    return evaluate_nest(hw, hw.levels("vector"), nest, cand, dtype="fp16", mac_unit="vector",
                         mac_flops=1)


def test_queue_pipeline_shared_buffer_one_third_separate_queues_one_half():
    from edgeops.simulator import queue_pipeline
    n = 100
    st = {s: (np.float64(n), np.int64(n)) for s in ("in", "v", "out")}
    assert queue_pipeline(st, [(("in", "v", "out"), 1)]) == pytest.approx(3 * n)
    assert queue_pipeline(st, [(("in", "v"), 1), (("v", "out"), 1)]) == pytest.approx(2 * n + 1)
    assert queue_pipeline(st, [(("in", "v"), 2), (("v", "out"), 2)]) == pytest.approx(n + 2)


def test_double_buffering_serial_board_one_third_vs_one(tmp_path):
    """A non-NPU board (serial discipline: one thread loads, computes, stores in turn), three
    equal stages: vector busy 1/3 single, ~1 double buffered. (NPU queues: see above, 1/2.)"""
    board = tb.write(tmp_path, "pipe", tb.pipe_board())
    one = _stream(board, 1).prediction(0)
    two = _stream(board, 2).prediction(0)
    assert one.utilisation["vec"] == pytest.approx(1 / 3, rel=1e-6)
    assert two.utilisation["vec"] == pytest.approx(64 / 66, rel=1e-6)   # 64 tiles: n / (n + 2)
    assert one.bytes == two.bytes == {"dram->buf": 2 << 16, "buf->dram": 2 << 16}


def test_setup_latency_and_launch_bound(tmp_path):
    board = tb.write(tmp_path, "pipe2", tb.pipe_board(setup_s=1e-6).replace('"pipe"', '"pipe2"'))
    small = _stream(board, 2, tile=16)
    big = _stream(board, 2, tile=4096)
    assert small.latency_s[0] > big.latency_s[0]          # 4096 transfers pay 1 us each
    assert small.prediction(0).bound == "dma"
    tiny = _stream(board, 2, numel=16, tile=16).prediction(0)
    assert tiny.latency_s > 0


def test_shared_bandwidth_is_divided_among_active_cores(mini_npu):
    hw = from_board(mini_npu)
    mv = [Move("in", "gm", "ub", 0, np.array([1_000_000]), np.array([1]), np.array([2]))]
    comp = {}
    t1 = op_timing(hw, mv, comp, core_frac=1.0, active=1)
    t4 = op_timing(hw, mv, comp, core_frac=0.25, active=4)   # same total bytes over 4 cores
    bw = 1e6 / 1e11                                             # the transfer itself: 10 us
    assert t1.stage_busy_s["mte2"][0] == pytest.approx(bw + 1e-7)
    assert t4.stage_busy_s["mte2"][0] == pytest.approx(bw + 0.25e-7)  # setup split, bandwidth not


def test_hardware_levels_of_an_ascend_board(mini_npu):
    hw = from_board(mini_npu)
    assert hw.family == "ascend" and hw.separated
    l1, l0 = hw.levels("matrix", "fp16")
    assert dict(l0.holds) == {"A": "l0a", "B": "l0b", "C": "l0c"} and l0.padded
    assert dict(l0.granule) == {"m": 16, "n": 16, "k": 16}
    assert dict(hw.levels("matrix", "int8")[1].granule)["k"] == 32
    assert dict(hw.levels("matrix", "fp32")[1].granule)["k"] == 8
    assert [ln.key for ln in hw.route("gm", "l1")] == ["gm->l1"]


def test_hardware_errors_name_what_is_missing(tmp_path):
    text = tb.MINI_NPU.replace('name = "l0b"', 'name = "l0x"').replace('"mini-npu"', '"broken"')
    text = text.replace('dst = "l0b"', 'dst = "l0x"')
    board = tb.write(tmp_path, "broken", text)
    with pytest.raises(BoardError, match="l0b"):
        from_board(board)


def test_bundled_boards_build():
    names = [n for n in edgeops.boards.names() if n != "host"]
    assert len(names) == 6
    for n in names:
        b = edgeops.boards.load(n)
        for t in b.targets:
            hw = from_board(b, t)
            assert hw.levels("matrix", "fp16") and hw.levels("vector", "fp16")
