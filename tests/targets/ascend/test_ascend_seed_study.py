"""Seed study: ResNet-18 conv1 (1x3x224x224, 64x7x7, stride 2, pad 3) on ascend-910b, naive vs
searched tiling -- the emulator's DMA byte counts equal the simulator's closed form, off-chip and
per path, and the naive tiling's repeated off-chip re-reads show up in both.

The full-size naive tiling executes ~6 million instructions (about two minutes here), so CI
runs the same layer on a 56x56 crop and the full size is in the ``full`` suite."""
import pytest

from edgeops import tiling as T
from edgeops.targets.ascend.emulate import emulate_op

CONV1 = "conv2d:N=1,C=3,H={h},W={h},K=64,R=7,S=7,stride=2,pad=3,dtype=fp16"
BOARD = "ascend-910b"


def _study(h):
    spec = CONV1.format(h=h)
    out = {}
    for name, til in (("naive", T.naive(spec, BOARD, decomposition="implicit_gemm")),
                      ("searched", T.search(spec, BOARD, decomposition="implicit_gemm").best.tiling)):
        r = emulate_op(spec, til, BOARD)
        assert r["paths_agree"], (name, r["emulated"]["bytes"], r["predicted"]["bytes"])
        assert r["emulated"]["offchip_bytes"] == r["predicted"]["offchip_bytes"]
        assert r["max_rel_error"] < 4 * 2.0 ** -11
        out[name] = r
    naive, best = out["naive"]["emulated"], out["searched"]["emulated"]
    # the mechanism: the naive tiling re-reads the input window from HBM for every 16-channel
    # block of output and every output pixel (7x7 halos at stride 2)
    assert naive["offchip_bytes"] > 10 * best["offchip_bytes"]
    assert naive["latency_s"] > best["latency_s"]
    print(f"\nconv1 {h}x{h}: naive {naive['offchip_bytes']:,} B / {naive['latency_s'] * 1e3:.3f} ms, "
          f"searched {best['offchip_bytes']:,} B / {best['latency_s'] * 1e3:.3f} ms")
    return out


def test_conv1_cropped_naive_vs_searched_same_bytes_in_emulator_and_simulator():
    _study(56)


@pytest.mark.full
def test_conv1_full_size_naive_vs_searched_same_bytes_in_emulator_and_simulator():
    out = _study(224)
    assert out["naive"]["emulated"]["offchip_bytes"] == 241_265_240
