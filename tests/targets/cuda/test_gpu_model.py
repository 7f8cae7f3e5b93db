"""simulator.gpu: occupancy (the CUDA occupancy calculation), GEMM DRAM traffic naive vs tiled,
host<->device copies; launch: tile configuration from the tiling or the board."""
import math

import pytest

from edgeops import boards
from edgeops.simulator import gpu


@pytest.fixture(scope="module")
def nano():
    return boards.load("jetson-orin-nano")


@pytest.mark.parametrize("threads,smem,regs,blocks,limiter", [
    (256, 0, 32, 6, "warps"),            # 1536 / 256
    (1024, 0, 32, 1, "warps"),
    (32, 0, 16, 16, "blocks"),           # 16 resident blocks max on 8.7
    (256, 0, 64, 4, "registers"),        # 64 * 32 = 2048 regs/warp -> 32 warps -> 4 blocks
    (256, 0, 41, 5, "registers"),        # 41 * 32 = 1312 rounds up to 1536/warp -> 42 warps
    (128, 48 * 1024, 32, 3, "shared_memory"),  # 167936 // (49152 + 1024)
])
def test_occupancy_limits(nano, threads, smem, regs, blocks, limiter):
    o = gpu.occupancy(nano.gpu, threads, smem, regs)
    assert (o.blocks_per_sm, o.limiter) == (blocks, limiter)
    assert o.occupancy == pytest.approx(blocks * math.ceil(threads / 32) / 48)


@pytest.mark.parametrize("kw,msg", [({"threads_per_block": 2048}, "threads"),
                                    ({"threads_per_block": 0}, "threads"),
                                    ({"threads_per_block": 64, "registers_per_thread": 256}, "registers"),
                                    ({"threads_per_block": 64, "smem_bytes_per_block": 10**6}, "shared")])
def test_occupancy_preconditions(nano, kw, msg):
    with pytest.raises(ValueError, match=msg):
        gpu.occupancy(nano.gpu, **kw)


def test_gemm_traffic_naive_vs_tiled():
    m = n = k = 2048
    naive = gpu.gemm_dram_bytes_naive(m, n, k)
    assert naive == (2 * m * n * k + m * n) * 4
    t64 = gpu.gemm_dram_bytes_tiled(m, n, k, 64, 64)
    assert t64 == (m * k * 32 + k * n * 32 + m * n) * 4
    assert naive / t64 == pytest.approx((2 * k + 1) / (2 * k / 64 + 1), rel=1e-9)
    # a 1x1 tile is the naive kernel; bigger tiles never read more
    assert gpu.gemm_dram_bytes_tiled(m, n, k, 1, 1) == naive
    assert gpu.gemm_dram_bytes_tiled(m, n, k, 128, 128) < t64
    # ragged: partial tiles still read whole rows/columns once per tile
    assert gpu.gemm_dram_bytes_tiled(100, 70, 50, 64, 64) == (100 * 50 * 2 + 50 * 70 * 2 + 7000) * 4
    with pytest.raises(ValueError):
        gpu.gemm_dram_bytes_tiled(8, 8, 8, 0, 8)


def test_gemm_traffic_from_a_tiling():
    from edgeops.tiling import LevelTiling, Tiling
    lv = LevelTiling("smem", (("m", 32), ("n", 64), ("k", 16)), ("m", "n", "k"), (), ())
    assert gpu.tile_from_tiling(Tiling("gemm", "gemm", "cuda", (lv,))) == (32, 64, 16)


def test_copy_cost_and_call_prediction(nano):
    assert gpu.copy_seconds(nano, 34.1e9) == pytest.approx(1.0)
    assert gpu.dram_bandwidth(nano) == pytest.approx(68.3e9)
    assert gpu.fp32_peak_flops(nano) == pytest.approx(8 * 128 * 2 * 625e6)
    naive = gpu.gemm_call(nano, 1024, 1024, 1024)
    tiled = gpu.gemm_call(nano, 1024, 1024, 1024, tile=(64, 64))
    assert naive.bound == "memory" and tiled.latency_s < naive.latency_s
    assert tiled.copy_bytes == 3 * 1024 * 1024 * 4 and tiled.copy_s > 0
    assert gpu.gemm_call(nano, 64, 64, 64, copies=False).copy_s == 0.0
    with pytest.raises(ValueError, match="no \\[gpu\\] table"):
        gpu.copy_seconds(boards.load("rpi5"), 1)


def test_launch_config_from_tiling_and_board(nano):
    from edgeops.targets.cuda import launch
    from edgeops.tiling import LevelTiling, Tiling

    def t(m, n):
        return Tiling("gemm", "gemm", "cuda",
                      (LevelTiling("smem", (("m", m), ("n", n), ("k", 16)), ("m", "n", "k"), (), ()),))
    assert launch.from_tiling(t(64, 64)) == launch.CONFIGS["t64"]
    assert launch.from_tiling(t(30, 40)) == launch.CONFIGS["t32"]
    assert launch.from_tiling(t(1, 1)) == launch.CONFIGS["t8"]
    assert launch.from_tiling(None) is None
    # no tiling: the largest configuration that still gives each of the 8 SMs a block
    assert launch.choose(2048, 2048, None, nano) == launch.CONFIGS["t128"]
    assert launch.choose(256, 256, None, nano) == launch.CONFIGS["t64"]
    assert launch.choose(5, 5, None, nano) == launch.CONFIGS["t8"]
    for c in launch.CONFIGS.values():
        assert c.smem_bytes(2) <= launch.STATIC_SMEM_LIMIT
        assert gpu.occupancy(nano.gpu, c.threads, c.smem_bytes(), c.registers_estimate()).blocks_per_sm >= 1
    assert launch.norm_threads(20) == 32 and launch.norm_threads(5000) == 256
    with pytest.raises(ValueError, match="not compiled"):
        launch.norm_threads(10, 48)


def test_search_tiling_on_jetson_maps_to_a_config(nano):
    """The planner's fp16 GEMM tiling for the Orin Nano picks a compiled configuration."""
    from edgeops import tiling
    from edgeops.targets.cuda import launch
    res = tiling.search("gemm:M=100,N=70,K=50,dtype=fp16", nano, top=1)
    assert res.best.tiling.target == "cuda"
    assert launch.from_tiling(res.best.tiling) in launch.CONFIGS.values()


def test_accepts_tiling_hook():
    import edgeops.targets.cuda as cuda
    from edgeops.tiling import LevelTiling, Tiling
    lv = LevelTiling("smem", (("m", 32), ("n", 32), ("k", 16)), ("m", "n", "k"), (), ())
    t = Tiling("gemm", "gemm", "cuda", (lv,))
    assert cuda.accepts_tiling("cuda.gemm_tiled", t) is True
    assert "launch size" in cuda.accepts_tiling("cuda.relu", t)
    assert "not 'neon'" in cuda.accepts_tiling("cuda.gemm_tiled", Tiling("gemm", "gemm", "neon", (lv,)))
    el = LevelTiling("smem", (("x", 32),), ("x",), (), ())
    assert "no" in cuda.accepts_tiling("cuda.swiglu", Tiling("eltwise", "eltwise", "cuda", (el,)))
