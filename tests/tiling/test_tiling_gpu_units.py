"""The matrix profile's compute unit follows the dtype: on a Jetson the tensor cores run fp16 and
int8, the CUDA cores fp32 (the tensor cores have no fp32 rate); the Ascend Cube has no fp32, so an
explicit fp32 op there stays a clear BoardError (fp32 models are cast to fp16 at graph level)."""
import tomllib
from pathlib import Path

import pytest

from edgeops.errors import BoardError
from edgeops.simulator.hardware import from_board
from edgeops.tiling.api import as_space
from edgeops.tiling.graphsim import board_cast, predict
from edgeops.tiling.search import search
from edgeops.tiling.tiling import Tiling
from edgeops import boards

BOARDS_DIR = Path(__file__).parents[2] / "boards"
M = N = K = 512


def units(name):
    d = tomllib.loads((BOARDS_DIR / f"{name}.toml").read_text())
    sms = next(c["count"] for c in d["core"] if c["name"] == "sm")
    return {u["name"]: u for u in d["unit"]}, sms


def tiling(split_m=8):
    return Tiling.from_dict({
        "version": 1, "op": "gemm", "decomposition": "gemm", "target": "cuda",
        "levels": [{"name": "smem", "tile": {"m": 64, "n": 64, "k": 16}, "order": ["m", "n", "k"],
                    "buffers": {"A": 1, "B": 1, "C": 1},
                    "holds": {"A": "smem", "B": "smem", "C": "reg"}}],
        "split": {"m": split_m}})


@pytest.mark.parametrize("dtype,unit", [("fp32", "cuda_core"), ("fp16", "tensor_core"),
                                        ("int8", "tensor_core")])
def test_jetson_gemm_cycles_use_the_dtypes_unit(dtype, unit):
    u, sms = units("jetson-orin-nano")
    sp = as_space(f"gemm:M={M},N={N},K={K},dtype={dtype}")
    pred = predict(sp, "jetson-orin-nano", tiling(sms), "cuda").prediction
    per_sm = u[unit]["per_core"] * u[unit]["flops_per_cycle"][dtype]   # flops per cycle per SM
    assert set(pred.cycles) == {unit}
    # 64-row tiles split over the SMs evenly: each SM does 1/sms of the flops, no padding
    assert pred.cycles[unit] == pytest.approx(2 * M * N * K / sms / per_sm)


def test_jetson_fp32_search_runs_on_cuda_cores():
    u, sms = units("jetson-orin-nano")
    r = search(as_space(f"gemm:M={M},N={N},K={K},dtype=fp32"), "jetson-orin-nano", budget=2000)
    cyc = r.best.prediction.cycles
    assert set(cyc) == {"cuda_core"}
    per_sm = u["cuda_core"]["per_core"] * u["cuda_core"]["flops_per_cycle"]["fp32"]
    assert cyc["cuda_core"] >= 2 * M * N * K / sms / per_sm * (1 - 1e-9)


def test_unit_choice_and_graph_cast():
    hw = from_board(boards.load("jetson-orin-nano"), "cuda")
    assert hw.unit("matrix", "fp32").name == "cuda_core"
    assert hw.unit("matrix", "fp16").name == hw.unit("matrix", "int8").name == "tensor_core"
    assert hw.unit("matrix").name == "tensor_core"
    assert board_cast("jetson-orin-nano", "cuda") == {}      # fp32 models run fp32 on CUDA cores
    assert board_cast("ascend-910b") == {"fp32": "fp16"}     # the Cube has no fp32


def test_ascend_explicit_fp32_gemm_is_a_board_error():
    with pytest.raises(BoardError, match="no rate for fp32"):
        search(as_space("gemm:M=128,N=128,K=128,dtype=fp32"), "ascend-910b", budget=500)
