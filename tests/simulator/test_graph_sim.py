"""Graph-level simulation of the bundled sample model, unfused and fused: launches, fusion keeping
intermediates on chip, stream/view models, the timeline, the Chrome trace and the ORT peer."""
import json

import pytest

from edgeops import graph
from edgeops.dtypes import itemsize
from edgeops.errors import BoardError
from edgeops.passes import run_passes
from edgeops.sample import build_sample_model
from edgeops.simulator.peer import peer_latency
from edgeops.simulator.trace import track_busy_s, write_trace
from edgeops.tiling.graphsim import simulate_model

BOARDS = ("ascend-910b", "rk3588")
GN_CHAIN = ("down1.gn", "down1.silu.sigmoid", "down1.silu.mul")


@pytest.fixture(scope="module")
def models():
    m = build_sample_model()
    fused, _ = run_passes(m)
    return {"unfused": graph.load(m), "fused": graph.load(fused)}


@pytest.fixture(scope="module")
def sims(models):
    return {(b, k): simulate_model(g, b) for b in BOARDS for k, g in models.items()}


def rows(sim):
    return {r["node"]: r for r in sim.to_dict()["nodes"]}


@pytest.mark.parametrize("board", BOARDS)
def test_fusion_cuts_latency_launches_and_traffic(sims, board):
    u, f = sims[board, "unfused"].to_dict(), sims[board, "fused"].to_dict()
    assert f["total_latency_s"] < u["total_latency_s"]
    assert f["launches"] < u["launches"]
    assert f["offchip_bytes"] < u["offchip_bytes"]
    for d in (u, f):
        assert d["total_latency_s"] == pytest.approx(sum(r["latency_s"] for r in d["nodes"]))
        assert d["launches"] == sum(r["launches"] for r in d["nodes"])


@pytest.mark.parametrize("board", BOARDS)
def test_unfused_groupnorm_chain_spills_its_intermediates(sims, models, board):
    """GroupNormalization -> Sigmoid -> Mul unfused: three launches, and each intermediate is
    written off-chip once and read back at least once; the fused GroupNormAct is one launch
    that moves less than the chain."""
    sim = sims[board, "unfused"]
    g = models["unfused"]
    elem = itemsize(sim.cast.get("fp32", "fp32"))
    r = rows(sim)
    chain = [r[n] for n in GN_CHAIN]
    assert [x["model"] for x in chain] == ["tiled"] * 3
    assert sum(x["launches"] for x in chain) == 3
    inter = sum(g.tensors[t].numel * elem for t in ("down1.gn", "down1.silu.sigmoid"))
    assert sum(x["offchip_bytes"] for x in chain) >= 2 * inter
    fr = rows(sims[board, "fused"])["down1.gn"]
    assert fr["op"] == "ai.edgeops::GroupNormAct" and fr["model"] == "tiled"
    assert fr["launches"] == 1
    assert fr["offchip_bytes"] < sum(x["offchip_bytes"] for x in chain)
    assert fr["latency_s"] < sum(x["latency_s"] for x in chain)
    # the fused node reads x and writes y once (plus its parameters): no intermediate at all
    x_out = g.tensors["down1.conv"].numel * elem
    assert fr["offchip_bytes"] < 2 * x_out + inter


@pytest.mark.parametrize("board", BOARDS)
def test_views_are_free_and_layout_ops_stream(sims, models, board):
    sim = sims[board, "unfused"]
    elem = itemsize(sim.cast.get("fp32", "fp32"))
    r = rows(sim)
    for name in ("tokens.reshape", "head.reshape", "head.flatten", "block2.dropout"):
        assert r[name]["model"] == "view"
        assert r[name]["latency_s"] == 0 and r[name]["offchip_bytes"] == 0 and r[name]["launches"] == 0
    t = r["tokens.transpose"]
    assert t["model"] == "stream" and t["launches"] == 1
    n = models["unfused"].tensors["tokens.transpose"].numel
    assert t["offchip_bytes"] == 2 * n * elem          # read once, written once
    for x in r.values():
        assert x["model"] in ("tiled", "stream", "view")
        if x["model"] == "tiled":
            assert x["tiling"] and x["decomposition"] and x["bound"] in ("compute", "dma", "launch")


def test_timeline_is_one_stream(sims):
    d = sims["ascend-910b", "fused"].to_dict()
    t = 0.0
    for r in d["nodes"]:
        assert r["start_s"] == pytest.approx(t)
        t = r["end_s"]
    assert t == pytest.approx(d["total_latency_s"])


def test_peak_memory_counts_live_activations(sims, models):
    """Peak >= the inputs + outputs of any step that cannot work in place; <= every activation
    at once."""
    from edgeops.simulator.graph import INPLACE_OPS, VIEW_OPS
    for (board, kind), sim in sims.items():
        g = models[kind]
        elem = itemsize(sim.cast.get("fp32", "fp32"))
        acts = {n: t for n, t in g.tensors.items() if not t.is_const and t.numel}
        step_need = max(sum(acts[x].numel * elem for x in set(n.inputs + n.outputs) if x in acts)
                        for n in g.nodes if n.op_type not in INPLACE_OPS | VIEW_OPS)
        peak = sim.to_dict()["peak_memory_bytes"]
        assert step_need <= peak <= sum(t.numel * elem for t in acts.values()), (board, kind)


@pytest.mark.parametrize("board", BOARDS)
def test_chrome_trace_durations_sum_to_busy_time(sims, board, tmp_path):
    sim = sims[board, "fused"]
    path = tmp_path / "trace.json"
    write_trace(path, sim.trace())
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 and {"ts", "pid", "tid", "name"} <= set(e) for e in xs)
    busy = track_busy_s(doc)
    d = sim.to_dict()
    assert busy["kernels"] == pytest.approx(d["total_latency_s"])
    assert busy["launch"] == pytest.approx(d["launch_s"])
    for track, seconds in d["busy_s"].items():
        assert busy[track] == pytest.approx(seconds)
    units = [u for u in d["busy_s"] if not u.startswith("dma ")]
    assert units                       # at least one compute unit track


def test_fp32_model_runs_in_fp16_on_the_npu(sims):
    assert sims["ascend-910b", "fused"].cast == {"fp32": "fp16"}
    assert sims["rk3588", "fused"].cast == {}
    conv = rows(sims["ascend-910b", "fused"])["stem.conv"]
    assert conv["dtype"] == "fp16" and "fp16" in conv["note"]


def test_naive_plan_moves_more(models):
    naive = simulate_model(models["fused"], "ascend-910b", tiling="naive").to_dict()
    auto = simulate_model(models["fused"], "ascend-910b").to_dict()
    assert naive["offchip_bytes"] > auto["offchip_bytes"]
    assert naive["tiling"] == "naive"


# ---- the ONNX Runtime peer -------------------------------------------------------------

def test_peer_rows_on_cpu_not_on_npu(sims):
    d = sims["rk3588", "unfused"].to_dict()
    assert d["peer"]["latency_s"] == pytest.approx(sum(r["peer_latency_s"] for r in d["nodes"]))
    assert sims["ascend-910b", "unfused"].to_dict()["peer"] is None
    with pytest.raises(BoardError, match="no \\[peer\\] table"):
        peer_latency(graph.load(build_sample_model()), "ascend-910b")


@pytest.mark.parametrize("board", ["rk3588", "jetson-orin-nano", "host"])
def test_peer_of_a_fused_node_is_the_unfused_chain(models, board):
    """ORT has no GroupNorm+SiLU kernel: the fused node costs what the three ORT kernels do."""
    u = peer_latency([models["unfused"].node(n) for n in GN_CHAIN], board)
    f = peer_latency(models["fused"].node("down1.gn"), board)
    assert len(f.passes) == len(u.passes) == 3
    assert f.latency_s == pytest.approx(u.latency_s)


def test_peer_model_figures(models):
    from edgeops import boards
    b = boards.load("rk3588")
    node = models["unfused"].node("mlp.gate")        # MatMul 64x48 @ 48x128, fp32
    est = peer_latency(node, b)
    (p,) = est.passes
    assert p.kind == "gemm" and p.flops == 2 * 64 * 48 * 128
    assert p.bytes == 4 * (64 * 48 + 48 * 128 + 64 * 128)
    peak = 16 * 2.4e9 * 4            # A76: 16 fp32 flops/cycle, 4 cores
    mem = p.bytes / (33.8e9 * b.peer.stream_efficiency)
    comp = p.flops / (peak * b.peer.gemm_efficiency)
    assert est.latency_s == pytest.approx(max(mem, comp) + b.peer.op_overhead_s)
    one = peer_latency(node, b, threads=1)
    assert one.threads == 1 and one.latency_s >= est.latency_s
