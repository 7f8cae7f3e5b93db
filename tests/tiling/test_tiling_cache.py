"""Tuning cache keyed by (board file hash, op signature, cost-model version); whole-model plans."""
import pytest

import tiling_test_boards as tb
from edgeops.tiling import COST_MODEL_VERSION, TuningCache, plan_graph, plan_ops, tune
from edgeops.tiling import cache as cache_mod

SPEC = "gemm:M=96,N=64,K=48,dtype=fp16"


def test_hit_miss_and_board_change(tmp_path):
    board = tb.write(tmp_path, "mini-npu", tb.MINI_NPU)
    c = TuningCache(tmp_path / "t.sqlite")
    entry, cached = tune(SPEC, board, cache=c)
    assert not cached and len(c) == 1
    again, cached = tune(SPEC, board, cache=c)
    assert cached and again == entry
    # editing the board file changes its sha256: the entry no longer applies
    edited = tb.write(tmp_path, "mini-npu", tb.MINI_NPU.replace("hz = 1.0e9", "hz = 1.1e9"))
    assert edited.file_sha256 != board.file_sha256
    _, cached = tune(SPEC, edited, cache=c)
    assert not cached and len(c) == 2


def test_model_version_is_part_of_the_key(tmp_path, monkeypatch):
    board = tb.write(tmp_path, "mini-npu", tb.MINI_NPU)
    c = TuningCache(tmp_path / "t.sqlite")
    tune(SPEC, board, cache=c)
    assert tune(SPEC, board, cache=c)[1]                     # same model version: kept
    monkeypatch.setattr(cache_mod, "COST_MODEL_VERSION", COST_MODEL_VERSION + ".next")
    assert not tune(SPEC, board, cache=c)[1]                 # new cost model: re-tuned


def test_default_location_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEOPS_CACHE_DIR", str(tmp_path / "cache"))
    assert TuningCache().path == tmp_path / "cache" / "tuning" / "tuning.sqlite"


def test_plan_ops_searches_each_signature_once(tmp_path, mini_npu):
    c = TuningCache(tmp_path / "p.sqlite")
    seen = []
    items = [("a", "Gemm", SPEC), ("b", "Gemm", SPEC), ("r", "Reshape", "!layout op"),
             ("s", "Softmax", "softmax:M=8,D=64,dtype=fp16")]
    plan = plan_ops(items, mini_npu, cache=c, progress=lambda d, t, n: seen.append(n))
    assert [n.signature is not None for n in plan.nodes] == [True, True, False, True]
    assert plan.nodes[2].reason == "layout op" and len(c) == 2 and seen == ["a", "b", "r", "s"]
    assert plan.total_latency_s == pytest.approx(sum(n.prediction.latency_s for n in plan.nodes
                                                     if n.prediction))
    assert plan.to_dict()["nodes"][0]["tiling"]["op"] == "gemm"


def test_plan_graph_on_the_sample_model(tmp_path):
    sample = pytest.importorskip("edgeops.sample")
    from edgeops import graph
    g = graph.load(sample.build_sample_model())
    plan = plan_graph(g, tb.write(tmp_path, "mini-cpu", tb.MINI_CPU), cache=None)
    tiled = [n for n in plan.nodes if n.tiling is not None]
    assert tiled and {n.op_type for n in tiled} >= {"Conv", "MatMul"}
    assert all(n.reason for n in plan.nodes if n.tiling is None)
