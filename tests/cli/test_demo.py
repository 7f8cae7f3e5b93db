"""``edgeops demo``: sample model -> inspect -> boards -> support matrix, as one JSON document or
a human report; it never overwrites a file and leaves no temporary files behind."""
import json
import tempfile
from pathlib import Path

import onnx
import pytest

from edgeops.cli import main
from edgeops.cli.demo import STEPS, run_demo
from edgeops.errors import EdgeOpsError
from edgeops.sample import build_sample_model


def _temp_dirs():
    return set(Path(tempfile.gettempdir()).glob("edgeops-demo-*"))


def test_run_demo_result():
    before = _temp_dirs()
    r = run_demo()
    assert list(r) == [k for k, _ in STEPS] == ["model", "inspect", "boards", "support_matrix", "compile", "run", "deploy"]
    assert r["model"]["name"] == "edgeops-sample" and r["model"]["path"] is None
    assert r["model"]["bytes"] == len(build_sample_model().SerializeToString())
    assert r["inspect"]["macs"] > 0 and "GroupNormalization" in r["inspect"]["op_histogram"]
    assert r["inspect"]["model"].startswith("sample")
    from edgeops import boards
    assert [b["name"] for b in r["boards"]] == boards.names()
    assert r["inspect"]["boards"] == boards.names()
    assert "Conv" in r["support_matrix"]["ops"] and "reference" in r["support_matrix"]["targets"]
    assert r["run"]["ok"] and r["deploy"]["smoke"]["ok"]
    assert r["deploy"]["outputs"] == {"logits": [1, 10]}
    assert _temp_dirs() == before      # the temporary model is gone


def test_out_keeps_the_model_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "demo"
    r = run_demo(out=out)
    p = out / "edgeops-sample.onnx"
    assert r["model"]["path"] == str(p) and onnx.load(p) == build_sample_model()
    stamp = p.stat().st_mtime_ns
    with pytest.raises(EdgeOpsError, match="already exists"):
        run_demo(out=out)
    assert p.stat().st_mtime_ns == stamp
    assert main(["demo", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "will not overwrite" in err
    (tmp_path / "afile").write_text("x")
    with pytest.raises(EdgeOpsError, match="is a file"):
        run_demo(out=tmp_path / "afile")


def test_cli_json(capsys):
    assert main(["demo", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert set(doc) == {"model", "inspect", "boards", "support_matrix", "compile", "run", "deploy"} and err == ""


def test_cli_human(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for s in ("1. sample model", "2. edgeops inspect", "3. boards", "4. kernels", "stem.conv",
              "GroupNormalization"):
        assert s in out, s
