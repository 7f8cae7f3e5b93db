"""Roofline roofs from the board files' own figures (read here with tomllib, not the boards
loader), and no point above its roof without a reason that accounts for it."""
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from edgeops import boards
from edgeops import tiling as T
from edgeops.simulator.roofline import board_roof, kernel_roof, place, points_from_nodes

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

BOARD_DIR = Path(boards.__file__).parent
BUNDLED = ("rk3588", "rpi5", "ascend-910b", "ascend-310b", "jetson-orin-nano", "jetson-agx-orin")


def toml(name):
    return tomllib.loads((BOARD_DIR / f"{name}.toml").read_text())


def by_hand(name, dtype):
    """(per-core-type FLOP/s {core: (count, per-core rate)}, off-chip bandwidth) from the TOML."""
    d = toml(name)
    clock = d["clock"]["hz"]
    cores = {c["name"]: (c["count"], c.get("hz", clock)) for c in d["core"]}
    rate = {}
    for u in d["unit"]:
        n, hz = cores[u["core"]]
        f = u["flops_per_cycle"].get(dtype, 0) * u["per_core"] * hz
        if f:
            rate[u["core"]] = (n, rate.get(u["core"], (n, 0.0))[1] + f)
    off = next(m["name"] for m in d["memory"] if m["offchip"])
    bw = max(p["bandwidth_bytes_per_s"] for p in d["path"] if p["src"] == off)
    return rate, bw


@pytest.mark.parametrize("name", BUNDLED)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "int8"])
def test_board_total_is_every_unit_over_every_core(name, dtype):
    rate, bw = by_hand(name, dtype)
    b = boards.load(name)
    r = board_roof(b, dtype)
    assert r.flops_s == pytest.approx(sum(n * f for n, f in rate.values()), rel=1e-12)
    assert r.bytes_s == bw
    assert kernel_roof(b, dtype).flops_s <= r.flops_s      # the kernels' cores are a part of it


def test_rk3588_big_cluster_and_board_total():
    """4 A76 x 2.4 GHz x 16 fp32 FLOP/cycle = 153.6 GFLOP/s; + 4 A55 x 1.8 GHz x 8 = 211.2."""
    d = toml("rk3588")
    little = next(c for c in d["core"] if c["name"] == "cpu_little")
    big = 4 * d["clock"]["hz"] * 16
    small = little["count"] * little["hz"] * 8
    b = boards.load("rk3588")
    assert kernel_roof(b, "fp32").flops_s == pytest.approx(big) == pytest.approx(153.6e9)
    assert board_roof(b, "fp32").flops_s == pytest.approx(big + small) == pytest.approx(211.2e9)
    for t in range(1, 11):     # threads fill the A76s, then the A55s, never past the 8 cores
        want = min(t, 4) * big / 4 + min(max(t - 4, 0), 4) * small / 4
        assert kernel_roof(b, "fp32", threads=t).flops_s == pytest.approx(want), t


@pytest.mark.parametrize("name,dtype,unit", [("ascend-910b", "fp16", "cube"),
                                             ("jetson-orin-nano", "fp16", "tensor_core"),
                                             ("jetson-orin-nano", "fp32", "cuda_core"),
                                             ("rpi5", "fp32", "simd")])
def test_kernel_roof_is_the_kernel_unit_over_its_cores(name, dtype, unit):
    d = toml(name)
    u = next(x for x in d["unit"] if x["name"] == unit)
    c = next(x for x in d["core"] if x["name"] == u["core"])
    used = 2 if d["kind"] == "cpu" else c["count"]     # threads count on CPUs only
    want = u["flops_per_cycle"][dtype] * u["per_core"] * used * c.get("hz", d["clock"]["hz"])
    r = kernel_roof(boards.load(name), dtype, threads=2)
    assert r.flops_s == pytest.approx(want) and r.cores == used


@st.composite
def node(draw):
    board = draw(st.sampled_from(["rk3588", "rpi5", "ascend-910b", "ascend-310b", "jetson-orin-nano"]))
    dt = "fp16" if board.startswith(("ascend", "jetson")) else "fp32"
    kind = draw(st.sampled_from(["gemm", "conv", "layernorm", "eltwise"]))
    i = lambda lo, hi: draw(st.integers(lo, hi))
    if kind == "gemm":
        spec = f"gemm:M={i(1, 1500)},N={i(1, 1500)},K={i(1, 1500)}"
    elif kind == "conv":
        spec = f"conv2d:N=1,C={i(1, 128)},H={(h := i(3, 60))},W={h},K={i(1, 128)},R=3,S=3,pad=1"
    elif kind == "layernorm":
        spec = f"layernorm:M={i(1, 500)},D={i(1, 3000)}"
    else:
        spec = f"eltwise:numel={i(1, 10 ** 6)},inputs={i(1, 3)}"
    return board, f"{spec},dtype={dt}", draw(st.sampled_from([None, 1, 2, 3]))


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(node())
def test_points_above_the_roof_say_why_and_the_reason_accounts_for_it(case):
    name, spec, threads = case
    b = boards.load(name)
    dt = spec.rsplit("dtype=", 1)[1]
    roof = kernel_roof(b, dt, threads=threads)
    for dec in T.decompositions(spec, name):
        r = T.search(spec, name, decomposition=dec, budget=2000, top=1)
        pr = r.best.prediction
        pt, = place([{"label": dec, "flops": pr.flops, "offchip_bytes": pr.offchip_bytes,
                      "latency_s": pr.latency_s, "decomposition": dec, "bytes": pr.bytes,
                      "cores": r.best.tiling.cores}], roof, b)
        ai = pr.flops / pr.offchip_bytes
        assert pt.ceiling == pytest.approx(min(roof.flops_s, ai * roof.bytes_s))
        if pt.achieved <= pt.ceiling:
            assert pt.reason is None
            continue
        assert pt.above and pt.reason and "not explained" not in pt.reason, (spec, dec, pt)
        assert pt.achieved <= pt.explained * (1 + 1e-9)


def test_an_unaccountable_point_is_flagged():
    b = boards.load("rk3588")
    roof = kernel_roof(b, "fp32")
    # 1 GFLOP in 1 ms at high intensity: 1 TFLOP/s, far above 153.6 GFLOP/s, no cause given
    pt, = place([{"label": "x", "flops": 1e9, "offchip_bytes": 1e6, "latency_s": 1e-3}], roof, b)
    assert pt.above and "not explained" in pt.reason


def test_points_from_simulate_rows():
    rows = [{"node": "a", "model": "tiled", "flops": 10, "offchip_bytes": 5, "latency_s": 1.0,
             "decomposition": "gemm", "bytes": {"dram->l3": 5},
             "tiling": {"split": {"m": 2, "n": 3}}},
            {"node": "b", "model": "stream", "flops": 0, "offchip_bytes": 5, "latency_s": 1.0}]
    pts = points_from_nodes(rows)
    assert [p["label"] for p in pts] == ["a"] and pts[0]["cores"] == 6


def test_plot_draws_both_roofs(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="--plot needs the plot extra (make test installs it)")
    from edgeops.simulator import plot
    drawn = []
    import matplotlib.axes
    orig = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda self, xs, ys, **kw: drawn.append(max(ys)) or orig(self, xs, ys, **kw))
    out = plot.roofline([{"label": "n", "flops": 1e9, "offchip_bytes": 1e7, "latency_s": 1e-2}],
                        boards.load("rk3588"), tmp_path / "r.png", dtype="fp32", threads=2)
    assert Path(out).stat().st_size > 0
    assert drawn == [pytest.approx(76.8e9), pytest.approx(211.2e9)]
    assert math.isclose(drawn[1], board_roof(boards.load("rk3588"), "fp32").flops_s)
