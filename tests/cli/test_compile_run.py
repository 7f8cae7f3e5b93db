"""``edgeops compile`` and ``edgeops run`` from the command line: one JSON document with --json,
tables otherwise, one-line errors with exit status 2, status 1 when a package is out of
tolerance."""
import json

import numpy as np
import onnx
import pytest

from edgeops.cli import main
from edgeops.sample import build_sample_model


def _json(capsys, argv, rc=0):
    assert main(argv) == rc
    out, err = capsys.readouterr()
    return json.loads(out), err


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("m") / "sample.onnx"
    onnx.save(build_sample_model(), p)
    return p


@pytest.fixture(scope="module")
def pkg(tmp_path_factory, model_path):
    out = tmp_path_factory.mktemp("p") / "pkg"
    assert main(["compile", str(model_path), "--board", "rpi5", "-o", str(out), "--lower", "all",
                 "--json"]) == 0
    return out


def test_compile_json(capsys, model_path, tmp_path):
    doc, err = _json(capsys, ["compile", str(model_path), "--board", "rpi5", "-o",
                              str(tmp_path / "p"), "--json"])
    assert err == "" and doc["board"] == "rpi5" and doc["mode"] == "auto"
    assert doc["model"] == "sample.onnx" and doc["verified"]["ok"]
    assert doc["predicted_latency_s"] > 0 and doc["files"].keys() == {"model.onnx", "reference.npz"}
    row = doc["placement"][0]
    assert {"node", "op", "where", "reason", "latency_s", "bound", "kernel"} <= set(row)
    # rpi5 has no calibration here: uncalibrated predictions carry the default bands, which
    # the sample's predicted gains do not clear (docs/notes/calibration.md)
    assert {r["where"] for r in doc["placement"]} == {"ONNX Runtime"}
    assert any("not above the bands" in r["reason"] and r["band"] for r in doc["placement"])


def test_compile_human_report_and_refusals(capsys, model_path, tmp_path):
    out = tmp_path / "pkg"
    assert main(["compile", str(model_path), "--board", "ascend-910b", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for s in ("placement of sample.onnx on ascend-910b", "runs on", "predicted total",
              "ascend", "ONNX Runtime", "fp16", "package written to", "ok"):
        assert s in text, s
    assert main(["compile", str(model_path), "--board", "ascend-910b", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "already exists" in err and "--force" in err
    assert main(["compile", str(model_path), "--board", "ascend-910b", "-o", str(out), "--force",
                 "--lower", "none", "--no-verify"]) == 0
    assert all(n.domain == "" for n in onnx.load(out / "model.onnx").graph.node)
    capsys.readouterr()
    for argv, msg in ((["--board", "nope"], "unknown board"),
                      (["--board", "rpi5", "--targets", "tpu"], "unknown target"),
                      (["--board", "rpi5", "--shapes", "nosuch:1x2"], "not a graph input")):
        assert main(["compile", str(model_path), "-o", str(tmp_path / "x"), *argv]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and msg in err, err
    assert not (tmp_path / "x").exists()


def test_compile_the_bundled_sample_by_name(capsys, tmp_path):
    doc, _ = _json(capsys, ["compile", "sample", "--board", "rpi5", "-o",
                            str(tmp_path / "p"), "--lower", "all", "--no-tune", "--json"])
    assert doc["model"] == "edgeops-sample" and doc["used_targets"] == ["neon"]
    assert all(r["plan"] is None for r in doc["placement"])


def test_run_json_against_the_reference(capsys, pkg):
    doc, err = _json(capsys, ["run", str(pkg), "--json", "--runs", "2"])
    assert err == "" and doc["ok"] and doc["inputs"] == "reference"
    assert doc["outputs"]["logits"]["shape"] == [1, 10] and doc["max_rel"] < 1e-4
    assert doc["latency_s"]["runs"] == 2 and doc["latency_s"]["median"] > 0


def test_run_other_inputs_with_the_original_model(capsys, pkg, model_path, tmp_path, rng):
    x = tmp_path / "in.npz"
    np.savez(x, image=rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    doc, _ = _json(capsys, ["run", str(pkg), "--inputs", str(x), "--model", str(model_path),
                            "--json", "--runs", "1"])
    assert doc["ok"] and doc["golden"].startswith("ONNX Runtime on")
    doc, _ = _json(capsys, ["run", str(pkg), "--inputs", str(x), "--json", "--runs", "1"])
    assert doc["ok"] is None and doc["golden"] is None           # nothing to compare with
    np.savez(x, image=np.zeros((1, 3, 8, 8), np.float32))
    assert main(["run", str(pkg), "--inputs", str(x)]) == 2
    assert "compiled for [1, 3, 32, 32]" in capsys.readouterr().err


def test_run_layers(capsys, pkg, model_path):
    for extra, golden in (([], "numpy reference kernels"), (["--model", str(model_path)], "ONNX Runtime")):
        doc, _ = _json(capsys, ["run", str(pkg), "--layers", "--json", "--runs", "1", *extra])
        assert golden in doc["layers_golden"]
        rows = {r["tensor"]: r for r in doc["layers"]}
        assert rows["mlp.gate_up"]["op"] == "ai.edgeops::SwiGLU" and rows["mlp.gate_up"]["where"] == "neon"
        assert "logits" in rows and all(r["max_rel"] < 1e-4 for r in doc["layers"])
    assert main(["run", str(pkg), "--layers", "--runs", "1"]) == 0
    assert "per layer" in capsys.readouterr().out


def test_run_refuses_a_tampered_package(capsys, pkg, tmp_path):
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(pkg, bad)
    data = bytearray((bad / "model.onnx").read_bytes())
    data[100] ^= 0xFF
    (bad / "model.onnx").write_bytes(bytes(data))
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "model.onnx does not match its sha256" in err


def test_run_exits_1_above_tolerance(capsys, tmp_path):
    """A kernel that computes the wrong thing is caught by run (compiled with --no-verify)."""
    from edgeops.registry import register_kernel, unregister_kernel

    @register_kernel("Gemm", "reference", name="test.gemm_off", priority=99)
    def off(inputs, attrs):
        from edgeops.ops import get_op
        return [get_op("Gemm").run(inputs, attrs)[0] * 1.01]
    try:
        assert main(["compile", "sample", "--board", "rpi5", "-o", str(tmp_path / "p"),
                     "--lower", "all", "--targets", "reference", "--no-verify"]) == 0
        capsys.readouterr()
        doc, _ = _json(capsys, ["run", str(tmp_path / "p"), "--json", "--runs", "1"], rc=1)
        assert doc["ok"] is False and doc["max_rel"] > 1e-3
    finally:
        unregister_kernel("test.gemm_off")


def test_a_kernel_that_fails_the_check_is_moved_to_onnx_runtime(capsys, tmp_path):
    from edgeops.registry import register_kernel, unregister_kernel

    @register_kernel("Gemm", "reference", name="test.gemm_raises", priority=99)
    def raises(inputs, attrs):
        raise ValueError("deliberate")
    try:
        doc, err = _json(capsys, ["compile", "sample", "--board", "rpi5", "-o", str(tmp_path / "p"),
                                  "--lower", "all", "--targets", "reference", "--json"])
    finally:
        unregister_kernel("test.gemm_raises")
    row = next(r for r in doc["placement"] if r["node"] == "logits")
    assert row["where"] == "ONNX Runtime" and "failed the check" in row["reason"]
    assert "deliberate" in doc["repaired"]["logits"] and doc["verified"]["ok"]
    from edgeops.ort import native
    if not native._status_compute():     # else the run stopped there, its error in "repaired"
        assert "logits" in err                          # the bridge said so as it happened
