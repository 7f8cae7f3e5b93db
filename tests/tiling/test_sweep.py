"""Sweeps: the point format, and the same results in-process, on a spawn process pool and on a
Dask LocalCluster."""
import json
import sys

import pytest

from edgeops.cli import main
from edgeops.errors import EdgeOpsError
from edgeops.pipeline.models import load_graph
from edgeops.tiling.sweep import expand, run_point, sweep

DOC = {"grid": {"ops": ["gemm:M=96,N=80,K=64,dtype=fp16",
                        "conv2d:N=1,C=8,H=12,W=12,K=16,R=3,S=3,pad=1,dtype=fp16"],
                "boards": ["ascend-910b"], "tilings": ["auto", "naive"]},
       "points": [{"model": "sample", "board": "ascend-910b", "tiling": "naive", "label": "m"}]}


def test_expand_grid_and_points():
    pts = expand(DOC)
    assert len(pts) == 5
    assert pts[0]["model"] == "sample"
    assert {(p.get("op", "")[:4], p["tiling"]) for p in pts[1:]} == \
        {("gemm", "auto"), ("gemm", "naive"), ("conv", "auto"), ("conv", "naive")}
    assert expand([{"op": "gemm:M=1,N=1,K=1", "board": "rk3588"}])[0]["board"] == "rk3588"


@pytest.mark.parametrize("doc, phrase", [
    ({}, "list of points"),
    ({"points": []}, "no points"),
    ({"points": [{"board": "rk3588"}]}, "exactly one"),
    ({"points": [{"op": "gemm:M=1,N=1,K=1"}]}, "missing \"board\""),
    ({"points": [{"op": "gemm:M=1,N=1,K=1", "board": "rk3588", "tile": 3}]}, "unknown key"),
    ({"grid": {"ops": ["gemm:M=1,N=1,K=1"], "boards": []}}, "non-empty"),
    ({"grid": {"opps": []}}, "unknown key"),
])
def test_bad_sweeps(doc, phrase):
    with pytest.raises(EdgeOpsError, match=phrase):
        expand(doc)


def test_a_failing_point_reports_and_the_sweep_goes_on():
    r = run_point({"op": "gemm:M=8,N=8,Q=8", "board": "ascend-910b"})
    assert "unknown key 'Q'" in r["error"]


@pytest.fixture(scope="module")
def serial():
    return sweep(DOC, workers=0, load_model=load_graph)


def test_serial_results(serial):
    res = serial.results
    assert serial.backend == "serial" and len(res) == 5 and not any("error" in r for r in res)
    assert res[0]["total_latency_s"] > 0 and res[0]["peak_memory_bytes"] > 0
    by = {(r["op"][:4], r["tiling_mode"]): r for r in res[1:]}
    for kind in ("gemm", "conv"):
        assert by[kind, "naive"]["offchip_bytes"] > by[kind, "auto"]["offchip_bytes"]
    json.dumps(res)


def test_process_pool_gives_the_same_results(serial):
    seen = []
    pool = sweep(DOC, workers=2, progress=lambda d, t: seen.append((d, t)), load_model=load_graph)
    assert pool.backend.startswith("process-pool")
    assert pool.results == serial.results
    assert seen[-1] == (5, 5)


def test_dask_local_cluster_gives_the_same_results(serial):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        r = sweep(DOC, scheduler=cluster.scheduler_address, load_model=load_graph)
        with distributed.Client(cluster) as client:
            r2 = sweep(DOC, scheduler=client, load_model=load_graph)
    assert r.backend.startswith("dask")
    assert r.results == serial.results == r2.results


def test_missing_dask_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(EdgeOpsError, match="edgeops\\[dist\\]"):
        sweep([{"op": "gemm:M=8,N=8,K=8,dtype=fp16", "board": "ascend-910b"}],
              scheduler="tcp://127.0.0.1:1")


def test_sweep_cli(tmp_path, capsys):
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps({"points": [{"op": "gemm:M=32,N=32,K=32,dtype=fp16",
                                         "board": "ascend-910b", "tiling": "naive"},
                                        {"op": "gemm:M=8,N=8,Q=8", "board": "ascend-910b"}]}))
    out = tmp_path / "res.json"
    assert main(["sweep", str(f), "--workers", "0", "--json", "--out", str(out)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["points"] == 2 and d["errors"] == 1 and d["results"][0]["offchip_bytes"] > 0
    assert json.loads(out.read_text())["results"] == d["results"]
    assert main(["sweep", str(f), "--workers", "0", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1, 2")
    assert main(["sweep", str(tmp_path / "bad.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
