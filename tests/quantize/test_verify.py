"""Quantized packages are checked against ONNX Runtime running the same QDQ model, node by node
in quantization steps (edgeops.pipeline.quantize.check_int8), and ``run --layers`` works on QDQ
and fused-int8 packages."""
from __future__ import annotations

import json
import types

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edgeops.cli import main


@pytest.fixture(scope="module")
def sample_qdq():
    from edgeops.pipeline.quantize import quantize_for_compile
    from edgeops.sample import build_sample_model
    rng = np.random.default_rng(0)
    calib = [{"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)]
    return quantize_for_compile(build_sample_model(), calib)[0]


@pytest.fixture(scope="module")
def sample_lowered(sample_qdq):
    from edgeops.lower import lower
    return lower(sample_qdq, "host", mode="all", plan=False)


@pytest.mark.parametrize("steps, count, ok", [
    (0.9, 4000, True),          # within one step everywhere
    (1.5, 4, True),             # 4 elements of 4000 (0.1%) between 1 and 2 steps
    (1.5, 5, False),            # 5 of them (0.125%)
    (2.2, 1, False),            # one element beyond two steps
    (np.nan, 1, False),         # a NaN
])
def test_within_steps_thresholds(steps, count, ok):
    from edgeops.pipeline.quantize import within_steps
    rng = np.random.default_rng(0)
    want = rng.standard_normal(4000).astype(np.float32)
    step = 0.037
    got = want.astype(np.float64).copy()
    got[rng.permutation(4000)[:count]] += steps * step * rng.choice([-1, 1], count)
    r = within_steps(got, want, step)
    assert r["ok"] is ok
    if np.isfinite(steps):
        assert r["max_steps"] == pytest.approx(steps, rel=1e-5)
        assert r["over_1_step"] == (count / 4000 if steps > 1 else 0)


def test_int8_check_catches_a_wrong_weight(sample_lowered):
    """One int8 weight of a fused conv off by 40 codes: that node, and only it, fails; the
    package as lowered passes."""
    from edgeops import package
    from edgeops.pipeline.quantize import check_int8
    good = check_int8(sample_lowered, package.random_inputs(sample_lowered.source, 0))
    assert good["ok"] and "down1.conv" in {r["node"] for r in good["int8"]["tensors"].values()}
    m = onnx.ModelProto()
    m.CopyFrom(sample_lowered.model)
    w = next(t for t in m.graph.initializer if t.name == "down1.conv.weight_int8")
    a = numpy_helper.to_array(w).copy()
    a.reshape(-1)[0] = np.clip(int(a.reshape(-1)[0]) + 40 * (1 if a.reshape(-1)[0] < 0 else -1), -127, 127)
    w.CopyFrom(numpy_helper.from_array(a, w.name))
    lw = types.SimpleNamespace(model=m, source=sample_lowered.source)
    doc = check_int8(lw, package.random_inputs(lw.source, 0))
    assert not doc["ok"] and doc["int8"]["failed"] == ["down1.conv"]


def test_unet_groupnorm_silu_is_not_a_false_failure(tmp_path, capsys):
    """GroupNorm+SiLU feeding QuantizeLinear: fp32 differences of 1e-7 flip int8 roundings,
    which compound end to end (far above fp32's 1e-4) while every node matches ONNX Runtime."""
    from edgeops import modelzoo
    from edgeops.pipeline.compile import compile_model
    from edgeops.pipeline.quantize import quantize_for_compile
    m = modelzoo.build("unet_block", size=64)
    rng = np.random.default_rng(0)
    calib = [{"input": rng.standard_normal((1, 64, 64, 64)).astype(np.float32)} for _ in range(2)]
    q, _ = quantize_for_compile(m, calib, bias_correction=False)
    pkg = tmp_path / "unet"
    doc = compile_model(q, "host", pkg, mode="all", plan=False)
    if doc["verified"]["max_rel"] <= 1e-4:
        pytest.skip("the kernels matched ONNX Runtime end to end here: no rounding flipped, so "
                    "this does not exercise the int8 check")
    assert doc["verified"]["ok"] and doc["verified"]["int8"]["failed"] == []
    assert doc["tolerance"]["rel"] >= doc["verified"]["max_rel"]
    assert main(["run", str(pkg), "--json", "--runs", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]


@pytest.mark.parametrize("mode", ["none", "all"])
def test_run_layers_on_quantized_packages(tmp_path, capsys, sample_qdq, mode):
    """--layers on a QDQ package (every node in ONNX Runtime: weight DequantizeLinear outputs are
    folded constants) and on a fused-int8 one, against ORT on the QDQ model."""
    qdq = tmp_path / "q.onnx"
    onnx.save(sample_qdq, qdq)
    pkg = tmp_path / "pkg"
    assert main(["compile", str(qdq), "--board", "host", "-o", str(pkg), "--lower", mode,
                 "--no-tune", "--json"]) == 0
    capsys.readouterr()
    assert main(["run", str(pkg), "--layers", "--json", "--runs", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["layers"]
    assert main(["run", str(pkg), "--layers", "--json", "--runs", "1", "--model", str(qdq)]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["tensor"]: r for r in doc["layers"]}
    # every quantized layer's output is compared (a conv's or matmul's, whatever fused into it)
    assert {"stem.relu", "down1.conv", "down2.conv", "logits"} <= set(rows)
    assert not any(t.endswith("weight_dq") for t in rows)
    if mode == "none":       # the package is the QDQ model in ONNX Runtime: bit for bit
        assert all(r["max_abs"] == 0 for r in rows.values())
    # against the QDQ model, run's verdict is compile's int8 check, on its own inputs too
    assert doc["int8"]["failed"] == [] and doc["ok"]
    assert (mode == "none") == (doc["int8"]["tensors"] == {})
    feeds = tmp_path / "x.npz"
    np.savez(feeds, image=np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32))
    assert main(["run", str(pkg), "--json", "--runs", "1", "--model", str(qdq), "--inputs",
                 str(feeds)]) == 0
    assert json.loads(capsys.readouterr().out)["int8"]["failed"] == []


def test_placement_reason_of_quantized_nodes(sample_qdq):
    """On a board without int8 predictions a quantized conv or matmul says so; it is not
    called a layout or data-movement op."""
    from edgeops.lower import lower
    rows = [p for p in lower(sample_qdq, "rpi5", measure=False).placements
            if p.node in ("stem.conv", "block1.proj", "logits")]
    assert len(rows) == 3
    for p in rows:
        assert "data-movement" not in p.reason and "int8" in p.reason, p.reason


def test_onnxruntime_qdq_model_compiles_and_is_checked_in_steps(tmp_path, convnet, convnet_calib):
    """A QDQ model made by ONNX Runtime's own quantize_static compiles to int8 kernels and is
    checked node by node against ONNX Runtime on it."""
    from edgeops.pipeline.compile import compile_model
    from edgeops.quantize.peer import ort_quantize
    from edgeops.quantize.qdq import prepare
    peer = ort_quantize(prepare(convnet), convnet_calib, "minmax", activation_type="uint8")
    doc = compile_model(peer, "host", tmp_path / "pkg", mode="all", plan=False)
    fused = {p["node"] for p in doc["placement"] if p["op"].startswith("ai.edgeops::Q")}
    assert fused == {"c1", "c2", "c3", "fc"}
    assert doc["verified"]["ok"] and {r["node"] for r in doc["verified"]["int8"]["tensors"].values()} >= fused


def test_a_node_off_by_steps_is_moved_to_onnx_runtime(tmp_path, sample_qdq, capsys):
    """compile repairs an int8 kernel that fails the check as it does a kernel that raises."""
    from edgeops.ops import get_op
    from edgeops.registry import register_kernel, unregister_kernel

    @register_kernel("ai.edgeops::QMatMul", "reference", name="test.qmatmul_off", priority=99)
    def off(inputs, attrs):
        return [get_op("QMatMul", "ai.edgeops").run(inputs, attrs)[0] * 1.05]
    qdq = tmp_path / "q.onnx"
    onnx.save(sample_qdq, qdq)
    try:
        rc = main(["compile", str(qdq), "--board", "host", "-o", str(tmp_path / "p"), "--lower",
                   "all", "--targets", "reference", "--no-tune", "--json"])
    finally:
        unregister_kernel("test.qmatmul_off")
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verified"]["ok"]
    moved = {n for n, why in doc["repaired"].items() if "quantization steps off" in why}
    assert moved == set(doc["repaired"]) == {"block1.proj", "block2.proj", "mlp.gate", "mlp.up",
                                             "mlp.down", "logits"}      # the QMatMuls, only
    assert {r["node"] for r in doc["placement"] if r["op"] == "ai.edgeops::QConvBnAct"} == {
        "stem.conv", "down1.conv", "down2.conv"}
    rows = {r["node"]: r for r in doc["placement"]}
    assert all(rows[n]["where"] == "ONNX Runtime" for n in moved)
