"""The event-driven replay (``edgeops.simulator.replay``) on hand-made and emulated traces."""
import numpy as np
import pytest

from edgeops import boards
from edgeops import tiling as T
from edgeops.errors import BoardError
from edgeops.simulator.replay import Trace, replay
from edgeops.targets.ascend.emulate import execute
from edgeops.targets.ascend.reference import inputs_and_reference

B = boards.load("ascend-310b")
HZ = B.clock_hz


def _dma_s(link, nbytes, runs=0, active=1):
    p = B.path(*link.split("->"))
    if runs:
        run = nbytes / runs
        nbytes = runs * -(-run // p.burst_bytes) * p.burst_bytes
    return p.setup_latency_s + nbytes * (active if p.shared else 1) / p.bandwidth_bytes_per_s


def test_units_run_in_order_and_in_parallel():
    t = Trace()
    t.add("mte2", "dma", "gm->l1", 4096, 64)
    t.add("mte1", "dma", "l1->l0a", 4096)        # independent units overlap
    r = replay(B, [t])
    want = max(_dma_s("gm->l1", 4096, 64), _dma_s("l1->l0a", 4096))
    assert r.body_s == pytest.approx(want + 1 / HZ, rel=1e-9)   # + one issue cycle


def test_wait_holds_its_unit_until_the_set_completes():
    t = Trace()
    t.add("mte2", "dma", "gm->l1", 4096, 64)
    s = t.add("mte2", "set")
    t.add("mte1", "wait", dep=s)
    t.add("mte1", "dma", "l1->l0a", 4096)
    r = replay(B, [t])
    assert r.body_s == pytest.approx(_dma_s("gm->l1", 4096, 64) + _dma_s("l1->l0a", 4096) + 1 / HZ,
                                     rel=1e-9)
    assert r.unit_busy_s["mte2"] == pytest.approx(_dma_s("gm->l1", 4096, 64))


def test_burst_rounding_and_shared_bandwidth():
    """64 runs of 6 bytes cost 64 full 64-byte bursts; a shared path is split among cores."""
    t = Trace()
    t.add("mte2", "dma", "gm->l1", 384, 64)
    assert replay(B, [t]).unit_busy_s["mte2"] == pytest.approx(_dma_s("gm->l1", 64 * 64))
    b9 = boards.load("ascend-910b")
    one = replay(b9, [t], active=1).unit_busy_s["mte2"]
    many = replay(b9, [t], active=24).unit_busy_s["mte2"]
    p = b9.path("gm", "l1")
    assert many - one == pytest.approx(23 * 512 * 64 / p.bandwidth_bytes_per_s)


def test_compute_uses_the_board_rate_and_launch_is_added():
    t = Trace()
    t.add("cube", "compute", amount=2 * 16 ** 3 * 1000, dtype="fp16")
    r = replay(B, [t])
    assert r.unit_cycles["cube"] == pytest.approx(1000)          # one 16^3 fractal per cycle
    assert r.total_s == pytest.approx(B.launch_overhead_s + r.body_s)


def test_unknown_path_is_a_board_error():
    t = Trace()
    t.add("mte2", "dma", "gm->nowhere", 1, 1)
    with pytest.raises(BoardError, match="no path for a traced move gm->nowhere"):
        replay(B, [t])


def _eltwise(bufs, board="ascend-310b"):
    spec = "eltwise:numel=65536,inputs=1,ops=1,dtype=fp16"
    lv = {"name": "ub", "tile": {"e": 4096}, "order": ["e"], "buffers": {"in": bufs, "out": bufs},
          "holds": {}}
    til = T.Tiling.from_dict({"version": 1, "op": "eltwise", "decomposition": "stream",
                              "target": "ascend", "levels": [lv], "split": {}})
    sp = T.parse_spec(spec)
    gm, _ = inputs_and_reference(sp, np.random.default_rng(0))
    return execute(sp, til, board, gm).replay


def test_double_buffering_overlaps_copy_in_compute_and_copy_out():
    """16 tiles: with two buffers per queue the busiest stage sets the pace; with one, copy-in of
    tile i+1 still overlaps copy-out of tile i (they use different queues) -- Ascend C's TQue
    semantics -- so one buffer costs about in + out per tile, not in + compute + out."""
    one, two = _eltwise(1), _eltwise(2)
    busy = two.unit_busy_s
    assert two.body_s < one.body_s
    assert two.body_s == pytest.approx(max(busy["mte2"], busy["mte3"]), rel=0.15)
    assert one.body_s < busy["mte2"] + busy["mte3"] + busy["vector"]
    assert one.body_s == pytest.approx(busy["mte2"] + busy["vector"] + busy["mte3"] / 16, rel=0.15)
