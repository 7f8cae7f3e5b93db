"""``emulate_op``: what ``edgeops simulate ... --emulate`` reports."""
import json

import pytest

from edgeops import tiling as T
from edgeops.errors import TilingError
from edgeops.targets.ascend import EmulatorError, emulate_op

GEMM = "gemm:M=64,N=48,K=40,dtype=fp16"


def test_report_has_both_sides_and_the_error():
    r = emulate_op(GEMM, None, "ascend-910b")
    json.dumps(r)
    for side in ("emulated", "predicted"):
        assert r[side]["offchip_bytes"] > 0 and r[side]["cycles"] > 0
    assert r["emulated"]["offchip_bytes"] == r["predicted"]["offchip_bytes"]
    assert r["paths_agree"]
    assert 0 <= r["max_rel_error"] < 2 * 2.0 ** -11 and r["max_abs_error"] >= 0
    assert r["emulated"]["cycles"] == pytest.approx(r["predicted"]["cycles"], rel=0.25)


@pytest.mark.parametrize("form", ["naive", "dict", "json", "object"])
def test_tiling_forms(form):
    til = T.naive(GEMM, "ascend-310b")
    arg = {"naive": "naive", "dict": til.to_dict(), "json": til.to_json(), "object": til}[form]
    r = emulate_op(GEMM, arg, "ascend-310b")
    assert r["tiling"] == til.to_dict() and r["paths_agree"]


def test_illegal_tiling_rejected_by_the_model_and_by_the_emulator():
    d = T.naive(GEMM, "ascend-910b").to_dict()
    d["levels"][0]["tile"] = {"m": 64, "n": 48, "k": 40}
    d["levels"][1]["tile"] = {"m": 64, "n": 48, "k": 40}
    d["levels"][1]["buffers"] = {"A": 2, "B": 2, "C": 2}
    ok = emulate_op(GEMM, d, "ascend-910b")           # fits: 64 x 48 x 40 is small
    assert ok["paths_agree"]
    big = "gemm:M=512,N=512,K=512,dtype=fp16"
    d["levels"][0]["tile"] = {"m": 512, "n": 512, "k": 512}
    d["levels"][1]["tile"] = {"m": 512, "n": 64, "k": 64}
    with pytest.raises(TilingError, match=r"L1 holds A: 1 buffer x 524,288 B \+ B"):
        emulate_op(big, d, "ascend-910b")
    with pytest.raises(EmulatorError, match=r"L1 queue 'B1' needs 1 x 524,288 B at offset 524,288, "
                                            r"ending at 1,048,576 B > capacity 524,288 B"):
        emulate_op(big, d, "ascend-910b", check=False)


def test_separated_core_pays_the_round_trip_for_a_vector_epilogue():
    """SiLU after a convolution: on the 910B (AIC/AIV split) the Cube writes the pre-activation
    result to GM and an AIV kernel reads it back; on the 310B it stays on chip."""
    spec = "conv2d:N=1,C=8,H=12,W=11,K=16,R=3,S=3,pad=1,act=silu,dtype=fp16"
    out_bytes = 16 * 12 * 11 * 2
    sep = emulate_op(spec, None, "ascend-910b")
    assert [k["name"] for k in sep["emulated"]["kernels"]] == ["conv2d", "silu epilogue (AIV via GM)"]
    assert sep["emulated"]["kernels"][1]["offchip_bytes"] == 2 * out_bytes
    assert sep["paths_agree"]
    comb = emulate_op(spec, None, "ascend-310b")
    assert len(comb["emulated"]["kernels"]) == 1
    assert comb["emulated"]["bytes"]["l0c->ub"] == out_bytes == comb["emulated"]["bytes"]["ub->gm"]
    assert comb["emulated"]["offchip_bytes"] == comb["predicted"]["offchip_bytes"]
    for r in (sep, comb):
        assert r["max_rel_error"] < 4 * 2.0 ** -11


def test_relu_rides_on_fixpipe_on_both_designs():
    for board in ("ascend-910b", "ascend-310b"):
        r = emulate_op("conv2d:N=1,C=8,H=12,W=11,K=16,R=3,S=3,pad=1,act=relu,dtype=fp16", None, board)
        assert len(r["emulated"]["kernels"]) == 1 and r["paths_agree"]
