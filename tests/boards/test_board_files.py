"""The seven bundled board files: they load, every figure is cited, and the figures agree with
each other and with the vendors' headline numbers (recomputed here from the raw TOML)."""
import math
import sys

import pytest

from edgeops import boards

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

BUNDLED = ["ascend-310b", "ascend-910b", "host", "jetson-agx-orin", "jetson-orin-nano", "rk3588", "rpi5"]
STATIC = [n for n in BUNDLED if n != "host"]


def raw(name):
    return tomllib.loads((boards.BOARD_DIR / f"{name}.toml").read_text())


def figure_keys(b):
    """Every numeric figure of a loaded board, as the loader names it in ``sources``."""
    keys = ["clock.hz", "launch.overhead_s"]
    for i, c in enumerate(b.cores):
        keys += [f"core[{i}].count"] + ([f"core[{i}].hz"] if c.hz is not None else [])
    keys += [f"unit[{i}].{f}" for i in range(len(b.units)) for f in ("per_core", "flops_per_cycle")]
    keys += [f"memory[{i}].{f}" for i in range(len(b.memories)) for f in ("size_bytes", "alignment_bytes")]
    keys += [f"path[{i}].{f}" for i in range(len(b.paths))
             for f in ("bandwidth_bytes_per_s", "setup_latency_s", "burst_bytes")]
    if b.gpu:
        keys += [f"gpu.{f}" for f in vars(b.gpu)]
    if b.peer:
        keys += [f"peer.{f}" for f in vars(b.peer)]
    return keys


def test_names_lists_the_seven_boards():
    assert boards.names() == BUNDLED


@pytest.mark.parametrize("name", BUNDLED)
def test_board_loads_and_every_figure_has_a_source(name):
    b = boards.load(name)
    assert b.name == name and b.file_sha256
    keys = figure_keys(b)
    missing = [k for k in keys if not (b.sources.get(k) or "").strip()]
    assert not missing, f"{name}: figures without a source: {missing}"
    assert set(b.sources) == set(keys), "sources names something that is not a figure"


@pytest.mark.parametrize("name", STATIC)
def test_estimates_say_so(name):
    b = boards.load(name)
    for key in ["launch.overhead_s"] + [k for k in b.sources if k.startswith("peer.")]:
        assert "estimate" in b.sources[key], f"{name}: {key} is an estimate but its source does not say so"


@pytest.mark.parametrize("name", STATIC)
def test_peak_flops_recomputed_from_the_toml(name):
    doc = raw(name)
    b = boards.load(name)
    clock = doc["clock"]["hz"]
    cores = {c["name"]: (c["count"], c.get("hz", clock)) for c in doc["core"]}
    for dtype in ("fp32", "fp16", "int8"):
        expect = sum(u["flops_per_cycle"].get(dtype, 0) * u["per_core"] * cores[u["core"]][0]
                     * cores[u["core"]][1] for u in doc["unit"])
        assert math.isclose(b.peak_flops(dtype), expect, rel_tol=1e-12), (name, dtype)


# vendor headline figures (datasheets), against units x cores x clock
HEADLINES = [
    ("jetson-orin-nano", "tensor_core", "int8", 20e12),   # 40 sparse / 20 dense INT8 TOPS
    ("jetson-orin-nano", "cuda_core", "fp32", 1.28e12),    # 1024 cores x 2 x 625 MHz
    ("jetson-agx-orin", "tensor_core", "int8", 85e12),    # GPU 170 sparse INT8 TOPS
    ("jetson-agx-orin", "cuda_core", "fp32", 5.3e12),     # 5.3 FP32 TFLOPS
    ("ascend-310b", "cube", "fp16", 4e12),                 # Atlas 200I DK A2: 4 TFLOPS fp16
    ("ascend-310b", "cube", "int8", 8e12),                 # 8 TOPS int8
]


@pytest.mark.parametrize("name,unit,dtype,headline", HEADLINES)
def test_peak_matches_vendor_headline(name, unit, dtype, headline):
    got = boards.load(name).peak_flops(dtype, unit=unit)
    assert abs(got / headline - 1) < 0.05, f"{name} {unit} {dtype}: {got:.3g} vs datasheet {headline:.3g}"


@pytest.mark.parametrize("name", BUNDLED)
def test_paths_connect_declared_levels_and_one_offchip(name):
    b = boards.load(name)
    names = {m.name for m in b.memories}
    assert sum(m.offchip for m in b.memories) == 1
    for p in b.paths:
        assert p.src in names and p.dst in names and p.src != p.dst
        assert p.bandwidth_bytes_per_s > 0 and p.burst_bytes > 0
    # every level is fed from off-chip memory or drains to it (L0C is filled by the Cube itself)
    def closure(edges):
        seen, todo = {b.offchip.name}, [b.offchip.name]
        while todo:
            m = todo.pop()
            for a, z in edges:
                if a == m and z not in seen:
                    seen.add(z)
                    todo.append(z)
        return seen
    fed = closure([(p.src, p.dst) for p in b.paths])
    drains = closure([(p.dst, p.src) for p in b.paths])
    assert fed | drains == names, f"{name}: levels with no route to or from off-chip: {names - fed - drains}"


@pytest.mark.parametrize("name", ["rpi5", "rk3588", "host"])
def test_cpu_levels_grow_outward(name):
    b = boards.load(name)
    size = {m.name: m.size_bytes for m in b.memories}
    for p in b.paths:
        assert size[p.src] > size[p.dst], f"{name}: {p.src} ({size[p.src]}) feeds larger {p.dst}"
    assert b.memory("l1d").scope == "cpu"


@pytest.mark.parametrize("name", ["jetson-orin-nano", "jetson-agx-orin"])
def test_gpu_limits_are_consistent(name):
    b = boards.load(name)
    g = b.gpu
    assert b.targets == ("cuda", "neon")
    assert g.max_threads_per_sm % g.warp_size == 0 and g.max_threads_per_block <= g.max_threads_per_sm
    assert g.shared_memory_per_block_bytes <= g.shared_memory_per_sm_bytes == b.memory("smem").size_bytes
    assert b.memory("smem").scope == "sm" and b.memory("l2").scope == "chip"
    assert b.path("dram", "l2").shared and not b.path("l2", "smem").shared
    assert g.host_device_bandwidth_bytes_per_s <= b.path("dram", "l2").bandwidth_bytes_per_s
    # the CPU cluster runs at its own clock, not the GPU's
    assert b.core_hz("cpu") > b.clock_hz == b.core_hz("sm")


def test_ascend_910b_separated_design():
    b = boards.load("ascend-910b")
    assert b.architecture == "separated" and b.targets == ("ascend",)
    assert b.core("aiv").count == 2 * b.core("aic").count == 48
    assert {m.name: m.alignment_bytes for m in b.memories if m.name in ("l0a", "l0b", "ub", "l1")} == \
        {"l0a": 512, "l0b": 512, "ub": 32, "l1": 32}
    assert b.memory("l2").scope == "chip"
    cube, vec = b.unit("cube"), b.unit("vector")
    assert (cube.core, vec.core) == ("aic", "aiv")
    assert cube.flops_per_cycle["fp16"] == 2 * 16 ** 3 and cube.flops_per_cycle["int8"] == 2 * cube.flops_per_cycle["fp16"]
    scope = {m.name: m.scope for m in b.memories}
    assert {scope[n] for n in ("l1", "l0a", "l0b", "l0c")} == {"aic"} and scope["ub"] == "aiv"
    # AIC and AIV only meet in GM/L2: no direct path between their private buffers
    for p in b.paths:
        assert {scope[p.src], scope[p.dst]} != {"aic", "aiv"}, f"{p.src}->{p.dst} crosses AIC/AIV"
    engines = {(p.src, p.dst): p.engine for p in b.paths}
    assert engines[("gm", "l1")] == engines[("gm", "ub")] == "mte2"
    assert engines[("l1", "l0a")] == engines[("l1", "l0b")] == "mte1"
    assert engines[("l0c", "gm")] == "fixpipe" and engines[("ub", "gm")] == "mte3"


def test_ascend_310b_combined_design():
    b = boards.load("ascend-310b")
    assert b.architecture == "combined" and [c.name for c in b.cores] == ["aicore"]
    assert {u.core for u in b.units} == {"aicore"}
    assert all(m.scope == "aicore" for m in b.memories if not m.offchip)
    b.path("l0c", "ub"), b.path("l1", "ub"), b.path("l0c", "gm")   # coupled-core paths exist
    assert b.memory("l0a").alignment_bytes == 512 and b.memory("ub").alignment_bytes == 32


def test_rk3588_models_the_little_cluster_at_its_own_clock():
    b = boards.load("rk3588")
    assert b.core_hz("cpu") == 2.4e9 and b.core_hz("cpu_little") == 1.8e9
    assert b.unit("simd").core == "cpu" and b.unit("simd_little").core == "cpu_little"
    assert "NPU" in b.description and "not modelled" in b.description
    big = b.peak_flops("fp32", unit="simd")
    assert math.isclose(big, 16 * 4 * 2.4e9)


@pytest.mark.parametrize("name", BUNDLED)
def test_to_dict_is_json_ready(name):
    import json
    d = boards.load(name).to_dict()
    assert json.loads(json.dumps(d))["name"] == name
