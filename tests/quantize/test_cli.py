"""``edgeops quantize``: writes the QDQ model, --json is one document, never overwrites without
--force, bad calibration data is one line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest
import onnx
import onnxruntime as ort

from edgeops.cli import main
from edgeops.sample import build_sample_model


def _npz(path, shape, n=4, seed=0):
    rng = np.random.default_rng(seed)
    np.savez(path, image=rng.standard_normal((n, *shape[1:])).astype(np.float32))
    return str(path)


def test_cli_json_report_plot_and_no_overwrite(tmp_path, capsys):
    calib = _npz(tmp_path / "c.npz", (1, 3, 32, 32))
    out, rep, png = tmp_path / "q.onnx", tmp_path / "r.json", tmp_path / "p.png"
    rc = main(["quantize", "sample", "--calib", calib, "-o", str(out), "--json", "--report",
               str(rep), "--plot", str(png), "--target-sqnr", "20", "--method", "percentile"])
    cap = capsys.readouterr()
    assert rc == 0
    doc = json.loads(cap.out)
    assert doc["method"] == "percentile" and doc["calibration_batches"] == 4
    assert doc["mixed_precision"]["reached"]
    assert json.loads(rep.read_text())["end_to_end"] == doc["end_to_end"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    s = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert s.run(None, {"image": np.ones((1, 3, 32, 32), np.float32)})[0].shape == (1, 10)
    before = out.read_bytes()
    rc = main(["quantize", "sample", "--calib", calib, "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "already exists" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert out.read_bytes() == before
    assert main(["quantize", "sample", "--calib", calib, "-o", str(out), "--force", "--json"]) == 0
    onnx.checker.check_model(onnx.load(str(out)))


def test_cli_bad_calibration_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((2, 3, 16, 16), np.float32))
    rc = main(["quantize", "sample", "--calib", str(bad), "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "'image'" in err and "1x3x16x16" in err and "1x3x32x32" in err
    assert not (tmp_path / "q.onnx").exists()


def test_compile_quantize_end_to_end(tmp_path, capsys):
    """compile --quantize: QDQ, then every Conv/MatMul/Gemm unit on an int8 NEON kernel, and
    the package's check (ORT on the QDQ model vs the lowered model) passes."""
    calib = _npz(tmp_path / "c.npz", (1, 3, 32, 32))
    rc = main(["compile", "sample", "--board", "host", "-o", str(tmp_path / "pkg"), "--quantize",
               calib, "--method", "entropy", "--lower", "all", "--no-tune", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verified"]["ok"] and doc["quantization"]["method"] == "entropy"
    q = [p for p in doc["placement"] if p["op"] in ("ai.edgeops::QConvBnAct", "ai.edgeops::QMatMul")]
    assert len(q) == 9 and {p["kernel"] for p in q} == {"neon.qconv_bn_act_int8", "neon.qmatmul_int8"}
    assert not any(p["op"] in ("Conv", "MatMul", "Gemm", "QuantizeLinear") for p in doc["placement"])


def test_compile_quantize_bad_calibration(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros((2, 3, 32, 32), np.float32), image=np.zeros((2, 3, 32, 32), np.float32))
    rc = main(["compile", "sample", "--board", "host", "-o", str(tmp_path / "pkg"), "--quantize", str(bad)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "'other'" in err
    assert not (tmp_path / "pkg").exists()


def test_cli_no_bias_correction(tmp_path, capsys):
    """--no-bias-correction writes the model quantize_model(bias_correction=False) writes; the
    default corrects the biases (the two models' outputs differ)."""
    from edgeops.quantize.api import quantize_model
    calib = _npz(tmp_path / "c.npz", (1, 3, 32, 32))
    off, on = tmp_path / "off.onnx", tmp_path / "on.onnx"
    assert main(["quantize", "sample", "--calib", calib, "-o", str(off), "--no-bias-correction",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bias_correction"] == {"enabled": False, "nodes": {}}
    assert main(["quantize", "sample", "--calib", calib, "-o", str(on), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bias_correction"]["enabled"]
    ref, _ = quantize_model(build_sample_model(), calib, bias_correction=False)
    x = {"image": np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)}

    def run(m):
        return ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, x)[0]
    y_off = run(str(off))
    np.testing.assert_array_equal(y_off, run(ref.SerializeToString()))
    assert not np.array_equal(y_off, run(str(on)))


def test_compile_quantize_records_source_and_accuracy(tmp_path, capsys):
    """The manifest names the float model (name, sha256) and records method, SQNR and top-1
    agreement on the held-out calibration batches (1 in 4), as ONNX Runtime on the float and
    QDQ models gives them."""
    import hashlib

    from edgeops import package
    from edgeops.pipeline.quantize import quantize_for_compile
    from edgeops.sample import SAMPLE_MODEL_NAME
    calib = _npz(tmp_path / "c.npz", (1, 3, 32, 32), n=8)
    rc = main(["compile", "sample", "--board", "host", "-o", str(tmp_path / "pkg"), "--quantize",
               calib, "--lower", "all", "--no-tune"])
    out = capsys.readouterr().out
    assert rc == 0 and "top-1 agreement" in out and "2 held-out batch(es)" in out
    man = package.load(tmp_path / "pkg").manifest
    q = man["quantization"]
    f = build_sample_model()
    assert q["source"] == {"name": SAMPLE_MODEL_NAME, "sha256": hashlib.sha256(
        f.SerializeToString(deterministic=True)).hexdigest()}
    assert man["source"]["name"] == f"{SAMPLE_MODEL_NAME} (int8 QDQ)" and q["method"] == "minmax"
    qdq, _ = quantize_for_compile("sample", calib)      # deterministic: the model compiled
    held = np.load(calib)["image"][6:]

    def top(m):     # Q/DQ as ONNX defines them (ORT's QLinear rewrite rounds otherwise)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return np.array([s.run(None, {"image": x[None]})[0] for x in held])
    yf, yq = top(f), top(qdq)
    assert q["accuracy"]["top1_agreement"] == pytest.approx(
        np.mean(yf.argmax(-1) == yq.argmax(-1)))
    sqnr = 10 * np.log10((yf.astype(np.float64) ** 2).sum() / ((yf - yq.astype(np.float64)) ** 2).sum())
    assert q["accuracy"]["sqnr_db"] == pytest.approx(sqnr, abs=0.05)
