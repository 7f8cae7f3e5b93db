"""The demo model on an emulated Cortex-A76 board (qemu-user, the arm64 sysroot): edgeops pushed
as a wheel, deployed, run, benched and doctored there; outputs match ONNX Runtime on this host."""
import json

import numpy as np
import pytest

from edgeops.cli import main
from edgeops import package

pytestmark = pytest.mark.arm64


def _json(capsys, argv, rc=0):
    got = main(argv)
    out, err = capsys.readouterr()
    assert got == rc, err[-2000:]
    return json.loads(out)


def test_demo_on_emulated_arm64(capsys, demo_rpi5, qemu_board, tmp_path, rng):
    from edgeops.sample import build_sample_model
    to = qemu_board.uri
    doc = _json(capsys, ["deploy", str(demo_rpi5), "--board", "rpi5", "--to", to, "--json"])
    agent = doc["agent"]
    assert agent["machine"] == "aarch64" and doc["smoke"]["ok"]
    assert agent["edgeops"] == __import__("edgeops").__version__
    # the sysroot has no edgeops of its own: the board runs the pushed wheel
    lib = qemu_board.path(".edgeops/lib")
    assert (agent["pushed"] or {}).get("into", lib) == lib

    # other inputs: the board's outputs match ONNX Runtime on the original model, here
    img = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", image=img)
    _json(capsys, ["run", str(demo_rpi5), "--to", to, "--inputs", str(tmp_path / "in.npz"),
                   "--out", str(tmp_path / "out.npz"), "--runs", "1", "--json"])
    want = package.ort_outputs(build_sample_model(), {"image": img})["logits"]
    with np.load(tmp_path / "out.npz") as z:
        got = z["logits"]
    assert np.abs(got - want).max() <= package.load(demo_rpi5).tolerance * np.abs(want).max()

    b = _json(capsys, ["bench", str(demo_rpi5), "--to", to, "--runs", "3", "--profile-runs", "1",
                       "--json"])
    assert b["under_qemu"] and b["latency_s"]["p50"] <= b["latency_s"]["p99"]
    neon = [r for r in b["nodes"] if r["where"] == "neon"]
    assert neon and all(r["measured_s"] and r["predicted_s"] for r in neon)

    d = _json(capsys, ["doctor", "--to", to, "--runs", "5", "--json"])
    checks = {r["name"]: r for r in d["checks"]}
    assert len(checks) == 23 and d["machine"] == "aarch64"
    assert d["ok"], [r for r in d["checks"] if r["status"] == "fail"]
    assert "asimd" in checks["cpu-features"]["detail"]
    assert checks["board-match"]["status"] == "ok"
