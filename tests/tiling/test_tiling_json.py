"""The Tiling value: frozen, hashable, versioned JSON; a file that does not fit the op is refused."""
import dataclasses
import json

import pytest

from edgeops.errors import TilingError
from edgeops.tiling import TILING_VERSION, Tiling, naive, predict


def test_roundtrip_and_hashable(mini_npu):
    t = naive("gemm:M=64,N=48,K=32,dtype=fp16", mini_npu)
    back = Tiling.from_json(t.to_json())
    assert back == t and hash(back) == hash(t)
    assert json.loads(t.to_json())["version"] == TILING_VERSION
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.op = "conv2d"


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(version=TILING_VERSION + 1), "newer than this edgeops"),
    (lambda d: d.update(version="1"), "version must be a positive integer"),
    (lambda d: d.pop("levels"), "missing field 'levels'"),
    (lambda d: d.update(extra=1), "unknown field"),
    (lambda d: d["levels"][0]["tile"].update(m=0), r"levels\[0\].tile.m must be an integer >= 1"),
    (lambda d: d["levels"][0].update(order=["m", "m", "k"]), "must list each tiled dim"),
    (lambda d: d["levels"][0]["buffers"].update(A=3), r"buffers.A must be an integer 1..2"),
    (lambda d: d.update(split={"m": 0}), "split.m must be an integer >= 1"),
])
def test_malformed_files_name_the_field(mini_npu, mutate, match):
    d = naive("gemm:M=64,N=48,K=32,dtype=fp16", mini_npu).to_dict()
    mutate(d)
    with pytest.raises(TilingError, match=match):
        Tiling.from_dict(d)


def test_not_json():
    with pytest.raises(TilingError, match="not valid JSON"):
        Tiling.from_json("{nope")


def test_a_tiling_for_another_op_does_not_fit(mini_npu):
    gemm = naive("gemm:M=64,N=48,K=32,dtype=fp16", mini_npu)
    with pytest.raises(TilingError, match="tiling.op is 'gemm' but the op is 'conv2d'"):
        predict("conv2d:N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=fp16", mini_npu,
                dataclasses.replace(gemm, decomposition="implicit_gemm"))
    d = gemm.to_dict()
    d["levels"][0]["tile"] = {"m": 16, "n": 16, "q": 16}
    d["levels"][0]["order"] = ["m", "n", "q"]
    with pytest.raises(TilingError, match=r"levels\[0\].tile has dims \['m', 'n', 'q'\]"):
        predict("gemm:M=64,N=48,K=32,dtype=fp16", mini_npu, d)


def test_a_tiling_for_another_target_does_not_fit(mini_npu, two_level):
    gemm = naive("gemm:M=64,N=48,K=32,dtype=fp16", mini_npu)
    with pytest.raises(TilingError, match="tiling.target is 'ascend' but .* tiles for 'flat'"):
        predict("gemm:M=64,N=48,K=32", two_level, gemm)


def test_describe_is_one_line(mini_npu):
    t = naive("gemm:M=64,N=48,K=32,dtype=fp16", mini_npu)
    assert t.describe() == "l1 m16 n16 k16 [m,n,k] | l0 m16 n16 k16 [m,n,k] | split m:2"
