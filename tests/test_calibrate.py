"""``edgeops calibrate`` and what reads its file: the grid measured here, the file's provenance and
staleness, the placement's bands, ``--to local:``, and the CLI's errors."""
import json

import pytest

from edgeops.cli import main
from edgeops.env import switch
from edgeops.pipeline import calibrate as C
from edgeops.sample import build_sample_model
from edgeops.simulator import calibration as cal


@pytest.fixture(scope="module")
def one_grid():
    """The tiniest grid: one small network at one thread (the real grids run in benchmarks)."""
    mp = pytest.MonkeyPatch()
    mp.setitem(C.GRIDS, "test", [("swiglu_mlp", 4)])
    doc = C.calibrate("host", grid="test", threads=(1,))
    yield doc
    mp.undo()
    # the tests' cache is shared: other modules' boards would borrow this calibration
    cal.path_for("host").unlink(missing_ok=True)


def test_calibration_file_has_provenance_and_fits_what_it_measured(one_grid):
    doc = json.loads(open(one_grid["path"]).read())
    prov = doc["provenance"]
    assert one_grid["path"] == str(cal.path_for("host"))
    assert prov["kernels_key"], prov["machine_key"]
    assert {"edgeops", "onnxruntime", "numba"} <= set(prov["versions"])
    assert prov["grid_models"] == ["swiglu_mlp:4"] and prov["threads"] == [1]
    assert prov["board"]["name"] == "host" and prov["date"].endswith("Z")
    assert len(prov["rates"]["fp32|t1"]) == 3 and min(prov["rates"]["fp32|t1"]) > 0
    sides = {r["side"] for r in doc["rows"]}
    assert sides == {"edgeops", "kernel", "ort"}
    assert all(r["seconds"] > 0 and len(r["x"]) == 4 for r in doc["rows"])
    # every row is predicted by some entry, and the fitted bands bound 90% of the rows'
    # relative errors per entry (band_of is the 90th percentile)
    c = cal.Calibration(None, doc)
    for side in sides:
        rs = [r for r in doc["rows"] if r["side"] == side]
        e, _, _ = c._entry(side, "*", "fp32", 1)
        pred = [cal.apply(e, r["x"]) for r in rs]
        bad = [p for p, r in zip(pred, rs) if abs(r["seconds"] / p - 1) > e["band"] + 1e-9]
        assert len(bad) <= max(1, 0.1 * len(rs) + 1)


def test_predictions_read_it_and_show_bands(one_grid):
    from edgeops.lower import lower
    lw = lower(build_sample_model(), "host", measure=False, threads=1)
    srcs = {p.calibration for p in lw.placements if p.calibration}
    assert any(s.startswith("host calibration") for s in srcs)
    for p in lw.placements:
        if p.calibration and p.calibration.startswith("host"):
            assert p.band is not None and p.band >= cal.BAND_FLOOR
    for p in lw.lowered:        # lowered on prediction only past both bands
        assert p.peer_latency_s - p.latency_s > 0 and "more than the bands" in p.reason


def test_stale_kernels_make_the_file_ignored(one_grid, monkeypatch):
    from edgeops.lower import policy
    from edgeops import boards
    monkeypatch.setattr(policy, "kernels_key", lambda: "changed")
    c = policy.calibration_for(boards.load("host"))
    assert not c.available and "other kernels" in c.why


def test_rpi5_borrows_host_with_a_wider_band(one_grid):
    from edgeops import boards
    from edgeops.lower import policy
    c = policy.calibration_for(boards.load("rpi5"))
    assert c.borrowed_from == "host" and c.factor > 1


def test_cli_errors_are_one_line(capsys, tmp_path):
    assert main(["calibrate", "--board", "rpi5", "--grid", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "not this machine" in err and "--to" in err and len(err.strip().splitlines()) == 1
    assert main(["calibrate", "--board", "rpi5", "--to", "qemu-arm64:"]) == 2
    assert "emulat" in capsys.readouterr().err
    f = tmp_path / "c.json"
    f.write_text("mine")
    assert main(["calibrate", "--output", str(f), "--grid", "tiny"]) == 2
    assert f.read_text() == "mine"
    assert main(["calibrate", "--grid", "huge"]) == 2        # argparse's refusal, as a status
    assert "huge" in capsys.readouterr().err


@pytest.mark.skipif(not switch("EDGEOPS_TEST_FULL", False),
                    reason="runs the tiny grid in a second process through deploy's local: "
                           "transport (a wheel build and a cold process, ~1 min): full suite")
def test_to_local_runs_the_grid_through_the_transport(tmp_path, one_grid):
    doc = None
    assert main(["calibrate", "--board", "host", "--to", f"local:{tmp_path / 'board'}",
                 "--grid", "tiny", "--threads", "1", "--force", "--json"]) == 0
    doc = json.loads(cal.path_for("host").read_text())
    assert doc["provenance"]["grid"] == "tiny"


def test_tune_model_reads_the_calibration(capsys, tmp_path, monkeypatch):
    """``tune MODEL`` reports the calibration's prediction of each tuned node next to the
    tiling's floor: a made-up calibration (a fixed cost a call, per side) must come back."""
    from edgeops import boards
    monkeypatch.setenv("EDGEOPS_CACHE_DIR", str(tmp_path))
    k, m = C.current_keys()
    host = boards.load("host")
    entries = {f"{side}|*|fp32|t1": {"call_s": s, "comp_eff": None, "bw_eff": None,
                                     "weight_bw_eff": None, "rows": 9, "band": 0.125}
               for side, s in (("edgeops", 3e-3), ("ort", 7e-3))}
    doc = {"format": cal.FORMAT, "board": "host", "entries": entries, "rows": [],
           "provenance": {"board": cal.descriptor(host), "kernels_key": k, "machine_key": m,
                          "date": "2026-12-03T00:00:00Z"}}
    cal.path_for("host").parent.mkdir(parents=True)
    cal.path_for("host").write_text(json.dumps(doc))
    assert main(["tune", "sample", "--board", "host", "--threads", "1", "--budget", "2000",
                 "--no-cache", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["calibration"].startswith("host calibration")
    rows = [n["calibrated"] for n in got["nodes"] if "best" in n]
    assert rows and all(c["ort_s"] > 0 for c in rows)
    # ONNX Runtime's: 7 ms a kernel it runs; edgeops': 3 ms a call, where a kernel takes the node
    assert all(c["ort_s"] == pytest.approx(7e-3 * round(c["ort_s"] / 7e-3)) for c in rows)
    mine = [c for c in rows if c["kernel"]]
    assert mine and all(c["edgeops_s"] == pytest.approx(3e-3) and c["edgeops_band"] == 0.125
                        for c in mine)
    assert got["totals"]["calibrated_edgeops_s"] == pytest.approx(3e-3 * len(mine))
    cal.path_for("host").unlink()
    assert main(["tune", "sample", "--board", "host", "--threads", "1", "--budget", "2000",
                 "--no-cache", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert "no calibration" in got["calibration"]
    assert not any("calibrated" in n for n in got["nodes"])


def test_nodes_reading_an_identity_of_a_constant_are_measured():
    """TorchScript's GroupNorm reads its scale and bias through Identity nodes: the ONNX Runtime
    side of a one-node cut must carry them as constants, else every GroupNorm after the first
    has no edgeops row and the package's prediction counts it as ONNX Runtime's."""
    from edgeops import boards, modelzoo
    from edgeops.lower.measure import _cut, _ort_session
    b = boards.load("host")
    norms = [(n, k, o) for n, k, o in C.plan(modelzoo.build("unet_block", size=4), b)
             if n.op_type == "GroupNormAct" and k is not None]
    assert len(norms) == 6
    for n, k, orig in norms:
        _ours, theirs, feeds = _cut([n], [k], [orig])
        assert set(feeds) == {i.name for i in theirs.graph.input}
        _ort_session(theirs, 1).run(None, feeds)
