"""The benchmark scripts run end to end on tiny inputs (--quick); no timing asserts."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _run(script, *args):
    r = subprocess.run([sys.executable, str(BENCH / script), "--quick", "--json", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_rank_correlation_handles_ties():
    sys.path.insert(0, str(BENCH))
    from sim_vs_host import ranks, spearman
    assert list(ranks([10, 20, 20, 5])) == [2.0, 3.5, 3.5, 1.0]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    x, y = np.random.default_rng(0).random((2, 50))
    rx, ry = ranks(x), ranks(y)      # no ties: Pearson of ranks = 1 - 6 sum d^2 / (n (n^2 - 1))
    assert spearman(x, y) == pytest.approx(1 - 6 * ((rx - ry) ** 2).sum() / (50 * (50 ** 2 - 1)))


@pytest.mark.parametrize("opt", ["all", "disable"])
def test_sim_vs_host_quick(opt):
    doc = _run("sim_vs_host.py", "--ort-opt", opt)
    (m,) = doc["models"]
    assert m["model"] == "sample" and m["matched"] > 5
    assert -1.0 <= m["spearman"] <= 1.0 and m["mape"] >= 0


def test_neon_pool_quick():
    doc = _run("neon_pool.py")     # it checks its outputs against ONNX Runtime's first
    assert [r["case"][:3] for r in doc["rows"]] == ["max", "max"]
    assert all(r["threads"] == 1 and r["edgeops_ms"] > 0 and r["ort_ms"] > 0 for r in doc["rows"])


def test_region_breakdown_quick():
    """The split of a package run nests (kernel inside region inside run), and keeping every
    intermediate gives the same output (the script exits 1 otherwise)."""
    (row,) = _run("region_breakdown.py")
    assert row["model"] == "chain_ln_gelu" and row["runs"] == 16
    for k in ("needed", "all"):
        d = row[k]
        assert 0 < d["kernel"] <= d["region"] <= d["total"]
        assert d["before"] > 0 and d["after"] > 0


def test_node_breakdown_quick():
    """--nodes: the phases split the run (medians, so their sum is the total's only roughly)
    and the package's output matched ONNX Runtime's on the original node."""
    rows = _run("region_breakdown.py", "--nodes")
    assert [r["family"] for r in rows] == ["identity", "add-16k"]
    for r in rows:
        phases = [r[p] for p in ("ort+bridge", "glue", "handoff", "prep", "kernel", "out")]
        assert all(p >= 0 for p in phases[1:]) and r["kernel"] > 0 and r["ort_s"] > 0
        assert sum(phases) == pytest.approx(r["total"], rel=0.25)
        assert r["max_rel_err"] < 1e-6 and r["kernels"]
        # the default session ran (nearly) every call from its native program, same bits
        assert r["native_share"] > 0.9 and r["bit_identical"] and r["native_s"] > 0


def test_session_start_quick():
    doc = _run("session_start.py")
    m = doc["median"]["warm"]
    assert m["session"] > 0 and m["first_run"] > 0 and m["programs"] >= 1


@pytest.mark.parametrize("wait", [None, "spin"])
def test_e2e_vs_ort_quick(wait):
    doc = _run("e2e_vs_ort.py", *(["--omp-wait", wait] if wait else []))
    assert doc["omp_wait"] == (wait or "passive")
    assert [m["model"] for m in doc["models"]] == ["sample", "chain_gn_silu"]
    for m in doc["models"]:
        (t,) = m["by_threads"]
        assert t["threads"] == 1 and t["ratio"] > 0 and t["max_rel_err"] < 1e-3


def test_predict_vs_host_quick():
    doc = _run("predict_vs_host.py")
    (m,) = doc["models"]
    assert m["model"] == "swiglu_mlp:8" and m["rows"]["edgeops"]["rows"] >= 1
    w = m["whole"]["all"]
    assert w["lowered"] >= 1 and w["predicted_s"] > 0 and w["measured_s"] > 0
